"""The bottom layer: records between seams, registries, random streams, declared state, errors, capabilities.

Nothing here imports a turnout package above it; :mod:`turnout.config` sits at the same level.
"""

#: The release (``turnout.__version__``; config.yaml and summary.json record it).
__version__ = "0.1.0"
