"""The experiment file: one block per simulation seam, plus variants and seeds to compare.

```yaml
name: quickstart
seeds: [0, 1, 2]
rounds: 100
data:        {name: synthetic, alpha: 0.5, beta: 0.5}
model:       {name: logreg}
train:       {batch_size: 10, local_epochs: 1, lr: 0.05}
algorithm:   {name: fedavg}
selector:    {name: uniform, clients_per_round: 10}
availability: {name: always}
devices:     {name: homogeneous}
round_mode:  {name: wait_all}
compressor:  {name: none}
executor:    {name: sequential}
recorder:    {name: csv}
eval:        {every: 5, target_accuracy: 0.7}
variants:
  - {name: K=5,  set: {selector.clients_per_round: 5}}
  - {name: K=20, set: {selector.clients_per_round: 20}}
```

Component blocks are kept as plain dicts here and validated against the registered component's
own ``Config`` by :func:`turnout.config.loader.resolve`, so adding a component never touches this file.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from ..core.errors import ConfigError
from .base import PathText, StrictModel
from .limits import MAX_BATCH, MAX_EPOCHS, MAX_ROUNDS, MAX_SEED, MAX_STATE_MB

#: Plugins an experiment may load, and live loggers a unit may feed.
MAX_PLUGINS, MAX_LOGGERS = 64, 16

#: A run seed. Every random stream is keyed by the seed as one 32-bit word, so larger or negative
#: seeds would alias smaller ones (2^32 would repeat seed 0); they are refused instead.
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]


class EvalConfig(StrictModel):
    """When and how the server model is evaluated, and the target the *_to_target metrics count to."""

    every: int = Field(1, ge=1, le=MAX_ROUNDS,
                       description="evaluate on the server test set every n rounds (and after the last)")
    per_client: bool = Field(False, description="also evaluate every client's local test part at the end")
    target_accuracy: float | None = Field(None, gt=0.0, le=1.0, description="report rounds/time/bytes to reach it")
    batch_size: int = Field(2048, ge=1, le=MAX_BATCH,
                            description="test samples per evaluation forward pass")
    centralized_baseline: bool = Field(False, description="also train the model on the union of client training "
                                                          "data and report its test accuracy (a ceiling)")
    centralized_epochs: int = Field(30, ge=1, le=MAX_EPOCHS, description="epochs of the centralized_baseline "
                                                                         "training")


class OutputConfig(StrictModel):
    """What a run shows and draws besides its tables."""

    plots: bool = Field(True, description="draw accuracy_vs_*.png in the run folder")
    progress: bool = Field(True, description="show a progress bar (also off with `turnout run --quiet`)")


class RuntimeConfig(StrictModel):
    """Resources the simulation may use: CPU threads, and RAM for per-client state before it spills to disk."""

    torch_threads: int = Field(1, ge=1, le=256, description="intra-op threads; 1 is fastest for small models")
    state_budget_mb: float = Field(1024.0, gt=0.0, le=MAX_STATE_MB,
                                   description="RAM for per-client model-sized state (control variates, memories, "
                                               "residuals); beyond it rows spill to a memory-mapped file (at most "
                                               "16 TiB)")
    device: str = Field("cpu", pattern=r"^(cpu|cuda|cuda:[0-9]{1,2}|mps|auto)$",
                        description="where local training runs: cpu, cuda, cuda:N, mps or auto (the first of cuda, "
                                    "mps, cpu that is available); evaluation runs there too, and aggregation when "
                                    "every component can (the run's summary says where it ran)")
    cudnn_benchmark: bool = Field(True, description="on a GPU, let cuDNN time its convolution algorithms once per "
                                                    "shape and keep the fastest (grouped convolutions of vectorized "
                                                    "clients gain most); results stay within the GPU tolerance")
    num_cpus: float = Field(1.0, gt=0.0, le=1024.0, description="CPUs a unit asks of Ray (--backend ray)")
    num_gpus: float = Field(0.0, ge=0.0, le=64.0, description="GPUs a unit asks of Ray (--backend ray; fractions "
                                                                "share a GPU)")
    checkpoint_every_rounds: int | None = Field(
        None, ge=1, le=MAX_ROUNDS, description="also checkpoint each unit every this many rounds (null: by time only)")
    checkpoint_every_s: float | None = Field(
        120.0, gt=0.0, le=86400.0, description="checkpoint each unit when this many wall-clock seconds have passed "
                                               "since its last checkpoint (null: by rounds only); a crash loses at "
                                               "most this much work")


class VariantConfig(StrictModel):
    name: str = Field(min_length=1, max_length=80)
    set: dict[str, Any] = Field(default_factory=dict, description="dotted key → value overrides")

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        bad = set(v) & set('/\\\n\r\t"')
        if bad:
            raise ValueError(f"variant names may not contain {sorted(bad)}")
        if any(unicodedata.category(c) == "Cc" for c in v):
            raise ValueError("variant names may not contain control characters")
        return v


class ExperimentConfig(StrictModel):
    """A whole experiment: the seams' blocks, the rounds, the seeds and the variants to compare."""

    name: str = Field("experiment", min_length=1, max_length=80, pattern=r"^[A-Za-z0-9_.+=-]+$")
    seeds: list[Seed] = Field(default_factory=lambda: [0], min_length=1, max_length=100,
                              description="one simulated population each; 0 <= seed < 2^32")
    rounds: int = Field(100, ge=1, le=MAX_ROUNDS)
    data: dict[str, Any] = Field(default_factory=lambda: {"name": "synthetic"})
    model: dict[str, Any] = Field(default_factory=lambda: {"name": "logreg"})
    train: dict[str, Any] = Field(default_factory=dict)
    algorithm: dict[str, Any] = Field(default_factory=lambda: {"name": "fedavg"})
    selector: dict[str, Any] = Field(default_factory=lambda: {"name": "uniform"})
    availability: dict[str, Any] = Field(default_factory=lambda: {"name": "always"})
    devices: dict[str, Any] = Field(default_factory=lambda: {"name": "homogeneous"})
    round_mode: dict[str, Any] = Field(default_factory=lambda: {"name": "wait_all"})
    compressor: dict[str, Any] = Field(default_factory=lambda: {"name": "none"})
    executor: dict[str, Any] = Field(default_factory=lambda: {"name": "sequential"})
    recorder: dict[str, Any] = Field(default_factory=lambda: {"name": "csv"})
    privacy: dict[str, Any] = Field(default_factory=lambda: {"name": "none"},
                                    description="client-level differential privacy: clipping, noise, accounting")
    secure_aggregation: dict[str, Any] = Field(default_factory=lambda: {"name": "none"},
                                               description="SecAgg / SecAgg+ as a cost and failure model")
    eval: EvalConfig = EvalConfig()
    output: OutputConfig = OutputConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    no_train: bool = Field(False, description="system-only what-if mode: simulate availability, selection, round "
                                              "modes, bytes and time without training a model (`turnout run "
                                              "--no-train`)")
    plugins: list[PathText] = Field(
        default_factory=list, max_length=MAX_PLUGINS,
        description="modules or .py files to import before validation; what they register is usable by name")
    loggers: list[Any] = Field(default_factory=list, max_length=MAX_LOGGERS,
                               description="live loggers fed every round: names or {name, options} blocks")
    variants: list[VariantConfig] = Field(default_factory=list, max_length=200)
    grid: dict[str, list[Any]] = Field(
        default_factory=dict, description="dotted key → list of values: one variant per combination (crossed with "
                                          "every explicit variant)")

    # Whole-model checks raise ConfigError themselves, naming the key: a pydantic error raised by a
    # model validator has no location, so it would name no key and show the whole config as the value.
    @model_validator(mode="before")
    @classmethod
    def _seed_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "seed" in data:
            if "seeds" in data:
                raise ConfigError("seed", data["seed"], "give either seed or seeds, not both")
            data = dict(data)
            seed = data.pop("seed")
            data["seeds"] = [seed]
        return data

    @model_validator(mode="after")
    def _unique(self):
        seen: set[int] = set()
        for i, seed in enumerate(self.seeds):
            if seed in seen:
                raise ConfigError(f"seeds[{i}]", seed, f"seeds must be distinct; {seed} is listed twice")
            seen.add(seed)
        first: dict[str, int] = {}
        for i, v in enumerate(self.variants):
            if v.name in first:
                raise ConfigError(f"variants[{i}].name", v.name,
                                  f"variant names must be distinct; variants[{first[v.name]}] is already named so")
            first[v.name] = i
        return self
