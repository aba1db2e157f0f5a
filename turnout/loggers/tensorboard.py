"""TensorBoard: per-round scalars and the resolved config (HParams and text) in event files.

Written with tensorboardX (a small pure-Python writer: ``pip install 'turnout[tensorboard]'``); the
``tensorboard`` program reads them. Each unit is the run ``variant/seed`` under ``log_dir``.
"""

from __future__ import annotations

from typing import Optional

import yaml
from pydantic import Field

from ..config.base import PathText, StrictModel
from .base import LOGGERS, Logger, LogRun


@LOGGERS.register("tensorboard")
class TensorBoardLogger(Logger):
    """TensorBoard event files: every round's metrics (step = round) and the config as HParams, one run per unit."""

    class Config(StrictModel):
        log_dir: Optional[PathText] = Field(None, description="folder of the TensorBoard runs (relative: to the run "
                                                              "folder); null: the run folder's tensorboard/")
        flush_secs: float = Field(10.0, gt=0.0, le=3600.0, description="seconds between flushes to disk")

    requires = (("tensorboardX", "tensorboard"),)

    def __init__(self, cfg: Config, run: LogRun):
        super().__init__(cfg, run)
        from tensorboardX import SummaryWriter
        from tensorboardX.summary import hparams

        self.dir = run.path(cfg.log_dir, "tensorboard") / run.variant / str(run.seed)
        self.writer = SummaryWriter(logdir=str(self.dir), flush_secs=cfg.flush_secs)
        if run.start_round == 0:
            for summary in hparams(run.params(), {}):
                self.writer.file_writer.add_summary(summary)
            text = yaml.safe_dump(run.config, sort_keys=False)
            self.writer.add_text("config", "```yaml\n" + text + "```", global_step=0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, global_step=step)

    def close(self, summary: dict | None) -> None:
        self.writer.close()
