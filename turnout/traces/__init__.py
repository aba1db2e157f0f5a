"""Client availability traces: turnout's safe ``.npz`` format, a calibrated generator, FedScale import.

* :mod:`turnout.traces.format` — :class:`AvailabilityTrace` (periodic online intervals as flat
  arrays, exact vectorised lookups) and :func:`save_trace` / :func:`load_trace`.
* :mod:`turnout.traces.generate` — FedScale-schema synthetic traces calibrated to the Stunner
  online-fraction histogram (:func:`generate_trace`).
* :mod:`turnout.traces.fedscale` — one-off conversion of FedScale's pickled
  ``client_behave_trace`` / ``client_device_capacity`` files (the only module that unpickles,
  with a restricted unpickler, and only when a user asks for it). Not imported here.
"""

from .format import FORMAT_VERSION, AvailabilityTrace, TraceFileError, load_trace, save_trace
from .generate import Calibration, GeneratorConfig, generate_trace, load_calibration

__all__ = ["FORMAT_VERSION", "AvailabilityTrace", "TraceFileError", "load_trace", "save_trace",
           "Calibration", "GeneratorConfig", "generate_trace", "load_calibration"]
