"""PNG plots of an experiment (matplotlib, Agg backend; each file written atomically)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.results import save_figure

RunKey = tuple[str, int]  # (workload label, seed)
Runs = Mapping[str, Mapping[RunKey, Mapping[str, Any]]]  # scheduler -> run -> metrics
TIMELINE_POINTS = 400  # queue and utilisation samples per policy for the timeline (a run config's default)


def improvement(rows: Runs, sched: str, base: str, key: str) -> list[float]:
    """Per-run reduction of ``key`` (percent) of ``sched`` relative to ``base`` on the same workload and seed
    (positive: sched is better)."""
    out = []
    for run, m in rows[sched].items():
        b = rows[base].get(run, {}).get(key)
        if b and not math.isnan(b) and not math.isnan(m[key]):
            out.append(100.0 * (b - m[key]) / b)
    return out


def plot_results(
    folder: str | Path, results: Sequence[Any], *, baseline: str | None = None, workload_name: str = "", seed: int = 0
) -> dict[str, str]:
    """The plots of ``marlsched simulate --plot`` for results of one workload and seed (``SimResult`` objects, as
    ``sim.run`` returns them), from Python: ``baseline`` (a scheduler's name; default the first result's where there
    are several) is the paired plot's reference. Returns file name -> caption."""
    run = ("", int(seed))
    rows = {r.scheduler: {run: r.metrics()} for r in results}
    series = {r.scheduler: {run: r.plot_series(TIMELINE_POINTS)} for r in results}
    if baseline is None and len(results) > 1:
        baseline = results[0].scheduler
    if baseline is not None and baseline not in rows:
        raise ValueError(f"baseline {baseline!r} is none of the results' schedulers: {', '.join(rows)}")
    return write_plots(
        Path(folder), rows, series, baseline=baseline, timeline_run=run, workload_name=workload_name or "workload"
    )


def write_plots(
    plot_dir: Path,
    rows: Runs,
    series: Mapping[str, Mapping[RunKey, Mapping[str, np.ndarray]]],
    *,
    baseline: str | None,
    timeline_run: RunKey,
    workload_name: str,
) -> dict[str, str]:
    """The plots of a comparison, what `marlsched run` and `marlsched simulate --plot` both write: file name
    -> caption. ``series``: per run, ``jct``, ``t``, ``queue``, ``utilization`` (SimResult.plot_series);
    ``timeline_run`` is the run the timeline shows, ``workload_name`` how its workload is called."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    names = list(rows)
    avg = {n: [float(m["avg_jct"]) for m in rows[n].values()] for n in names}
    seed = timeline_run[1]
    figures = {
        "jct_cdf.png": "JCT distribution, all runs' jobs pooled: the fraction of jobs done within each time (log "
        "hours); a curve further left is better; the legend's average JCT is the table's (mean of the runs' "
        "averages) and names curves identical to another",
        "timeline.png": f"Queue length and busy GPUs over simulated time ({workload_name}, seed {seed}): where the "
        "queue empties, utilisation falls to what the last long jobs hold",
        "avg_jct.png": "Average JCT per scheduler (bar: mean over runs; whisker: their std)",
    }
    jct_means = {n: float(np.nanmean(v)) if v else math.nan for n, v in avg.items()}  # as report._mean_std
    jct_cdf({n: [s["jct"] for s in series[n].values()] for n in names}, jct_means, plot_dir / "jct_cdf.png")
    timelines({n: series[n][timeline_run] for n in names}, plot_dir / "timeline.png", workload_name, seed)
    bars(avg, plot_dir / "avg_jct.png", ylabel="average JCT (s)")
    if baseline is not None and any(n != baseline for n in names):  # the baseline alone: nothing to pair
        gains = {n: improvement(rows, n, baseline, "avg_jct") for n in names}
        paired_bars(gains, plot_dir / "paired_avg_jct.png", baseline)
        figures["paired_avg_jct.png"] = (
            f"Average JCT reduction against {baseline}, run by run on the same workload and seed (bar: mean; "
            "whisker: std over the pairs): the verdict the workloads' own spread hides in the plot above"
        )
    return figures


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


def jct_cdf(jcts: Mapping[str, Sequence[np.ndarray]], means: Mapping[str, float], path: Path) -> None:
    """Empirical CDF of job completion times per scheduler (all runs' jobs pooled; log x axis). The legend
    gives ``means``: the report table's average JCT (the mean of the runs' averages), not the pooled jobs'
    mean, so that the plot and the table agree."""
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
        label = f"{short_label(name)} (avg JCT {means[name]:,.0f} s)" + (
            f", identical to {short_label(same)}" if same else ""
        )
        ax.step(x / 3600.0, y, where="post", label=label, color=colors[name],
                linestyle=LINESTYLES[k % len(LINESTYLES)], **_style(name))  # fmt: skip
        drawn.append((name, x))
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF (all runs' jobs pooled; avg JCT: mean of the runs' averages, as in the report)",
                 fontsize=10)  # fmt: skip
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)


SPIKE = 5.0  # a queue peak this many times the typical scheduler's 95th percentile switches to a log axis


def timelines(series: Mapping[str, Mapping[str, np.ndarray]], path: Path, workload: str, seed: int) -> None:
    """Queue length and GPU utilisation over simulated time, one line per scheduler, for one workload and
    seed; a queue spike far above the rest turns the queue axis logarithmic so it does not flatten them."""
    plt = _plt()
    fig, (ax_q, ax_u) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    colors = _colors(list(series))
    # the busy period is what differs between schedulers; a few long jobs can run on for days after it
    busy_end = max((float(np.asarray(s["t"])[np.asarray(s["queue"]) > 0].max(initial=0.0)) for s in series.values()),
                   default=0.0)  # fmt: skip
    t_end = max((float(np.asarray(s["t"]).max(initial=0.0)) for s in series.values()), default=0.0)
    drawn: list[tuple[str, Mapping[str, np.ndarray]]] = []
    for k, (name, s) in enumerate(series.items()):
        t = np.asarray(s["t"]) / 3600.0
        # a line equal to one drawn before hides it: the legend says so and the dash pattern differs (as jct_cdf)
        same = next((other for other, o in drawn if all(np.array_equal(o[key], s[key]) for key in
                                                        ("t", "queue", "utilization"))), None)  # fmt: skip
        label = short_label(name) + (f", identical to {short_label(same)}" if same else "")
        style = {**_style(name), "linestyle": LINESTYLES[1 + k % (len(LINESTYLES) - 1)] if same else "-"}
        ax_q.plot(t, s["queue"], label=label, color=colors[name], **style)
        ax_u.plot(t, 100.0 * np.asarray(s["utilization"]), label=label, color=colors[name], **style)
        drawn.append((name, s))
    what = f"{workload}, seed {seed}" if workload else f"seed {seed}"
    ax_q.set_ylabel("queued jobs")
    _log_if_spiky(ax_q, series)
    ax_q.set_title(f"Queue length over time ({what})")
    ax_u.set_ylabel("GPUs busy (%)")
    ax_u.set_ylim(0, 105)
    ax_u.set_title(f"GPU utilisation over time ({what})")
    if 0 < 2 * busy_end < t_end:
        ax_u.set_xlim(0, 2 * busy_end / 3600.0)
        ax_u.set_xlabel(f"simulated time (hours; first {2 * busy_end / 3600:.0f} h shown, twice the queueing period)")
    else:
        ax_u.set_xlabel("simulated time (hours)")
    for ax in (ax_q, ax_u):
        ax.grid(alpha=0.3)
    ax_q.legend(fontsize=8, ncol=3, loc="upper left")
    save_figure(fig, path)


def _log_if_spiky(ax: Any, series: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """A log queue axis (linear below one job) when the highest peak is :data:`SPIKE` times the median
    scheduler's 95th percentile, which a linear axis would flatten to nothing; the peak is annotated."""
    queues = {n: np.asarray(s["queue"], dtype=float) for n, s in series.items() if len(s["queue"])}
    if not queues:
        return
    typical = float(np.median([np.percentile(q, 95) for q in queues.values()]))
    name, q = max(queues.items(), key=lambda item: item[1].max())
    peak = float(q.max())
    if peak <= SPIKE * max(typical, 1.0):
        return
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(0, 6.0 * peak)  # room above the peak for its note
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylabel("queued jobs (log scale)")
    i = int(np.argmax(q))
    t = float(series[name]["t"][i]) / 3600.0
    ax.plot([t], [peak], marker="v", color="black", ms=5)
    # the note in the top right corner, clear of the legend (top left); the marker shows where
    ax.text(0.99, 0.96, f"▼ peak: {peak:,.0f} jobs ({short_label(name)}, {t:.0f} h)", transform=ax.transAxes,
            ha="right", va="top", fontsize=8)  # fmt: skip


def workload_title(spec: str) -> str:
    """A workload spec short enough for a title: its file's name with the options (paths dropped)."""
    kind, colon, rest = spec.partition(":")
    if not colon or kind == "synthetic":
        return spec
    path, *options = rest.split(",")
    kept = [o if "/" not in o else o.split("=")[0] + "=..." for o in options]
    return ",".join([f"{kind}:{Path(path).name}", *kept])


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
    ax.set_title(f"{ylabel} per scheduler\n(mean ± std over runs)", fontsize=10)
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
    pairs = max((len(values[n]) for n in names), default=0)
    stds = [float(np.std(values[n])) for n in names] if pairs > 1 else None  # one pair has no spread to draw
    ax.bar([short_label(n) for n in names], means, yerr=stds, capsize=4, color=[colors[n] for n in names])
    if pairs > 1:  # each pair as a dot: a mean of a few pairs hides how they split
        for i, n in enumerate(names):
            v = np.asarray(values[n], dtype=float)
            ax.scatter(i + np.linspace(-0.15, 0.15, len(v)), v, s=10, color="black", zorder=3)
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_ylabel(f"avg JCT reduction vs {short_label(baseline)} (%)")
    # three lines: fewer would be wider than a plot of few bars and be cut off
    what = (
        "paired on each workload and seed\n(mean ± std, dots: each pair)" if pairs > 1 else "on one workload and seed"
    )
    ax.set_title(f"Average JCT reduction against {short_label(baseline)}\n{what}", fontsize=10)
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
    same: dict[float, list[str]] = {}  # heuristics with one average share one line and one label (fifo = closest-gpus)
    for name, value in baselines.items():
        same.setdefault(value, []).append(name)
    for i, (value, names) in enumerate(same.items()):
        axes[1, 1].axhline(value, ls="--", lw=1, color=f"C{i + 1}", label=" = ".join(names))
    if baselines:
        axes[1, 1].legend(fontsize=8)
    fig.suptitle("Agent-count scaling")
    save_figure(fig, path)
