"""``turnout check``: validate an experiment without running it, and show what each variant resolves to.

Without ``--data`` the check is static and takes a second: every key and value of every variant
(after ``--set``), component names, the combination rules, the files that options name (dataset
directories, traces, capacity CSVs must exist), and that variants share the seeds. What needs the
data itself is left to ``--data``, because building a dataset can take minutes (60,000 images
read and partitioned): it builds every dataset and constructs every (variant, seed) simulation —
the pre-flight ``turnout run`` does before it creates a run folder — so a model that does not fit
the data or more clients per round than the dataset has clients are caught too. Neither trains.
"""

from __future__ import annotations

from ..config.loader import QUIET_WHEN_OFF, ResolvedExperiment
from ..config.options import as_yaml, changed_options
from ..core.errors import ConfigError
from ..runs.plan import prepare, require_shared_seeds, where_prefix
from ..sim import plugins
from ..sim.catalogue import BLOCKS
from ..sim.engine import Simulation

STATIC = ("every key and value, component names, combination rules, files named in options, shared seeds; "
          "not built: the datasets (add --data to build them and construct every simulation)")
WITH_DATA = ("every key and value, component names, combination rules, files named in options, shared seeds; "
             "every dataset built and every (variant, seed) simulation constructed")


def preflight(variants: list[ResolvedExperiment]) -> None:
    """Build the datasets and every (variant, seed) simulation once, as ``turnout run`` does before writing."""
    plan = prepare(variants)
    for exp in plan.variants:
        for seed in plan.seeds:
            try:
                Simulation(exp, plan.dataset_for(exp, seed), seed)
            except ConfigError as exc:
                raise ConfigError(where_prefix(plan.variants, exp) + exc.key, exc.value, exc.allowed) from None


def check(variants: list[ResolvedExperiment], build_data: bool = False) -> None:
    """Raise :class:`ConfigError` for anything that would stop ``turnout run`` before its first round."""
    require_shared_seeds(variants)
    if build_data:
        preflight(variants)


def _options(changed: dict) -> str:
    return " ".join(f"{k}={as_yaml(v)}" for k, v in changed.items())


def describe_variant(exp: ResolvedExperiment) -> list[str]:
    """A variant as its seams' components with their non-default options, and the blocks it changes."""
    cfg = exp.config
    lines = [f"{exp.variant}: {cfg.rounds} rounds, seeds {as_yaml(list(cfg.seeds))}"]
    for seam, comp in exp.components.items():
        if seam in QUIET_WHEN_OFF and comp.name == "none":  # switched off, as config.yaml leaves it out
            continue
        lines.append(f"  {seam:<13} {comp.name:<20} {_options(changed_options(comp.cfg))}".rstrip())
    blocks = {"train": exp.train, **{k: getattr(cfg, k) for k in BLOCKS if "." not in k and k != "train"}}
    for key, block in blocks.items():
        changed = changed_options(block)
        if changed:
            lines.append(f"  {key:<13} {'':<20} {_options(changed)}")
    for comp in exp.loggers:
        lines.append(f"  {'logger':<13} {comp.name:<20} {_options(changed_options(comp.cfg))}".rstrip())
    if cfg.no_train:
        lines.append(f"  {'no_train':<13} {'true':<20} system-only: no model is trained or evaluated")
    return lines


def summary_lines(source: str, variants: list[ResolvedExperiment], build_data: bool) -> list[str]:
    """What ``turnout check`` prints: a verdict naming what was checked, then every resolved variant."""
    seeds = variants[0].config.seeds
    head = (f"{source}: valid ({len(variants)} variant{'s' * (len(variants) != 1)} × {len(seeds)} "
            f"seed{'s' * (len(seeds) != 1)}; nothing was run). Checked: {WITH_DATA if build_data else STATIC}.")
    lines = [head, "Options are shown where they differ from the component's default."]
    for p in plugins.load(variants[0].config.plugins):
        lines.append(f"plugin {p.spec} (sha256 {p.sha256[:12]}…): registers {', '.join(p.registers) or 'nothing new'}")
    for exp in variants:
        lines += describe_variant(exp)
    return lines
