"""Test-session settings: one torch thread (small models run fastest single-threaded, and the
2-core CI machine is shared by the test process and the engine's own work)."""

import torch

torch.set_num_threads(1)
