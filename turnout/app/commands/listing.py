"""``turnout list [SEAM | SEAM.NAME | BLOCK | experiments]``: the registered components and their options."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...core.errors import ConfigError
from .. import bundled
from .options import add_plugin_arg


def add_parser(sub) -> None:
    ls = sub.add_parser("list", help="list every registered component per seam (with a seam: their options)")
    ls.add_argument("seam", nargs="?", default=None,
                    help="show the options of a seam's components, one component's or a block's (e.g. compressor, "
                         "selector.sticky, data.partition.dirichlet, train, eval, loggers), or `experiments`: "
                         "the experiments bundled with turnout")
    add_plugin_arg(ls)


def run(args: argparse.Namespace) -> int:
    if args.seam == "experiments":
        print("\n".join(bundled.listing_lines()))
        return 0
    return cmd_list(args.seam, args.plugins)


def _find_listing(what: str) -> tuple[str, str]:
    """``SEAM``, ``SEAM.NAME`` (longest seam first: ``data.partition.dirichlet``) or a block → (key, component)."""
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...sim.catalogue import BLOCKS, listed_registries

    regs = listed_registries()
    if what in regs or what in BLOCKS:
        return what, ""
    for seam in sorted(regs, key=len, reverse=True):
        if what.startswith(seam + "."):
            name = what[len(seam) + 1:]
            regs[seam].get(name, "list SEAM.NAME")  # unknown component: one-line error naming the choices
            return seam, name
    raise ConfigError("list SEAM", what, f"choose one of: {', '.join([*regs, *BLOCKS])} (or SEAM.NAME)")


def cmd_list(seam: str | None = None, plugin_specs: list[str] = ()) -> int:
    # lazy: a command imports only what it runs (`turnout --help`, `list` start without torch)
    from ...config.options import option_lines
    from ...core.registry import describe
    from ...sim import plugins
    from ...sim.catalogue import BLOCKS, listed_registries

    plugins.load(plugins.anchor(list(plugin_specs), Path.cwd()), "--plugin", indexed=False)
    key, only = _find_listing(seam) if seam is not None else ("", "")
    regs = {k: r for k, r in listed_registries().items() if seam is None or k == key}
    for name_of_seam, reg in regs.items():
        print(f"{name_of_seam}  ({reg.doc})")
        for name, cls in reg:
            if only and name != only:
                continue
            source = plugins.origin(cls)
            print(f"  {name:<22} {describe(cls)}" + (f"  [plugin {source}]" if source else ""))
            if seam is not None:
                for line in option_lines(cls.Config):
                    print(f"      {line}")
    blocks = {k: m for k, m in BLOCKS.items() if seam is None or k == key}
    if seam is None and blocks:
        print("blocks without components (options at the top of the block, e.g. train: {lr: 0.1})")
    for name, model in blocks.items():
        print(f"  {name:<22} {describe(model)}")
        for line in option_lines(model):
            print(f"      {line}")
    return 0
