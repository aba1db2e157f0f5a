"""The per-client state store keeps rows in RAM up to its budget, then spills to disk, losslessly."""

import numpy as np
import torch

from turnout.world.state_store import ClientStateStore


def test_unseen_clients_read_zeros_and_cost_nothing():
    st = ClientStateStore(dim=5, num_clients=1000, budget_bytes=10_000)
    assert st.get("c", np.array([3, 999])).abs().sum() == 0
    assert not st.has("c", np.array([3])).any()
    assert st.stats()["state_rows"] == 0 and st.peak_ram_bytes == 0


def test_round_trip_across_ram_and_spill(tmp_path):
    dim = 7
    st = ClientStateStore(dim=dim, num_clients=50, budget_bytes=3 * dim * 4, spill_dir=tmp_path)
    rng = np.random.default_rng(0)
    truth = {}
    for _ in range(6):
        clients = rng.choice(50, size=4, replace=False)
        vals = torch.from_numpy(rng.normal(size=(4, dim)).astype(np.float32))
        st.put("x", clients, vals)
        for c, v in zip(clients.tolist(), vals):
            truth[c] = v.clone()
    st.put("y", np.array([1]), torch.ones(1, dim))
    ids = np.array(sorted(truth))
    torch.testing.assert_close(st.get("x", ids), torch.stack([truth[c] for c in ids]))
    assert st.get("y", np.array([1, 2]))[0].sum() == dim and st.get("y", np.array([2])).sum() == 0
    stats = st.stats()
    assert stats["state_rows"] == len(truth) + 1
    assert stats["state_peak_ram_bytes"] <= 3 * dim * 4  # never above the budget
    assert stats["state_spilled_bytes"] == (len(truth) + 1 - 3) * dim * 4
    assert any(tmp_path.iterdir())
    st.close()
    assert not any(tmp_path.iterdir())  # spill files are removed with the store
