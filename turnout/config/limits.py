"""Upper bounds on size-like and scale-like options.

Far above any real experiment, low enough that an absurd value (``local_steps: 1e30``,
``dim: 1e8``, ``server_lr: 1e308``) is refused at validation with one line instead of
overflowing an integer, asking numpy for petabytes, or diverging in round 1. Whether a
config that passes these bounds fits in memory is checked separately, before any work, by
:func:`turnout.runs.preflight.check_resources`.
"""

from __future__ import annotations

#: Clients in a population (10^7; the population benchmark runs 10^6).
MAX_CLIENTS = 10_000_000
#: Rounds of one run.
MAX_ROUNDS = 1_000_000
#: Local SGD steps per round, minibatch size, samples per client.
MAX_STEPS = 1_000_000
MAX_BATCH = 1_000_000
MAX_SAMPLES = 100_000_000
#: Passes over local data per round, and epochs of the centralised baseline.
MAX_EPOCHS = 10_000
#: Feature dimension and number of classes of generated data; widths of model layers.
MAX_FEATURES = 1_000_000
MAX_CLASSES = 100_000
MAX_WIDTH = 1_000_000
#: Learning rates (client and server) and other multiplicative scales.
MAX_LR = 100.0
MAX_SERVER_LR = 1_000.0
MAX_SCALE = 1_000.0
#: Characters of a path or URI option (Linux's PATH_MAX).
MAX_PATH = 4096
#: Simulated seconds (a deadline, a window, an offset): about 32 years.
MAX_SECONDS = 1e9
#: Seconds of compute per training sample (an hour).
MAX_S_PER_SAMPLE = 3_600.0
#: Bandwidth in kilobytes per second: from 1 byte/s to 1 TB/s.
MIN_KBPS, MAX_KBPS = 1e-3, 1e9
#: Availability traces to generate.
MAX_TRACES = 100_000_000
#: RAM for per-client state, in MiB (16 TiB); also the cap of any other memory budget.
MAX_STATE_MB = float(16 << 20)
#: Seeds are 32-bit: every random stream is keyed by the seed as one 32-bit word.
MAX_SEED = 2**32 - 1
#: Retries, probes and other small counters.
MAX_COUNT = 1_000_000
