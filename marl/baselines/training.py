"""What the trainers of the published learned schedulers share: trace windows held out by time, the
discounted returns of a simulated episode, progress files and the paired comparison table."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DAY = 86_400.0
REWARDS = ("throughput", "jct")


@dataclass(frozen=True)
class WindowsConfig:
    """Consecutive windows of a trace: ``count`` of ``days`` each, ``stride_days`` apart, the first at
    ``start`` (seconds from the trace's first arrival)."""

    start: float = 0.0
    count: int = 1
    days: float = 2.0
    stride_days: float = 2.0

    def specs(self, trace: str, load: float) -> list[str]:
        out = []
        for k in range(self.count):
            t0 = self.start + k * self.stride_days * DAY
            out.append(f"{trace},start={t0:.0f},end={t0 + self.days * DAY:.0f},load={load}")
        return out


def returns_at(times: np.ndarray, arrival: np.ndarray, end: np.ndarray, reward: str, tau: float) -> np.ndarray:
    """The discounted return from each of ``times`` on, of one episode whose jobs arrived at ``arrival``
    and finished at ``end`` (constant ``tau`` seconds): ``throughput`` counts every completion ``c`` after
    ``t`` as ``exp(-(c - t) / tau)``; ``jct`` is minus the discounted job-hours spent in the system after
    ``t`` (the average JCT's integrand). Computed in chunks of times."""
    out = np.empty(len(times))
    for lo in range(0, len(times), 256):
        t = times[lo : lo + 256, None]
        if reward == "throughput":
            out[lo : lo + 256] = np.where(end[None, :] > t, np.exp(-(end[None, :] - t) / tau), 0.0).sum(axis=1)
        else:
            a = np.maximum(arrival[None, :], t)
            inside = end[None, :] > t
            stay = tau * (np.exp(-(a - t) / tau) - np.exp(-(np.maximum(end[None, :], a) - t) / tau))
            out[lo : lo + 256] = -np.where(inside, stay, 0.0).sum(axis=1) / 3600.0
    return out


def write_progress(rows: list[dict[str, Any]], path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


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


__all__ = ["DAY", "REWARDS", "WindowsConfig", "paired_table", "returns_at", "write_progress"]
