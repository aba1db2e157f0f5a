"""The bottom layer: records between seams, registries, random streams, declared state, errors, capabilities.

Nothing here imports another turnout package except :mod:`turnout.config`'s neighbours at the same level.
"""
