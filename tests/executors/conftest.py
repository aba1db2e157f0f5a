"""Fixtures shared by the executor tests."""

import pytest


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray per test module, stopped at its end: 8 logical CPUs, so the module's executors can hold
    actors at once (Ray counts slots, not cores)."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    if started:
        ray.shutdown()
