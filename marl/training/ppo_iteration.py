"""One PPO iteration that fails loudly: RLlib carries on when its env runners fail, and would then train on
nothing and export the warm start as if trained."""

from __future__ import annotations

from typing import Any


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out


def train_iteration(algo: Any, iteration: int) -> dict[str, Any]:
    """``algo.train()``, refused when no env runner sampled a step.

    RLlib takes a failed EnvRunner out of service and carries on; when all of them failed, PPO would go on
    updating nothing and export the warm start as if trained. Stop instead, with the cause: the runners'
    tracebacks stay in Ray's worker logs, so the driver builds and resets one environment of the same config
    and, when that fails, raises its error from here.
    """
    result = algo.train()
    if not _num(result.get("env_runners", {}).get("num_env_steps_sampled", 0)) > 0:
        head = f"PPO iteration {iteration} sampled no environment step: every env runner failed"
        cause = _env_failure(algo)
        if cause is not None:
            raise RuntimeError(
                f"{head}; building and resetting the environment here fails the same way: "
                f"{type(cause).__name__}: {cause}"
            ) from cause
        raise RuntimeError(
            f"{head} (the environment builds and resets here, so the error is in a later step: see Ray's worker "
            "logs under /tmp/ray/session_latest/logs); fix it and train again"
        )
    return result


def _env_failure(algo: Any) -> Exception | None:
    """The error of building and resetting one environment of ``algo``'s config in this process, if any."""
    config = getattr(algo, "config", None)
    env_cls = getattr(config, "env", None)
    if not isinstance(env_cls, type):
        return None  # a registered name: nothing to build here
    try:
        env_cls(dict(getattr(config, "env_config", None) or {})).reset(seed=0)
    except Exception as exc:  # the runners' own failure, replayed for its traceback
        return exc
    return None
