"""Results pages: one markdown table per metric across run folders, plus curves, from finished runs.

A reproduction runs the same variants in several settings (availability modes, partitions), one
run folder each; the page puts the settings side by side (columns) for every variant (rows), as
the seed papers' tables do, with mean ± std over seeds and the best entry of each column in bold.
Everything is read back from the run folders' ``summary.json``, ``config.yaml`` and rounds table, so
a page can be rebuilt without re-running anything.

Variants of one experiment are compared seed by seed: for a given seed they share the population
(data partition, initial model, device profiles, availability draws), so the page also gives each
variant's per-seed difference from a baseline variant with a paired t interval over the seeds. Run
folders of the same experiment run a variant at a time (``turnout run ... --variant NAME``) are one
comparison, one column; folders that share no variant but are not of the same experiment stay apart,
and the page says why.
Every empty cell ("—") carries a footnote saying why it is empty.

The rooms: :mod:`.folders` reads run folders back, :mod:`.targets` recounts the to-target metrics to another
target (``--target``), :mod:`.tables` computes the statistics and tables,
:mod:`.curves` the curves' numbers, :mod:`.page` writes the page; the figures are drawn by
:mod:`turnout.recorders.plots`.
"""

from .page import write_report

__all__ = ["write_report"]
