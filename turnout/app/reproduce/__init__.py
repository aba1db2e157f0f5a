"""``turnout reproduce``: the seed papers' results pages, run, recorded and checked from the package.

A page (``turnout/pages/NAME.yaml``) names the experiment settings a results page of ``docs/results/`` is made
from; its record (``turnout/pages/records/NAME.json``) holds what the page was made from and the numbers of a
short *check slice*, cut at the horizon measured under every emulated CPU family, so that ``--check`` holds on
any CPU by construction (docs/determinism.md).
"""
