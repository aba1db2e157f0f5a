"""The run layer: plans, units, sweeps and their backends, the run folder, checkpoints, pre-flight, progress.

It drives the round loop (:mod:`turnout.sim`) and never knows which algorithm runs.
"""
