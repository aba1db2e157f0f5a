"""Worker processes that start from turnout's own entry point and never run the user's script.

``multiprocessing``'s ``spawn`` start method prepares every child by importing the parent's main
module again: by path (``init_main_from_path``, as ``__mp_main__``) when it is a script, by name
when it was run with ``-m``. A user's script that calls ``turnout.run(..., jobs=2)`` at top level,
with no ``if __name__ == "__main__":`` guard, therefore starts one more run in every worker — each
finds the run folder locked, dies, and the owner sees its workers fail for no reason it can name.
``forkserver`` children go through the same preparation, and ``fork`` copies a process that may
already hold torch's thread pools (unsafe, and not what macOS allows by default).

So a worker here is a plain ``python -c`` subprocess whose code imports only this module; it
receives, over its pipe, the owner's ``sys.path`` and the *name* of a turnout function to run
(``module:qualname``) and imports that. Nothing of the user's ``__main__`` is ever imported, so it
works the same from a script, ``python -c``, ``python -m`` and a notebook. The pipe is a socket
pair wrapped in :class:`multiprocessing.connection.Connection`, so both ends speak the pickled
messages ``multiprocessing``'s own pipes carry, and a worker that dies closes its end: its pipe
turns readable (end of file), which is how an owner waiting on pipes learns of it.

A worker's standard error is forwarded to the owner's, line by line, by a thread that keeps the
last lines: a worker that dies — even before it could import anything — is reported with its
own last error line (:meth:`WorkerProcess.last_error`) instead of a guess. POSIX only (the pipe
is passed as an inherited file descriptor).
"""

from __future__ import annotations

import collections
import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path

#: the directory ``turnout`` is imported from: the child finds this module there whatever its cwd
_ROOT = str(Path(__file__).resolve().parents[2])
_BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from turnout.core.worker_process import _child; _child()"
#: stderr lines a worker keeps for its one-line report
_TAIL = 20


class StopEvent:
    """A one-way flag that worker processes can read: set once by the owner, seen by every worker.

    A pipe nobody reads from: setting it writes a byte, and it is set while its read end is
    readable. It survives being handed to :class:`WorkerProcess` children by file descriptor,
    where a ``multiprocessing.Event`` can only reach children that ``multiprocessing`` starts.
    """

    def __init__(self, fd: int | None = None):
        if fd is None:
            self.fd, self._write = os.pipe()
        else:  # a child's view of its owner's event
            self.fd, self._write = fd, None

    def set(self) -> None:
        if self._write is not None and not self.is_set():
            os.write(self._write, b"x")

    def is_set(self) -> bool:
        return bool(select.select([self.fd], [], [], 0)[0])

    def close(self) -> None:
        for fd in (self.fd, self._write):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.fd = self._write = None


class WorkerProcess:
    """``target(conn, *args)`` in a fresh interpreter; ``conn`` is this side of the pipe to it.

    ``target`` must be a module-level function of an importable module (it is sent by name) and
    ``args`` picklable; ``fds`` are file descriptors the child inherits under the same numbers.
    Mirrors what the pools used of ``multiprocessing.Process``: ``pid``, ``sentinel``,
    ``is_alive``, ``exitcode``, ``join``, ``terminate``, ``kill``.
    """

    def __init__(self, target, args: tuple = (), fds: tuple[int, ...] = (), name: str = "turnout-worker",
                 echo: bool = True):
        ours, theirs = socket.socketpair()
        env = dict(os.environ, TURNOUT_WORKER_FD=str(theirs.fileno()))
        try:
            # echo=False: a child whose libraries talk on their own (Ray's driver prints its daemons' logs)
            # keeps quiet; its stderr is still read, for its last error line.
            self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, _ROOT, name], stdin=subprocess.DEVNULL,
                                         stdout=None if echo else subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         pass_fds=(theirs.fileno(), *fds), env=env)
        finally:
            theirs.close()
        self.name = name
        self.conn = Connection(ours.detach())
        self._tail: collections.deque[str] = collections.deque(maxlen=_TAIL)
        self._relay = threading.Thread(target=_relay, args=(self.proc.stderr, self._tail, echo), daemon=True,
                                       name=f"{name}-stderr")
        self._relay.start()
        self.conn.send((list(sys.path), target.__module__, target.__qualname__, tuple(args)))

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def sentinel(self) -> Connection:
        """Readable once the worker has something to say or is gone (its end of the pipe closed)."""
        return self.conn

    @property
    def exitcode(self) -> int | None:
        """Its exit status once it ended (``-N``: killed by signal ``N``), else None."""
        return self.proc.poll()

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def join(self, timeout: float | None = None) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        if self.is_alive():
            self.proc.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self.proc.kill()

    def last_error(self, wait_s: float = 1.0) -> str:
        """Its last non-blank line of standard error (waiting up to ``wait_s`` for the rest to arrive)."""
        if not self.is_alive():
            self._relay.join(timeout=wait_s)
        return next((line for line in reversed(self._tail) if line.strip()), "").strip()

    def describe_exit(self, limit: int = 160) -> str:
        """``exited with code 1: ModuleNotFoundError: ...`` — how it ended and its own last error line, if any."""
        code = self.exitcode
        if code is None:
            how = "is not responding"
        elif code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        last = self.last_error()
        last = last if len(last) <= limit else last[:limit - 3] + "..."
        return f"{how}: {last}" if last else how


def _relay(stream, tail: collections.deque, echo: bool = True) -> None:
    """Copy a worker's stderr to ours (when ``echo``), keeping its last lines."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        tail.append(line)
        if not echo:
            continue
        try:
            sys.stderr.write(line)
            sys.stderr.flush()
        except (OSError, ValueError):  # our stderr went away: keep draining theirs
            pass
    stream.close()


def _child() -> None:
    """The worker's side: receive (sys.path, module, function, args) and run ``function(conn, *args)``."""
    conn = Connection(int(os.environ.pop("TURNOUT_WORKER_FD")))
    try:
        path, module, qualname, args = conn.recv()
    except (EOFError, OSError):  # the owner went away before saying anything
        os._exit(0)
    sys.path[:] = path + [p for p in sys.path if p not in path]  # the owner's order: its plugins resolve alike
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    target(conn, *args)
