"""PNG plots of an experiment (matplotlib, Agg backend; each file written atomically)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.results import save_figure


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(names: Sequence[str]) -> dict[str, Any]:
    cmap = _plt().get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {n: cmap(i % cmap.N) for i, n in enumerate(names)}


LINESTYLES = ("-", "--", "-.", ":")  # with the colours, curves that overlap stay told apart


def _style(name: str) -> dict[str, Any]:
    """Learned policies stand out: thick solid lines; heuristics thinner."""
    return {"lw": 2.6} if name.startswith("marl") else {"lw": 1.3}


def jct_cdf(jcts: Mapping[str, Sequence[np.ndarray]], path: Path) -> None:
    """Empirical CDF of job completion times per scheduler (all seeds pooled; log x axis)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    colors = _colors(list(jcts))
    drawn: list[tuple[str, np.ndarray]] = []
    for k, (name, arrays) in enumerate(jcts.items()):
        x = np.sort(np.concatenate([np.asarray(a, dtype=float) for a in arrays]) if arrays else np.zeros(0))
        x = x[x > 0]
        if len(x) == 0:
            continue
        y = np.arange(1, len(x) + 1) / len(x)
        # a curve equal to one drawn before would hide it: say so in the legend, and vary the dash pattern
        same = next((other for other, xs in drawn if len(xs) == len(x) and np.array_equal(xs, x)), None)
        label = f"{short_label(name)} (mean {x.mean() / 3600:.2f} h)" + (
            f", identical to {short_label(same)}" if same else ""
        )
        ax.step(x / 3600.0, y, where="post", label=label, color=colors[name],
                linestyle=LINESTYLES[k % len(LINESTYLES)], **_style(name))  # fmt: skip
        drawn.append((name, x))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF (all seeds pooled)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)


def timelines(series: Mapping[str, Mapping[str, np.ndarray]], path: Path, seed: int) -> None:
    """Queue length and GPU utilisation over simulated time, one line per scheduler, for one seed."""
    plt = _plt()
    fig, (ax_q, ax_u) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    colors = _colors(list(series))
    # the busy period is what differs between schedulers; a few long jobs can run on for days after it
    busy_end = max((float(np.asarray(s["t"])[np.asarray(s["queue"]) > 0].max(initial=0.0)) for s in series.values()),
                   default=0.0)  # fmt: skip
    t_end = max((float(np.asarray(s["t"]).max(initial=0.0)) for s in series.values()), default=0.0)
    for name, s in series.items():
        t = np.asarray(s["t"]) / 3600.0
        ax_q.plot(t, s["queue"], label=short_label(name), color=colors[name], **_style(name))
        ax_u.plot(t, 100.0 * np.asarray(s["utilization"]), label=short_label(name), color=colors[name], **_style(name))
    ax_q.set_ylabel("queued jobs")
    ax_q.set_title(f"Queue length over time (seed {seed})")
    ax_u.set_ylabel("GPUs busy (%)")
    ax_u.set_ylim(0, 105)
    ax_u.set_title(f"GPU utilisation over time (seed {seed})")
    if 0 < 2 * busy_end < t_end:
        ax_u.set_xlim(0, 2 * busy_end / 3600.0)
        ax_u.set_xlabel(f"simulated time (hours; first {2 * busy_end / 3600:.0f} h shown, twice the queueing period)")
    else:
        ax_u.set_xlabel("simulated time (hours)")
    for ax in (ax_q, ax_u):
        ax.grid(alpha=0.3)
    ax_q.legend(fontsize=8, ncol=3, loc="upper right")
    save_figure(fig, path)


def short_label(name: str) -> str:
    """A scheduler's name for an axis: a policy folder (``marl:experiments/policies/philly-small``) by its
    kind and folder name (``marl:philly-small``)."""
    prefix, colon, rest = name.partition(":")
    if colon and "/" in rest and prefix.isidentifier():
        return f"{prefix}:{Path(rest.rstrip('/')).name}"
    return name


def bars(values: Mapping[str, Sequence[float]], path: Path, ylabel: str) -> None:
    """Mean ± std over runs (seeds and workloads) per scheduler, best first."""
    plt = _plt()
    names = sorted(values, key=lambda n: float(np.mean(values[n])))
    colors = _colors(list(values))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.8 * len(names) + 2), 4.2))
    means = [float(np.mean(values[n])) for n in names]
    stds = [float(np.std(values[n])) for n in names]
    ax.bar([short_label(n) for n in names], means, yerr=stds, capsize=4, color=[colors[n] for n in names])
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} per scheduler (mean ± std over runs)")
    ax.tick_params(axis="x", rotation=30)
    plt.setp(ax.get_xticklabels(), ha="right", rotation_mode="anchor")
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


def paired_bars(values: Mapping[str, Sequence[float]], path: Path, baseline: str) -> None:
    """Per scheduler, its reduction of average JCT against ``baseline`` on the same workload and seed (percent,
    positive: better), mean ± std over those pairs, best first: the verdict that the workloads' own spread
    hides in a plot of raw means."""
    plt = _plt()
    names = sorted((n for n in values if n != baseline and len(values[n])), key=lambda n: -float(np.mean(values[n])))
    colors = _colors(list(values))
    fig, ax = plt.subplots(figsize=(max(5.0, 0.8 * len(names) + 2), 4.2))
    means = [float(np.mean(values[n])) for n in names]
    stds = [float(np.std(values[n])) for n in names]
    ax.bar([short_label(n) for n in names], means, yerr=stds, capsize=4, color=[colors[n] for n in names])
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_ylabel(f"avg JCT reduction vs {short_label(baseline)} (%)")
    ax.set_title(f"paired against {short_label(baseline)} on each workload and seed (mean ± std)")
    ax.tick_params(axis="x", rotation=30)
    plt.setp(ax.get_xticklabels(), ha="right", rotation_mode="anchor")
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path)


def scaling_curves(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Per agent count: rollout throughput, per-decision latency, evaluation episode wall time, average JCT."""
    plt = _plt()
    k = np.array([r["agents"] for r in rows])
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = (
        (axes[0, 0], [("rollout_env_steps_per_s", "env steps/s"), ("rollout_agent_steps_per_s", "agent steps/s")],
         "rollout throughput (parallel EnvRunners)", "steps per second"),
        (axes[0, 1], [("round_ms", "policy round (all agents)"), ("decision_ms", "per agent decision")],
         "inference latency", "milliseconds"),
        (axes[1, 0], [("episode_wall_s", "evaluation episode")], "wall time of one evaluation episode", "seconds"),
        (axes[1, 1], [("avg_jct", "MARL policy")], "average JCT of the evaluation episode", "seconds"),
    )  # fmt: skip
    for ax, series, title, ylabel in panels:
        for key, label in series:
            ax.plot(k, [r[key] for r in rows], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(k, [str(v) for v in k])
        ax.set_xlabel("agents (partitions)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3, which="both")
        if len(series) > 1:
            ax.set_yscale("log")
            ax.legend(fontsize=8)
    baselines = rows[0].get("baselines") or {}
    for i, (name, value) in enumerate(baselines.items()):
        axes[1, 1].axhline(value, ls="--", lw=1, color=f"C{i + 1}", label=name)
    if baselines:
        axes[1, 1].legend(fontsize=8)
    fig.suptitle("Agent-count scaling")
    save_figure(fig, path)
