"""Shared test fixtures."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The public traces in ``../shared/traces`` next to the repository; skips when they are absent."""
    path = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    if not path.is_dir():
        pytest.skip(f"public traces not found at {path}")
    return path


@pytest.fixture(scope="module")
def ray_local():
    """In-process Ray for one test module: 2 CPUs and a small object store, as on a 2-core laptop."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, object_store_memory=100 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
