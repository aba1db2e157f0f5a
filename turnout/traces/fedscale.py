"""One-off conversion of FedScale's pickled system traces into turnout's safe formats.

This is the **only** module of turnout that unpickles, and only when a user runs
``turnout trace import``. ``pickle.load`` can run arbitrary code, so the file is read with
:class:`RestrictedUnpickler`: plain dicts, lists, tuples, strings and numbers build without any
global lookup, and the only globals it will resolve are ``builtins.set``/``frozenset`` (older
protocols, which spell them ``__builtin__`` up to protocol 2) and numpy's scalar reconstructor
with ``numpy.dtype`` (a FedScale value may be a ``numpy.float64``), and those only for plain
numbers and text with the dtype state numpy itself writes (:class:`_PlainDtype`); anything else —
``os.system``, ``builtins.eval``, any class — is refused before it is called. Even plain data
can exhaust memory or time (a few hundred bytes that share one list 2**40 ways, a dict key
whose hash never ends), so :func:`prescan` walks the opcodes first and refuses what such data
never needs; see its docstring for the limits.

Schemas (FedScale ``benchmark/dataset/data/device_info/``; see ``docs/algorithms/world.md#traces``):

* ``client_behave_trace``: ``{key: {'duration': int s, 'inactive': [int s], 'finish_time': int s,
  'active': [int s], 'model': str}}`` — client online during ``[active[i], inactive[i]]`` of
  every period of ``finish_time`` seconds; ``duration`` is the total online time.
* ``client_device_capacity``: ``{key: {'computation': ms/sample, 'communication': kbps}}``
  (+ ``'dl_kbps'``, ``'ul_kbps'`` in GlueFL's ``_ul_dl`` variants).

Dict order is kept: FedScale assigns traces by position in ``list(dict.keys())``.

Normalisation on import (counted in :class:`ImportReport`): intervals are sorted, overlapping
or touching intervals merged (closed intervals sharing a point are one online stretch),
intervals starting at or after ``finish_time`` dropped (FedScale's ``t mod finish_time`` never
reaches them) and ends clipped to ``finish_time``. Anything that cannot be read unambiguously —
a missing key, a non-number, ``active[i] > inactive[i]``, a negative time, different list
lengths, a ``finish_time`` below one second — is a one-line :class:`DataError` naming the entry.
"""

from __future__ import annotations

import io
import operator
import os
import pickle
import pickletools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import DataError, shown
from ..world.population import DeviceProfiles
from .trace import AvailabilityTrace
from .validate import MAX_PERIOD_S, MIN_PERIOD_S, period_problem

BEHAVIOR_KEYS = ("duration", "inactive", "finish_time", "active", "model")
BEHAVIOR_REQUIRED = ("active", "inactive", "finish_time")
CAPACITY_KEYS = ("computation", "communication")
LINK_KEYS = ("dl_kbps", "ul_kbps")

_NUMPY_GLOBALS = {("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "dtype")}
_ALLOWED_GLOBALS = {
    ("builtins", "set"), ("builtins", "frozenset"), ("__builtin__", "set"), ("__builtin__", "frozenset"),
} | _NUMPY_GLOBALS
#: Globals whose call on plain arguments gives a leaf value (a number, a dtype), not a container.
_LEAF_GLOBALS = {f"{m}.{n}" for m, n in _NUMPY_GLOBALS}

#: Largest pickle imported. FedScale's are tens of MB (client_device_capacity: 500,000 entries);
#: importing one takes about 25 bytes of memory per byte of pickle (every small object it builds).
MAX_PICKLE_BYTES = 128 << 20
#: Deepest nesting of values (and of open MARKs) accepted. A FedScale trace nests four levels
#: (dict of dicts of lists of numbers; a numpy scalar's dtype state adds two); deeper values
#: are refused before they reach code that recurses over them.
MAX_NESTING = 32
#: Characters that memo references may re-use, per byte of pickle, beyond :data:`SHARED_CHARS_FREE`.
#: A FedScale pickle references each dict key and device-model string once per entry, well under
#: one character per byte; a bomb references a long string from many two-byte GETs (and numpy
#: copies it into a scalar each time, or the importer into the model array).
SHARED_CHARS_PER_BYTE = 4
SHARED_CHARS_FREE = 1 << 20
#: Longest device-model name imported (FedScale's are like "SM-G960F"): the trace stores every
#: client's model in one fixed-width array, so one long name would cost its length per client.
MAX_MODEL_CHARS = 128

#: Opcodes that build plain data: numbers, strings, bytes, lists, tuples, dicts, sets, the memo,
#: and calls of the globals in :data:`_ALLOWED_GLOBALS` (REDUCE, BUILD for a numpy dtype's state).
#: Object construction (INST, OBJ, NEWOBJ*), persistent ids, extension codes, out-of-band buffers
#: and DUP are never emitted for such data.
_ATOM_OPS = frozenset("""INT BININT BININT1 BININT2 LONG LONG1 LONG4 NONE NEWTRUE NEWFALSE FLOAT
    BINFLOAT""".split())
_TEXT_OPS = frozenset("STRING BINSTRING SHORT_BINSTRING UNICODE SHORT_BINUNICODE BINUNICODE BINUNICODE8".split())
_BYTES_OPS = frozenset("BINBYTES SHORT_BINBYTES BINBYTES8".split())
_EMPTY_OPS = frozenset("EMPTY_LIST EMPTY_DICT EMPTY_SET EMPTY_TUPLE".split())
_FROM_MARK_OPS = frozenset("LIST TUPLE DICT FROZENSET".split())
_ADD_MARK_OPS = frozenset("APPENDS SETITEMS ADDITEMS".split())
_TUPLE_N = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_GET_OPS = frozenset("GET BINGET LONG_BINGET".split())
_PUT_OPS = frozenset("PUT BINPUT LONG_BINPUT".split())
_NOOP_OPS = frozenset("PROTO FRAME".split())


#: Kinds of numpy dtype rebuilt: bool, integers, floats, complex (numbers) and str (text).
_PLAIN_KINDS = "biufcU"
_numpy_scalar = np.float64(0).__reduce__()[0]  # numpy's scalar reconstructor, whatever module holds it


class _PlainDtype:
    """What an unpickled ``numpy.dtype`` becomes: a plain dtype that only numpy's own state can BUILD.

    ``dtype.__setstate__`` trusts its state: a forged one (fields the names lack, object fields,
    offsets beyond the item size, a wrong item size) makes the scalar built from it crash the
    process or read outside its bytes. So the state must equal the one numpy writes for the dtype
    in either byte order, and the dtype itself is never handed out (only scalars of it are).
    """

    __slots__ = ("dtype", "states")

    def __init__(self, spec, align=False, copy=False):
        if not isinstance(spec, str) or len(spec) > 16:
            raise pickle.UnpicklingError(f"refused numpy dtype {shown(spec, 40)}")
        dtype = np.dtype(spec)
        if dtype.kind not in _PLAIN_KINDS:  # structured, subarray (kind V), object, datetime, bytes
            raise pickle.UnpicklingError(f"refused numpy dtype {spec!r} (plain numbers and text only)")
        self.dtype = dtype
        self.states = [(d.__reduce__()[2], d) for d in (dtype.newbyteorder("<"), dtype.newbyteorder(">"))]

    def __setstate__(self, state) -> None:
        for want, dtype in self.states:  # compared entry by entry and type by type: 1 == True, dtype == None
            if type(state) is tuple and len(state) == len(want) and all(
                    type(a) is type(b) and a == b for a, b in zip(state, want)):
                self.dtype = dtype
                return
        raise pickle.UnpicklingError(f"refused numpy dtype state {shown(state)} for {self.dtype.str!r}")

    def __repr__(self) -> str:
        return f"numpy.dtype({self.dtype.str!r})"


def _plain_scalar(dtype, data=None):
    """numpy's scalar reconstructor for a :class:`_PlainDtype` and exactly its item size of bytes;
    text must be valid UTF-32 (numpy would build lone surrogates, or fail on code points beyond U+10FFFF)."""
    if not isinstance(dtype, _PlainDtype) or type(data) is not bytes or len(data) != dtype.dtype.itemsize:
        raise pickle.UnpicklingError("refused a numpy scalar that is not a plain number or text of its dtype's size")
    if dtype.dtype.kind == "U":
        data.decode("utf-32-be" if dtype.dtype.str[0] == ">" else "utf-32-le")
    return _numpy_scalar(dtype.dtype, data)


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves no globals except a few constructors that cannot run code; numpy's
    are replaced by :class:`_PlainDtype` and :func:`_plain_scalar`."""

    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED_GLOBALS:
            if module.startswith("numpy"):
                return _PlainDtype if name == "dtype" else _plain_scalar
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused persistent id")


class _Refused(Exception):
    """A pickle the pre-scan will not hand to the unpickler; the message ends "… it <reason>"."""


class _Value:
    """What the pre-scan knows of a value on the unpickler's stack or in its memo.

    ``kind`` is "leaf" (number, None, bool, and a numpy dtype or scalar made from leaves),
    "text", "bytes", "global" or "container"; ``depth`` how deeply it nests (0 for leaves);
    ``chars`` the characters of text it holds; ``name`` a short text or a global's dotted name;
    ``shared`` whether a memo reference (GET) has fetched it.
    """

    __slots__ = ("kind", "depth", "chars", "name", "shared")

    def __init__(self, kind: str, depth: int = 0, chars: int = 0, name: str | None = None):
        self.kind, self.depth, self.chars, self.name, self.shared = kind, depth, chars, name, False


_LEAF = _Value("leaf")
_depth, _chars = operator.attrgetter("depth"), operator.attrgetter("chars")


def _deeper(depth: int, pos: int) -> int:
    if depth > MAX_NESTING:
        raise _Refused(f"nests values {depth} levels deep at byte {pos} (turnout imports at most {MAX_NESTING})")
    return depth


def prescan(data: bytes) -> None:
    """Refuse a pickle that plain data would not produce, before unpickling anything.

    Walks the opcodes (:func:`pickletools.genops`) keeping a model of the unpickler's stack and
    memo, and raises :class:`_Refused` for: an opcode outside the plain-data set, a global
    outside :data:`_ALLOWED_GLOBALS`, values nested more than :data:`MAX_NESTING` deep, a memo
    reference (GET) to a container — one list or tuple referenced from several places is how a
    few hundred bytes expand to 2**40 elements, or to a dict key whose hash takes 2**40 steps —
    or memo references re-using more than :data:`SHARED_CHARS_PER_BYTE` characters per byte.
    Malformed opcode streams raise ``ValueError``.
    """
    stack: list = []
    marks: list[int] = []
    memo: dict[int, _Value] = {}
    shared_chars, shared_limit = 0, SHARED_CHARS_PER_BYTE * len(data) + SHARED_CHARS_FREE

    def top() -> _Value:
        if not stack or (marks and marks[-1] == len(stack)):
            raise ValueError("stack underflow")
        return stack[-1]

    def pop() -> _Value:
        top()
        return stack.pop()

    def pop_mark() -> list:
        if not marks:
            raise ValueError("no MARK to pop to")
        at = marks.pop()
        items = stack[at:]
        del stack[at:]
        return items

    def container(items, pos: int) -> _Value:
        return _Value("container", _deeper(1 + max(map(_depth, items), default=0), pos), sum(map(_chars, items)))

    def add(target: _Value, items, pos: int) -> None:
        if target.kind != "container":
            raise ValueError("adding items to a value that is not a container")
        target.depth = max(target.depth, _deeper(1 + max(map(_depth, items), default=0), pos))
        target.chars += sum(map(_chars, items))

    for op, arg, pos in pickletools.genops(data):
        name = op.name
        if name in _ATOM_OPS:
            stack.append(_LEAF)
        elif name in _TEXT_OPS:
            stack.append(_Value("text", chars=len(arg), name=arg if isinstance(arg, str) and len(arg) <= 200 else None))
        elif name in _BYTES_OPS:
            stack.append(_Value("bytes", chars=len(arg)))
        elif name in _EMPTY_OPS:
            stack.append(_Value("container", 1))
        elif name == "MARK":
            if len(marks) >= MAX_NESTING:
                raise _Refused(f"opens more than {MAX_NESTING} nested MARKs at byte {pos}")
            marks.append(len(stack))
        elif name in _FROM_MARK_OPS:
            stack.append(container(pop_mark(), pos))
        elif name in _TUPLE_N:
            items = [pop() for _ in range(_TUPLE_N[name])]
            stack.append(container(items, pos))
        elif name == "APPEND":
            item = pop()
            add(top(), [item], pos)
        elif name == "SETITEM":
            items = [pop(), pop()]
            add(top(), items, pos)
        elif name in _ADD_MARK_OPS:
            items = pop_mark()
            add(top(), items, pos)
        elif name == "POP":
            if marks and marks[-1] == len(stack):
                marks.pop()
            else:
                pop()
        elif name == "POP_MARK":
            pop_mark()
        elif name in _PUT_OPS or name == "MEMOIZE":
            memo[len(memo) if name == "MEMOIZE" else arg] = top()
        elif name in _GET_OPS:
            if arg not in memo:
                raise ValueError(f"memo reference {arg} to nothing")
            value = memo[arg]
            if value.kind in ("container", "bytes"):
                raise _Refused(f"references one {'container' if value.kind == 'container' else 'bytes object'} "
                               f"from several places (memo GET at byte {pos}), as shared-reference bombs do")
            shared_chars += value.chars
            if shared_chars > shared_limit:
                raise _Refused(f"re-uses {shared_chars} characters through memo references from a {len(data)}-byte "
                               "file, as string bombs do")
            value.shared = True
            stack.append(value)
        elif name in ("GLOBAL", "STACK_GLOBAL"):
            if name == "GLOBAL":
                module, _, attr = arg.partition(" ")
            else:
                attr_v, module_v = pop(), pop()
                module, attr = module_v.name or "?", attr_v.name or "?"
            if (module, attr) not in _ALLOWED_GLOBALS:
                raise _Refused(f"asks for global {module}.{attr}"[:200])
            stack.append(_Value("global", name=f"{module}.{attr}"))
        elif name == "REDUCE":
            args, func = pop(), pop()
            if func.kind != "global":
                raise ValueError("REDUCE of a value that is not a global")
            if func.name in _LEAF_GLOBALS and args.depth <= 1:  # a dtype, or a scalar (of its text)
                stack.append(_Value("leaf", chars=args.chars))
            else:
                stack.append(_Value("container", _deeper(max(args.depth, 1), pos), args.chars))
        elif name == "BUILD":
            state = pop()
            target = top()
            if target is _LEAF or target.kind not in ("leaf", "container"):
                raise ValueError("BUILD on a value that no allowed global made")
            if target.shared:
                raise _Refused(f"changes a value after referencing it from several places (BUILD at byte {pos})")
            if target.kind == "container" or state.depth > 1:
                target.kind, target.depth = "container", max(target.depth, _deeper(state.depth + 1, pos))
        elif name == "STOP":
            return
        elif name not in _NOOP_OPS:
            raise _Refused(f"uses pickle opcode {name}")
    raise ValueError("no STOP opcode")


def safe_unpickle(path: str | os.PathLike) -> object:
    """Read a pickle with :class:`RestrictedUnpickler` after :func:`prescan`; problems are one-line
    :class:`DataError`."""
    p = Path(path)
    where = f"FedScale file {str(p)!r}"
    try:
        size = p.stat().st_size
        if size > MAX_PICKLE_BYTES:
            raise DataError(f"{where} is {size / 1e6:.0f} MB, more than the {MAX_PICKLE_BYTES / 1e6:.0f} MB turnout "
                            "imports (FedScale's own files are tens of MB); check that it is a FedScale trace")
        data = p.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{where} not found") from None
    except OSError as exc:
        raise DataError(f"{where} cannot be read ({exc.strerror or exc})") from None
    if data[:2] == b"PK":
        raise DataError(f"{where} is a zip/.npz archive, not a FedScale pickle; "
                        "an .npz trace can be used directly (availability.path)")
    try:
        prescan(data)
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except _Refused as exc:
        raise DataError(f"{where} was refused: it {exc}, which a FedScale trace (dicts of numbers, lists and "
                        "strings) never needs; it may be malicious") from None
    except MemoryError:
        raise DataError(f"{where} needs more memory to unpickle than this process can get") from None
    except Exception as exc:  # whatever the opcode walk or the allowed constructors raise on bad input
        raise DataError(f"{where} is not a readable pickle ({type(exc).__name__}: {_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    """An exception's message, cut to 100 characters without formatting any of its other arguments."""
    arg = str(exc) if isinstance(exc, UnicodeError) else exc.args[0] if exc.args else ""  # args[0]: the codec
    text = " ".join(arg[:300].split()) if isinstance(arg, str) else ""
    return (text if len(text) <= 100 else text[:97] + "...") or type(exc).__name__


@dataclass
class ImportReport:
    """What normalisation an import had to do."""

    traces: int = 0
    intervals: int = 0
    merged: int = 0
    dropped: int = 0
    clipped: int = 0
    unsorted_traces: int = 0

    def summary(self) -> str:
        extra = [f"{v} {k.replace('_', ' ')}" for k, v in
                 (("merged", self.merged), ("dropped", self.dropped), ("clipped", self.clipped),
                  ("unsorted_traces", self.unsorted_traces)) if v]
        return f"{self.traces} traces, {self.intervals} intervals" + (f" ({', '.join(extra)})" if extra else "")


def _number(v) -> float | None:
    """``v`` as a finite float, or None for anything else (a bool, a huge int, a structured numpy value)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    try:
        f = float(v)
    except OverflowError:  # an int beyond float64, such as 10**400
        return None
    return f if np.isfinite(f) else None


def _top_dict(obj, path, what: str) -> dict:
    if not isinstance(obj, dict):
        raise DataError(f"FedScale file {str(path)!r} holds a {type(obj).__name__}, expected the {what} dict "
                        "{client_key: {...}}")
    if not obj:
        raise DataError(f"FedScale file {str(path)!r} is an empty dict; expected the {what}")
    return obj


def behavior_from_dict(obj, source: str = "<dict>") -> tuple[AvailabilityTrace, ImportReport]:
    """A FedScale ``client_behave_trace`` dict → :class:`AvailabilityTrace` (+ what was normalised)."""
    d = _top_dict(obj, source, "client_behave_trace")
    rep = ImportReport(traces=len(d))
    starts, ends, counts, periods, models = [], [], [], [], []
    for key, v in d.items():
        where = f"FedScale behaviour trace {source!r} entry {shown(key, 40)}"
        if not isinstance(v, dict):
            raise DataError(f"{where} is a {type(v).__name__}, expected a dict with keys {', '.join(BEHAVIOR_KEYS)}")
        missing = [k for k in BEHAVIOR_REQUIRED if k not in v]
        if missing:
            raise DataError(f"{where} lacks {', '.join(missing)}; expected keys {', '.join(BEHAVIOR_KEYS)}")
        period = _number(v["finish_time"])
        problem = "is not a finite number" if period is None else period_problem(period)
        if problem:
            raise DataError(f"{where}: finish_time = {shown(v['finish_time'])} {problem}; expected a number of seconds "
                            f"> 0, from {MIN_PERIOD_S:g} to {MAX_PERIOD_S:g}")
        act, ina = v["active"], v["inactive"]
        if not isinstance(act, (list, tuple)) or not isinstance(ina, (list, tuple)):
            raise DataError(f"{where}: active and inactive must be lists of seconds")
        if len(act) != len(ina):
            raise DataError(f"{where}: active has {len(act)} entries but inactive has {len(ina)}")
        s = np.empty(len(act))
        e = np.empty(len(act))
        for i, (a, b) in enumerate(zip(act, ina)):
            fa, fb = _number(a), _number(b)
            if fa is None or fb is None:
                raise DataError(f"{where}: active[{i}] = {shown(a, 40)}, inactive[{i}] = {shown(b, 40)}; "
                                "expected finite numbers")
            s[i], e[i] = fa, fb
        bad = (s < 0) | (e < s)
        if bad.any():
            i = int(np.argmax(bad))
            raise DataError(f"{where}: interval {i} is [{s[i]:g}, {e[i]:g}]; expected 0 <= active <= inactive")
        model = v.get("model", "unknown")
        if not isinstance(model, str) or len(model) > MAX_MODEL_CHARS:
            raise DataError(f"{where}: model = {shown(model, 40)}, expected a device model name (a string of at most "
                            f"{MAX_MODEL_CHARS} characters)")
        if len(s) > 1 and np.any(np.diff(s) < 0):
            rep.unsorted_traces += 1
            o = np.argsort(s, kind="stable")
            s, e = s[o], e[o]
        keep = s < period
        rep.dropped += int((~keep).sum())
        s, e = s[keep], e[keep]
        rep.clipped += int((e > period).sum())
        e = np.minimum(e, period)
        if len(s) > 1:  # merge overlapping / touching closed intervals
            run_end = np.maximum.accumulate(e)
            new = np.ones(len(s), bool)
            new[1:] = s[1:] > run_end[:-1]
            first = np.flatnonzero(new)
            last = np.append(first[1:], len(s)) - 1
            rep.merged += len(s) - len(first)
            s, e = s[first], run_end[last]
        starts.append(s)
        ends.append(e)
        counts.append(len(s))
        periods.append(period)
        models.append(model)
    offsets = np.zeros(len(d) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    start = np.concatenate(starts) if starts else np.zeros(0)
    end = np.concatenate(ends) if ends else np.zeros(0)
    rep.intervals = len(start)
    return AvailabilityTrace(offsets, start, end, np.array(periods), np.array(models, dtype=str)), rep


def import_fedscale_behavior(pkl_path: str | os.PathLike, report: ImportReport | None = None) -> AvailabilityTrace:
    """Read FedScale's pickled ``client_behave_trace`` safely and convert it to a trace."""
    trace, rep = behavior_from_dict(safe_unpickle(pkl_path), str(pkl_path))
    if report is not None:
        report.__dict__.update(rep.__dict__)
    return trace


def export_fedscale_behavior(trace: AvailabilityTrace, keys=None) -> dict:
    """A trace as FedScale's ``client_behave_trace`` dict (keys ``0..N-1`` unless given)."""
    keys = range(trace.num_traces) if keys is None else keys
    return {k: trace.fedscale_dict_entry(i) for i, k in enumerate(keys)}


@dataclass
class CapacityTable:
    """FedScale capacity profiles as struct-of-arrays (one entry per profile, in file order)."""

    client: np.ndarray  # int64 profile keys (FedScale's dict keys)
    computation_ms_per_sample: np.ndarray  # float64
    communication_kbps: np.ndarray  # float64
    dl_kbps: np.ndarray | None = None
    ul_kbps: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.client)

    @property
    def has_links(self) -> bool:
        return self.dl_kbps is not None

    @classmethod
    def from_profiles(cls, profiles: DeviceProfiles, aug: float = 3.0, kilobit_bits: int = 1024) -> "CapacityTable":
        """Inverse of :meth:`FedScaleCapacity.profiles` (client ``i`` becomes row ``i``)."""
        bytes_per_kbit = kilobit_bits / 8.0
        down = profiles.down_bytes_per_s / bytes_per_kbit
        up = profiles.up_bytes_per_s / bytes_per_kbit
        return cls(np.arange(len(down), dtype=np.int64), profiles.compute_s_per_sample * 1000.0 / aug,
                   np.minimum(down, up), down, up)


def capacity_from_dict(obj, source: str = "<dict>"):
    """A FedScale ``client_device_capacity`` dict → :class:`CapacityTable`."""
    d = _top_dict(obj, source, "client_device_capacity")
    n = len(d)
    client = np.empty(n, np.int64)
    comp = np.empty(n)
    comm = np.empty(n)
    first = next(iter(d.values()))
    links = isinstance(first, dict) and all(k in first for k in LINK_KEYS)
    dl = np.empty(n) if links else None
    ul = np.empty(n) if links else None
    for i, (key, v) in enumerate(d.items()):
        where = f"FedScale capacity file {source!r} entry {shown(key, 40)}"
        if isinstance(key, bool) or not isinstance(key, (int, np.integer, str)):
            raise DataError(f"{where}: key must be an integer client id")
        try:
            client[i] = int(key)
        except (ValueError, OverflowError):  # not digits, or beyond int64
            raise DataError(f"{where}: key must be an integer client id (64-bit)") from None
        if not isinstance(v, dict):
            raise DataError(f"{where} is a {type(v).__name__}, expected {{'computation': ms, 'communication': kbps}}")
        need = CAPACITY_KEYS + (LINK_KEYS if links else ())
        missing = [k for k in need if k not in v]
        if missing:
            raise DataError(f"{where} lacks {', '.join(missing)}; expected keys {', '.join(need)}")
        c = _number(v["computation"])
        if c is None or c < 0:
            raise DataError(f"{where}: computation = {shown(v['computation'])}, expected a finite ms/sample >= 0")
        comp[i] = c
        for name, arr in (("communication", comm), ("dl_kbps", dl), ("ul_kbps", ul)):
            if arr is None:
                continue
            x = _number(v[name])
            if x is None or x <= 0:
                raise DataError(f"{where}: {name} = {shown(v[name])}, expected a finite bandwidth > 0 kbps "
                                "(remove or fix that profile before importing)")
            arr[i] = x
    return CapacityTable(client, comp, comm, dl, ul)


def import_fedscale_capacity(pkl_path: str | os.PathLike):
    """Read FedScale's pickled ``client_device_capacity`` safely → ``CapacityTable`` of arrays."""
    return capacity_from_dict(safe_unpickle(pkl_path), str(pkl_path))
