"""MLflow: per-round metrics, the resolved config as parameters, one MLflow run per unit.

Uses ``MlflowClient`` (no global "active run", so units in one process never share one) from
``mlflow-skinny``: ``pip install 'turnout[mlflow]'``. The tracking URI is the option, else
``$MLFLOW_TRACKING_URI``, else a file store in the run folder (``file:`` stores are in MLflow's
maintenance mode; naming one opts in, ``MLFLOW_ALLOW_FILE_STORE=true``).
"""

from __future__ import annotations

import os
import time
from typing import Optional

from pydantic import Field

from ..config.base import PathText, StrictModel
from .base import LOGGERS, Logger, LogRun, summary_metrics

#: MLflow's limits: parameters per batch call, characters of a parameter value
PARAMS_PER_BATCH, PARAM_CHARS = 100, 6000


@LOGGERS.register("mlflow")
class MLflowLogger(Logger):
    """MLflow tracking: every round's metrics (step = round) and the config as parameters, one run per unit."""

    class Config(StrictModel):
        tracking_uri: Optional[PathText] = Field(None, description="MLflow tracking URI (file:/..., http://...); "
                                                                   "null: $MLFLOW_TRACKING_URI, else "
                                                                   "file:<run folder>/mlruns")
        experiment: Optional[str] = Field(None, min_length=1, max_length=500,
                                          description="MLflow experiment name; null: the turnout experiment's name")

    requires = (("mlflow", "mlflow"),)

    def __init__(self, cfg: Config, run: LogRun):
        super().__init__(cfg, run)
        uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or run.path(None, "mlruns").absolute().as_uri()
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = run.recall("mlflow")
        if self.run_id is not None:
            self.client.update_run(self.run_id, status="RUNNING")
            return
        experiment_id = self._experiment(cfg.experiment or run.experiment)
        created = self.client.create_run(experiment_id, run_name=run.name,
                                         tags={"turnout.variant": run.variant, "turnout.seed": str(run.seed)})
        self.run_id = created.info.run_id
        run.remember("mlflow", self.run_id)
        params = [Param(k, str(v)[:PARAM_CHARS]) for k, v in run.params().items()]
        for i in range(0, len(params), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=params[i:i + PARAMS_PER_BATCH])

    def _experiment(self, name: str) -> str:
        """The experiment's id, created if missing (two workers may race to create it)."""
        for _ in range(2):
            found = self.client.get_experiment_by_name(name)
            if found is not None:
                return found.experiment_id
            try:
                return self.client.create_experiment(name)
            except Exception:  # noqa: BLE001  (created meanwhile by another unit: look it up again)
                continue
        return self.client.get_experiment_by_name(name).experiment_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def close(self, summary: dict | None) -> None:
        if summary is not None:
            from mlflow.entities import Metric

            now, step = int(time.time() * 1000), int(summary.get("rounds", 0))
            final = [Metric(f"summary/{k}", v, now, step) for k, v in summary_metrics(summary).items()]
            self.client.log_batch(self.run_id, metrics=final)
        self.client.set_terminated(self.run_id, status="FINISHED" if summary is not None else "KILLED")
