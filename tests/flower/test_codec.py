"""The wire format a deployment sends weighs what turnout's byte accounting charges."""

import numpy as np
import pytest
import torch

from turnout.compressors.base import sparse_bytes
from turnout.compressors.sparse import index_bytes
from turnout.flower import codec
from turnout.flower.protocol import Instruction, Report
from turnout.training.local_sgd import LocalObjective

DIM = 650  # the digits logistic regression: bitmap 82 bytes, so indices win up to 20 coordinates


@pytest.mark.parametrize("nnz", [0, 1, 20, 21, 22, 100, 500, 640, 649, 650])
def test_values_message_is_exactly_the_priced_size_and_exact(nnz):
    rng = np.random.default_rng(nnz)
    vec = rng.standard_normal(DIM).astype(np.float32)
    mask = np.zeros(DIM, bool)
    mask[rng.choice(DIM, nnz, replace=False)] = True
    form, arrays = codec.encode_values(vec, mask)
    assert codec.nbytes(arrays) == int(sparse_bytes(nnz, DIM))
    got_mask, values = codec.decode_values(form, arrays, DIM)
    if form == "dense":
        assert np.array_equal(values, vec)
    else:
        assert np.array_equal(got_mask, mask) and np.array_equal(values, vec[mask])
    assert form == {0: "empty", 1: "indices", 20: "indices", 21: "bitmap", 650: "dense"}.get(nnz, form)


@pytest.mark.parametrize("nnz", [0, 5, 300, 650])
def test_mask_message_is_the_priced_index_size(nnz):
    mask = np.zeros(DIM, bool)
    mask[:nnz] = True
    form, arrays = codec.encode_mask(mask)
    assert codec.nbytes(arrays) == int(index_bytes(nnz, DIM))
    assert np.array_equal(codec.decode_mask(form, arrays, DIM), mask)


def test_malformed_messages_are_refused():
    with pytest.raises(ValueError, match="outside"):
        codec.decode_values("indices", {"values": np.ones(1, np.float32), "index": np.array([DIM], np.int32)}, DIM)
    with pytest.raises(ValueError, match="carries"):
        codec.decode_values("dense", {"values": np.ones(3, np.float32)}, DIM)
    with pytest.raises(ValueError, match="names 2 positions"):
        codec.decode_values("indices", {"values": np.ones(1, np.float32), "index": np.array([1, 2], np.int32)}, DIM)


def test_instruction_and_report_round_trip_through_parts():
    offset = torch.arange(DIM, dtype=torch.float32)
    mask = torch.zeros(DIM, dtype=torch.bool)
    mask[:7] = True
    ins = Instruction(round=3, client=7, seed=11, steps=5, lr=0.125, base_round=1, sync_form="indices",
                      sync={"values": np.ones(2, np.float32), "index": np.array([4, 9], np.int32)}, weight=0.25,
                      tags={"sticky": True}, objective=LocalObjective(offset=offset, scale=0.5, prox_mu=0.1),
                      compressor_state={"shared_mask": mask})
    back = Instruction.from_parts(*ins.to_parts(), dim=DIM)
    assert (back.round, back.client, back.seed, back.steps, back.lr, back.base_round) == (3, 7, 11, 5, 0.125, 1)
    assert back.tags == {"sticky": True} and back.weight == 0.25 and not back.send_end
    assert torch.equal(back.objective.offset, offset) and back.objective.scale == 0.5
    assert back.objective.prox_mu == 0.1 and not back.objective.freeze
    assert torch.equal(back.compressor_state["shared_mask"], mask)
    assert ins.model_bytes() == 2 * 8 + DIM * 4 + 7 * 4  # sync + correction + the mask as 7 indices
    rep = Report(3, 7, *codec.encode_values(np.ones(DIM, np.float32), np.ones(DIM, bool)), upload_bytes=99,
                 mean_loss=0.5, samples=40, train_s=0.01, started_at=5.0)
    back = Report.from_parts(*rep.to_parts(), dim=DIM)
    assert back.upload_bytes == 99 and back.samples == 40 and torch.equal(back.vector(DIM), torch.ones(DIM))
