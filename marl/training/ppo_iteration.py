"""One PPO iteration that fails loudly: RLlib carries on when its env runners fail, and would then train on
nothing and export the warm start as if trained."""

from __future__ import annotations

import time
from typing import Any

RESTARTS_IN_A_ROW = 8  # iterations whose every runner failed, each after Ray restarted them, before giving up


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out


def train_iteration(algo: Any, iteration: int, wait_s: float = 180.0, log: Any = None) -> dict[str, Any]:
    """``algo.train()``, repeated while restarted EnvRunners come back (or, asynchronous, while the first
    batches are on their way), refused when none sampled a step.

    RLlib takes a failed EnvRunner out of service and carries on with the others. When every one failed
    (one runner, killed), the iteration sampled nothing: with ``restart_failed_env_runners`` Ray Core
    restarts them, so the iteration is run again for up to ``wait_s`` seconds (or until the restarted runners
    failed :data:`RESTARTS_IN_A_ROW` times in a row: a failure of theirs, not a lost process), and ``log`` says
    so. Past that, or where the environment itself fails, PPO would go on updating nothing and export the warm start
    as if trained. Stop instead, with the cause: the runners' tracebacks stay in Ray's worker logs, so the
    driver builds and resets one environment of the same config and, when that fails, raises its error here.
    """
    deadline = time.monotonic() + wait_s
    failures = 0
    while True:
        result = algo.train()
        if _num(result.get("env_runners", {}).get("num_env_steps_sampled", 0)) > 0:
            return result
        healthy = _num((result.get("fault_tolerance") or {}).get("num_healthy_workers", 0))
        if healthy > 0 and time.monotonic() < deadline:  # asynchronous (APPO): no batch has arrived yet
            continue
        head = f"PPO iteration {iteration} sampled no environment step: every env runner failed"
        cause = _env_failure(algo)
        if cause is not None:
            raise RuntimeError(
                f"{head}; building and resetting the environment here fails the same way: "
                f"{type(cause).__name__}: {cause}"
            ) from cause
        restarts = bool(getattr(getattr(algo, "config", None), "restart_failed_env_runners", False))
        failures += 1
        # restarted runners that fail again and again fail the same way: a killed one comes back in seconds
        if not restarts or time.monotonic() > deadline or failures > RESTARTS_IN_A_ROW:
            raise RuntimeError(
                f"{head} (the environment builds and resets here, so the error is in a later step, or in what this "
                "process has and the runners lack: a path relative to this directory on another node, a module only "
                "this process imported; see Ray's worker logs under /tmp/ray/session_latest/logs); fix it and train "
                "again"
            )
        if log is not None:
            log(f"iteration {iteration}: every EnvRunner failed; waiting for Ray to restart them")
        time.sleep(2.0)


def _env_failure(algo: Any, resets: int = 8) -> Exception | None:
    """The error of building one environment of ``algo``'s config in this process and resetting it ``resets``
    times (each reset draws another window, where a runner's failure may lie), if any."""
    config = getattr(algo, "config", None)
    env_cls = getattr(config, "env", None)
    if not isinstance(env_cls, type):
        return None  # a registered name: nothing to build here
    try:
        env = env_cls(dict(getattr(config, "env_config", None) or {}))
        for seed in range(resets):
            env.reset(seed=seed)
    except Exception as exc:  # the runners' own failure, replayed for its traceback
        return exc
    return None
