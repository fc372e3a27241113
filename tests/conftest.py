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
