"""Workload seed streams of the training environments' copies, distinct across EnvRunners and vector slots.

RLlib seeds the first reset of vector slot ``i`` of EnvRunner ``w`` with ``seed + w + i``, so with several
environments per runner, slot ``i + 1`` of runner ``w`` and slot ``i`` of runner ``w + 1`` would replay the
same workloads. With more than one environment per runner the runner index is mixed into that seed, which
makes every (runner, slot) pair draw its own stream; with one per runner the seed is used as given, as
before, so existing runs keep their workloads.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def runner_index(config: Any) -> int:
    """The EnvRunner index RLlib passes in the env's config (an EnvContext); 0 in the driver or in tests."""
    return int(getattr(config, "worker_index", 0) or 0)


def copy_offset(config: Any) -> int:
    """Seed offset of this environment copy before its first reset: 1000 per runner, 1 per vector slot."""
    return 1000 * runner_index(config) + int(getattr(config, "vector_index", 0) or 0)


def reset_generator(seed: int, config: Any, envs_per_runner: int) -> np.random.Generator:
    """The generator of workload seeds after ``reset(seed=seed)``."""
    if envs_per_runner > 1:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, runner_index(config)])))
    return np.random.Generator(np.random.PCG64(seed))
