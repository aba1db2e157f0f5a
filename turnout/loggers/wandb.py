"""Weights & Biases: per-round metrics and the resolved config, one W&B run per unit.

``pip install 'turnout[wandb]'``. ``mode: offline`` (or ``WANDB_MODE=offline``) writes the runs
under ``dir`` for a later ``wandb sync``; console capture is off so turnout's own output is untouched.
"""

from __future__ import annotations

import secrets
from typing import Literal, Optional

from pydantic import Field

from ..config.base import PathText, StrictModel
from .base import LOGGERS, Logger, LogRun, summary_metrics


@LOGGERS.register("wandb")
class WandbLogger(Logger):
    """Weights & Biases: every round's metrics (step = round) and the config, one run per unit (variant/seed)."""

    class Config(StrictModel):
        project: Optional[str] = Field(None, min_length=1, max_length=128,
                                       description="W&B project; null: the turnout experiment's name")
        entity: Optional[str] = Field(None, min_length=1, max_length=128, description="W&B entity (user or team)")
        mode: Optional[Literal["online", "offline", "disabled"]] = Field(
            None, description="null: W&B's own choice ($WANDB_MODE, else online)")
        dir: Optional[PathText] = Field(None, description="where W&B keeps its files (relative: to the run folder); "
                                                          "null: the run folder")

    requires = (("wandb", "wandb"),)

    def __init__(self, cfg: Config, run: LogRun):
        super().__init__(cfg, run)
        import wandb

        run_id = run.recall("wandb")
        if run_id is None:
            run_id = secrets.token_hex(6)
            run.remember("wandb", run_id)
        where = run.path(cfg.dir, ".")
        where.mkdir(parents=True, exist_ok=True)
        self.wb = wandb.init(project=cfg.project or run.experiment, entity=cfg.entity, name=run.name,
                             group=run.variant, config={**run.config, "variant": run.variant, "seed": run.seed},
                             dir=str(where), mode=cfg.mode, id=run_id, resume="allow", reinit="create_new",
                             settings=wandb.Settings(console="off", silent=True))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.wb.log(metrics, step=step)

    def close(self, summary: dict | None) -> None:
        if summary is not None:
            self.wb.summary.update({f"summary/{k}": v for k, v in summary_metrics(summary).items()})
        self.wb.finish(exit_code=0 if summary is not None else 1)
