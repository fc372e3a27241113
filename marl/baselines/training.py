"""What the trainers of the published learned schedulers share: their configs' checks, trace windows held out
by time, the discounted returns of a simulated episode, progress files and the paired comparison table."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cluster_sim.traces.periods import DAY, TraceTime, refuse_report_period, window_spec
from marl.training.config import ConfigChecker


@dataclass(frozen=True)
class WindowsConfig:
    """Consecutive windows of a trace: ``count`` of ``days`` each, ``stride_days`` apart, the first at
    ``start`` (seconds from the trace's first arrival)."""

    start: TraceTime = 0.0  # type: ignore[assignment]  # seconds, or a date (2017-10-15)
    count: int = 1
    days: float = 2.0
    stride_days: float = 2.0

    @property
    def end(self) -> float:
        """Where the last window ends (seconds)."""
        return self.start + (self.count - 1) * self.stride_days * DAY + self.days * DAY

    def specs(self, trace: str, load: float) -> list[str]:
        out = []
        for k in range(self.count):
            t0 = self.start + k * self.stride_days * DAY
            out.append(window_spec(trace, t0, t0 + self.days * DAY, load))
        return out


def start_config(
    cls: type, data: Any, source: str, lines: dict | None, agent: str, chk: ConfigChecker | None = None
) -> tuple[Any, ConfigChecker]:
    """The config dataclass ``cls`` read from plain data, and the checker that names file, line and key in
    the errors of the checks that follow (``chk``: one already made, e.g. for a section of a larger file); the
    ``agent`` key must name this trainer."""
    chk = chk or ConfigChecker(source, lines or {})
    if not isinstance(data, dict):
        raise chk.fail((), f"the file must hold a mapping with keys {chk.allowed(cls)}")
    cfg = dataclasses.replace(chk.section(cls, data, ()), source=source)
    if cfg.agent != agent:
        raise chk.fail(("agent",), f"this trainer trains {agent!r}, got {cfg.agent!r}")
    return cfg, chk


def check_positive(chk: ConfigChecker, values: Iterable[tuple[tuple[str, ...], float]], *, zero: bool = False) -> None:
    """Each (key path, value) must be > 0 (>= 0 with ``zero``)."""
    for path, value in values:
        if value < 0 or (value == 0 and not zero):
            raise chk.fail(path, f"must be {'>=' if zero else '>'} 0, got {value}")


def check_policies(chk: ConfigChecker, names: Iterable[tuple[tuple[str, ...], str]]) -> None:
    """Each (key path, name) must name a registered heuristic."""
    from cluster_sim.policies import get_policy

    for path, name in names:
        try:
            get_policy(name)
        except ValueError as err:
            raise chk.fail(path, str(err)) from None


def check_windows(chk: ConfigChecker, env: Any, names: Iterable[str]) -> None:
    """The ``env`` window sets ``names`` are well formed, and validation starts after training ends."""
    for name in names:
        w: WindowsConfig = getattr(env, name)
        if w.count < 0 or w.days <= 0 or w.stride_days <= 0:
            raise chk.fail(("env", name), "needs count >= 0, days > 0 and stride_days > 0")
    for name in ("train", "validation"):  # the windows that fit or choose: never the report period's
        w = getattr(env, name)
        if name in names and w.count:
            try:
                refuse_report_period(f"env.{name}", w.start, w.end, getattr(env, "trace", "philly:"))
            except ValueError as err:
                raise chk.fail(("env", name, "start"), str(err).partition(": ")[2]) from None
    tw = env.train
    train_end = tw.end
    if env.validation.count and tw.start >= env.validation.start:  # the training's own start is what moved
        raise chk.fail(
            ("env", "train", "start"),
            f"the training windows start at {tw.start:.0f} s, not before the validation windows "
            f"(env.validation.start {env.validation.start:.0f} s): train on earlier dates than those that choose",
        )
    if env.validation.count and train_end > env.validation.start + 1:
        raise chk.fail(
            ("env", "validation", "start"),
            f"validation windows must start after the last training window ends at {train_end:.0f} (held out by time)",
        )


def paired_table(results: dict[str, list[float]], reference: str) -> list[dict[str, Any]]:
    """Mean, std and the mean ± std of the per-window ratio to ``reference`` for every scheduler."""
    ref = np.asarray(results[reference])
    rows = []
    for name, vals in results.items():
        v = np.asarray(vals)
        rel = v / ref - 1
        rows.append(
            {
                "scheduler": name,
                "mean_avg_jct": float(v.mean()),
                "std": float(v.std()),
                "vs_reference": float(rel.mean()),
                "vs_reference_std": float(rel.std()),
            }
        )
    return rows


__all__ = [
    "DAY",
    "WindowsConfig",
    "check_policies",
    "check_positive",
    "check_windows",
    "paired_table",
    "start_config",
]
