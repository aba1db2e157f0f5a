"""Live loggers: every round's metrics streamed to an experiment tracker while a unit runs."""

from . import mlflow, tensorboard, wandb  # noqa: F401  (register components; their packages import lazily)
from .base import LOGGERS, Logger, LogRun, open_loggers

__all__ = ["LOGGERS", "LogRun", "Logger", "open_loggers"]
