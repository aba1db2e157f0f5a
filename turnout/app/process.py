"""The ``turnout`` process around a command: exit codes, signals, the traceback log, a closed pipe, warnings.

A command body raises; this module turns what it raised into one line on stderr and an exit code, so
user mistakes (bad config, missing data, bad arguments) exit 2 with no traceback and every command ends
the same way.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from pathlib import Path

from ..core.errors import ConfigWarning, TurnoutError

#: exit status of a user mistake (argparse's own)
EXIT_USAGE = 2

#: exit status when the reader of our output went away (128 + SIGPIPE, as a shell reports a command killed by it)
EXIT_PIPE = 141

_python_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """turnout's own warnings as one line (``turnout: warning: ...``); any other keeps Python's format."""
    if issubclass(category, ConfigWarning):
        print(f"turnout: warning: {message}", file=file or sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


warnings.showwarning = _show_warning


class _Boundary:
    """Where the run being executed lives, for the traceback log of an unexpected error."""

    folder: Path | None = None


BOUNDARY = _Boundary()


@contextlib.contextmanager
def stop_on_signals():
    """SIGINT/SIGTERM: checkpoint after the current round, then exit 130/143; a second signal stops at once."""
    import signal

    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..runs.unit import StopFlag

    stop = StopFlag()

    def handler(signum, frame):
        name = signal.Signals(signum).name
        if stop.requested:
            raise KeyboardInterrupt
        stop.signal = signum
        stop.request(f"interrupted by {name}")
        print(f"turnout: {name}: finishing the current round, then saving a checkpoint "
              "(send it again to stop at once)", file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _log_traceback(exc: BaseException) -> Path:
    """Write the full traceback to the run folder's logs/ (or a temp file) and return the path."""
    import tempfile
    import time
    import traceback

    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ..runs.rundir import partial_of

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    folder = BOUNDARY.folder
    candidates = []
    if folder is not None:
        folder = Path(folder)
        candidates = [folder if folder.name.endswith(".partial") else partial_of(folder), folder]
    for base in candidates:
        if base.is_dir():
            path = base / "logs" / f"error-{time.strftime('%Y%m%d-%H%M%S')}.log"
            try:
                path.parent.mkdir(exist_ok=True)
                path.write_text(text)
                return path
            except OSError:
                break
    fd, name = tempfile.mkstemp(prefix="turnout-error-", suffix=".log")
    with open(fd, "w") as f:
        f.write(text)
    return Path(name)


def ends_quietly_on_closed_pipe(body) -> int:
    """``body()``; output piped into ``head``, ``less`` or ``grep -m1`` ends quietly when the reader goes away:
    no message, exit 141, whatever the command (argparse's ``--help`` included)."""
    try:
        return body()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_PIPE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (a test's capture): nothing is flushed to a pipe
        pass


def exit_code_of(command) -> int:
    """Run ``command()`` and map what it raises to one stderr line and an exit code: a stopped run 130/143,
    a user mistake 2, an unexpected error 1 with its traceback logged (a closed pipe goes up to
    :func:`ends_quietly_on_closed_pipe`)."""
    try:
        return command()
    except TurnoutError as exc:
        if _interrupted(exc):
            print(f"turnout: {exc}", file=sys.stderr)
            return 128 + int(exc.stop_signal) if exc.stop_signal is not None else 130  # 130 SIGINT, 143 SIGTERM
        print(f"turnout: error: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # the reader went away: main ends quietly
    except KeyboardInterrupt:
        where = f"; the last checkpoint is in {BOUNDARY.folder}" if BOUNDARY.folder else ""
        print(f"turnout: stopped at once{where}", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug or an environment failure: one line here, the traceback in a log
        log = _log_traceback(exc)
        print(f"turnout: error: unexpected {type(exc).__name__}: {_one_line(str(exc))} (full traceback: {log})",
              file=sys.stderr)
        return 1


def _interrupted(exc: TurnoutError) -> bool:
    """Whether ``exc`` is a run stopped on request (``RunInterrupted``). Only a command that loaded the runs layer
    can raise one, so a command that did not (``turnout list experiments``) does not import it, nor torch."""
    experiment = sys.modules.get(f"{__package__.rpartition('.')[0]}.runs.experiment")
    return experiment is not None and isinstance(exc, experiment.RunInterrupted)


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
