"""What a results page runs: its settings, metrics, tuning step and check slice, read from ``turnout/pages/``.

A page is a YAML file beside the bundled experiments, so a pip user reproduces a paper without a checkout and
adding a page touches one new file. Experiment paths in it are bundled names (``gluefl/main.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ...config import safe_yaml
from ...core.errors import ConfigError
from ..bundled import root as experiments_root
from ..report.targets import TARGETS


@dataclass(frozen=True)
class Setting:
    """One column of a page: an experiment file and the ``--set`` values that make the setting."""

    name: str
    config: str  # a bundled experiment's path under turnout/experiments
    sets: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()  # variants not run in this setting (e.g. a column that would repeat another's run)

    @property
    def path(self) -> Path:
        return experiments_root() / self.config


@dataclass(frozen=True)
class Tune:
    """A grid run before the settings; the chosen value of ``key`` is passed to every setting."""

    settings: tuple[Setting, ...]
    key: str  # dotted config key the grid varies (and the settings receive)
    metric: str  # summary metric averaged over the tune settings and seeds
    lower_is_better: bool = True
    why: str = ""


@dataclass(frozen=True)
class Slice:
    """The check slice asked for: ``setting``, seed 0, at most ``rounds`` rounds, every variant (or ``variants``).

    The rounds it actually runs are cut at recording, at the horizon measured under every emulated CPU family
    (the record holds both)."""

    setting: str
    rounds: int
    variants: tuple[str, ...] = ()


@dataclass(frozen=True)
class Page:
    name: str
    title: str
    settings: tuple[Setting, ...]
    metrics: tuple[str, ...]
    slice: Slice
    curve: str = "loss"
    curve_x: tuple[str, ...] = ("round",)
    counts: tuple[str, ...] = ()
    percent_of: str | None = None
    baseline: str | None = None
    #: the metrics whose per-seed differences from the baseline the page shows (default: the report's)
    paired: tuple[str, ...] | None = None
    #: what the "to target" metrics count to: each run's ``eval.target_accuracy`` (``config``) or GlueFL's target,
    #: the highest accuracy every variant reaches (``reached_by_all``; docs/experiment-files.md)
    target: str = "config"
    tune: Tune | None = None
    extra: dict = field(default_factory=dict)

    def setting(self, name: str) -> Setting:
        return next(s for s in self.settings if s.name == name)


def pages_root() -> Path:
    """The folder of the page files (package data: ``turnout/pages``)."""
    return Path(str(resources.files("turnout").joinpath("pages")))


def names() -> list[str]:
    """Every page's name, in the order the overview lists them (file order is alphabetical; that is enough)."""
    return sorted(p.stem for p in pages_root().glob("*.yaml"))


def _setting(raw: dict, where: str) -> Setting:
    try:
        return Setting(str(raw["name"]), str(raw["config"]), tuple(raw.get("sets", ())), tuple(raw.get("skip", ())))
    except (KeyError, TypeError) as e:
        raise ConfigError(where, raw, "a setting needs name and config (sets and skip are optional)") from e


def load(name: str) -> Page:
    """The page ``name``; an unknown name is one :class:`ConfigError` listing the pages."""
    path = pages_root() / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError("PAGE", name, f"no such results page; the pages are: {', '.join(names())}")
    raw = safe_yaml.load(path.read_text(encoding="utf-8"))
    tune = raw.get("tune")
    sl = raw["slice"]
    page = Page(name=name, title=raw["title"],
                settings=tuple(_setting(s, f"{name}.settings") for s in raw["settings"]),
                metrics=tuple(raw["metrics"]),
                slice=Slice(sl["setting"], int(sl["rounds"]), tuple(sl.get("variants", ()))),
                curve=raw.get("curve", "loss"), curve_x=tuple(raw.get("curve_x", ("round",))),
                counts=tuple(raw.get("counts", ())), percent_of=raw.get("percent_of"), baseline=raw.get("baseline"),
                paired=tuple(raw["paired"]) if "paired" in raw else None,
                target=str(raw.get("target", "config")),
                tune=None if tune is None else Tune(
                    tuple(_setting(s, f"{name}.tune.settings") for s in tune["settings"]), tune["key"],
                    tune["metric"], bool(tune.get("lower_is_better", True)), tune.get("why", "")))
    untabulated = [m for m in page.paired or () if m not in page.metrics]
    if untabulated:
        raise ConfigError(f"{name}.paired", untabulated[0], f"pair only metrics the page tabulates: "
                                                            f"{', '.join(page.metrics)}")
    if page.target not in TARGETS:
        raise ConfigError(f"{name}.target", page.target, f"choose one of: {', '.join(TARGETS)}")
    if page.slice.setting not in {s.name for s in page.settings}:
        raise ConfigError(f"{name}.slice.setting", page.slice.setting,
                          f"not a setting of the page; one of: {', '.join(s.name for s in page.settings)}")
    return page
