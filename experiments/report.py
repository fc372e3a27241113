"""The results folder's summary: ``metrics.csv`` (scheduler x workload x seed), ``report.md`` and the plots.

Runs are keyed by (workload label, seed): with several workloads, a scheduler's figures are means over
all its runs, and improvements are computed run by run on the same workload and seed.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.policies import reads_true_durations
from cluster_sim.results import METRIC_KEYS, write_atomic
from cluster_sim.sim_presets import restart_phrase
from cluster_sim.traces.periods import trace_date
from experiments.plots import Runs, improvement
from experiments.run_config import MARL, MARL_WARM_START, ExperimentConfig, PriorityTrainSection
from marl.deploy.policy_files import code_version

# (metric, label, format, lower is better)
REPORT_METRICS = (
    ("avg_jct", "avg JCT (s)", "{:.0f}", True),
    ("p50_jct", "p50 JCT (s)", "{:.0f}", True),
    ("p95_jct", "p95 JCT (s)", "{:.0f}", True),
    ("p99_jct", "p99 JCT (s)", "{:.0f}", True),
    ("avg_queue_delay", "time waiting (s)", "{:.0f}", True),
    ("makespan", "makespan (s)", "{:.0f}", True),
    ("gpu_utilization", "GPU util", "{:.3f}", False),
    ("mean_slowdown", "slowdown", "{:.2f}", True),
    ("jobs_completed", "jobs done (all runs)", "{:.0f}", False),
    ("wall_seconds", "sim wall (s)", "{:.1f}", True),
    ("task_cpu_seconds", "task CPU (s)", "{:.1f}", True),
)
# JCTs only: a baseline's queueing delay can be ~0, which makes a relative change meaningless
IMPROVEMENT_METRICS = (("avg_jct", "avg JCT"), ("p95_jct", "p95 JCT"))


def _mean_std(values: Sequence[float], fmt: str, std_fmt: str | None = None) -> str:
    v = np.asarray(values, dtype=float)
    if len(v) == 0 or np.isnan(v).all():
        return "-"
    if len(v) == 1:
        return fmt.format(v[0])
    return f"{fmt.format(np.nanmean(v))} ± {(std_fmt or fmt).format(np.nanstd(v))}"


def write_report(
    cfg: ExperimentConfig,
    out: Path,
    specs: list[dict[str, Any]],
    *,
    train_info: Mapping[str, Any] | None = None,
    scaling: Mapping[str, Any] | None = None,
    stalled: Sequence[Mapping[str, Any]] = (),
    log: Callable[[str], None] = print,
) -> Path:
    from experiments import plots
    from experiments.tasks import PLOTS_DIR, TRAIN_DIR, load_task

    rows: dict[str, dict[tuple[str, int], dict[str, Any]]] = {name: {} for name in cfg.schedulers}
    series: dict[str, dict[tuple[str, int], dict[str, np.ndarray]]] = {name: {} for name in cfg.schedulers}
    for spec in specs:
        metrics, s = load_task(out, spec)
        key = (spec.get("workload_label", ""), spec["seed"])
        rows[spec["scheduler"]][key] = metrics
        series[spec["scheduler"]][key] = s
    typed = sorted({k for r in rows.values() for m in r.values() for k in m if k.startswith("gpu_hours_per_job_")})
    keys = [*METRIC_KEYS, *typed, "task_cpu_seconds"]
    csv_rows: list[list[Any]] = [["scheduler", "workload", "seed", *keys]]
    for name in cfg.schedulers:
        for (label, seed), m in rows[name].items():
            csv_rows.append([name, label, seed, *(m.get(k, "") for k in keys)])
    write_atomic(out / "metrics.csv", csv_rows)

    plot_dir = out / PLOTS_DIR
    label = next(iter(cfg.workload_specs))
    figures = plots.write_plots(
        plot_dir,
        rows,
        series,
        baseline=cfg.baselines[0] if cfg.baselines else None,
        timeline_run=(label, cfg.seeds[0]),
        workload_name=label or plots.workload_title(cfg.workload),
    )
    for other in list(cfg.workload_specs)[1:]:  # timeline.png is the first workload's; each other has its own
        name = f"timeline_{other}.png"
        run = (other, cfg.seeds[0])
        plots.timelines({n: series[n][run] for n in cfg.schedulers if run in series[n]}, plot_dir / name, other,
                        cfg.seeds[0])  # fmt: skip
        figures[name] = f"Queue length and busy GPUs over simulated time ({other}, seed {cfg.seeds[0]})"
    curve = out / TRAIN_DIR / "learning_curve.png"
    if curve.is_file():
        shutil.copyfile(curve, plot_dir / "learning_curve.png")
        figures["learning_curve.png"] = (
            "MARL training per PPO iteration: each training episode's average JCT below the warm start's on the "
            "same window (a paired gain); the held-out table above is the verdict"
        )
    if scaling:
        plots.scaling_curves(scaling["rows"], plot_dir / "scaling.png")
        figures["scaling.png"] = "Agent-count scaling: throughput, latency, episode wall time, average JCT"

    lines = _header(cfg, specs, train_info)
    lines[4:4] = [_computed_where(out), ""]  # after the title and the setup line
    lines += _training_verdict(cfg, rows, train_info)
    lines += _warnings(rows) + _left_out(stalled)
    lines += _metric_table(cfg, rows)
    lines += _per_workload_table(cfg, rows)
    lines += _gpu_type_table(cfg, rows, typed)
    lines += _tenant_table(cfg, out, specs)
    lines += _published_table(cfg, rows)
    lines += _improvement_tables(cfg, rows)
    if scaling:
        lines += scaling_markdown(scaling)
    lines += ["## Plots", ""]
    lines += [f"- `{PLOTS_DIR}/{f}`: {title}" for f, title in figures.items()]
    lines += [f"\n![{figures[f]}]({PLOTS_DIR}/{f})" for f in figures]
    path = out / "report.md"
    write_atomic(path, "\n".join(lines) + "\n")
    log(_console_table(cfg, rows))
    for line in lines:  # a figure on windows that trained or chose the policy: said where it is read first
        if "Not held out" in line:
            log(f"note: {line}")
    return path


def _computed_where(out: Path) -> str:
    """The code version and the Ray this invocation ran on (``state.json`` keeps every invocation's in full)."""
    from experiments.tasks import STATE_FILE

    try:
        ray = json.loads((out / STATE_FILE).read_text())["invocations"][-1].get("ray") or {}
    except (OSError, ValueError, KeyError, IndexError):
        ray = {}
    where = ""
    if ray.get("nodes"):
        at = f"the cluster at {ray['address']}" if ray.get("address") else "Ray in-process"
        cpus = f", {ray['CPU']:g} CPUs" if isinstance(ray.get("CPU"), int | float) else ""
        where = f" on {at} ({ray['nodes']} node(s){cpus} when it ended)"
    return (
        f"Computed by marlsched at code version `{code_version()}`{where}; the command, the libraries' versions, "
        "the digest of every file read and each invocation's Ray are in `state.json` (`invocations`)."
    )


TENANT_ROWS = 10  # the tenants with most jobs get a row each; the others share one


def _tenant_table(cfg: ExperimentConfig, out: Path, specs: list[dict[str, Any]]) -> list[str]:
    """Each tenant's average JCT under each scheduler (its finished jobs of every workload and seed, from the
    tasks' ``jobs.csv``), where the workloads have several tenants: to whom a scheduler's gain goes."""
    import csv

    from experiments.tasks import TASKS_DIR

    jcts: dict[str, dict[str, list[float]]] = {name: {} for name in cfg.schedulers}
    counts: dict[str, int] = {}  # jobs submitted, finished or not (the first scheduler's runs: the same jobs)
    for spec in specs:
        path = out / TASKS_DIR / spec["id"] / "jobs.csv"
        if not path.is_file():
            return []
        first = spec["scheduler"] == cfg.schedulers[0]
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if first:
                    counts[row["tenant"]] = counts.get(row["tenant"], 0) + 1
                if row.get("jct") not in (None, "", "nan"):
                    jcts[spec["scheduler"]].setdefault(row["tenant"], []).append(float(row["jct"]))
    if len(counts) < 2:
        return []
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    shown, rest = ranked[:TENANT_ROWS], ranked[TENANT_ROWS:]
    groups = [(t, [t]) for t in shown] + ([(f"{len(rest)} others", rest)] if rest else [])
    names = cfg.schedulers
    lines = [
        "## Average JCT per tenant (s)",
        "",
        "Each tenant's finished jobs over every workload and seed (`jobs`: submitted, most first); the last row is "
        "the largest tenant average over the smallest, a measure of how evenly a scheduler treats them.",
        "",
        "| tenant | jobs | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    means: dict[str, list[float]] = {n: [] for n in names}
    for label, members in groups:
        cells = []
        for n in names:
            values = [v for t in members for v in jcts[n].get(t, [])]
            mean = float(np.mean(values)) if values else float("nan")
            means[n].append(mean)
            cells.append(f"{mean:,.0f}" if values else "")
        lines.append(f"| {label} | {sum(counts[t] for t in members):,} | " + " | ".join(cells) + " |")
    spread = [np.nanmax(means[n]) / np.nanmin(means[n]) if np.nanmin(means[n]) > 0 else float("nan") for n in names]
    lines.append("| largest / smallest | | " + " | ".join(f"{x:.1f}x" for x in spread) + " |")
    return [*lines, ""]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _header(cfg: ExperimentConfig, specs: list, train_info: Mapping[str, Any] | None) -> list[str]:
    cluster = cfg.cluster if isinstance(cfg.cluster, str) else cfg.cluster.get("name", "inline cluster")
    work = cfg.workload_specs
    if len(work) == 1 and "" in work:
        what = f"Workload `{cfg.workload}`"
    elif len(work) <= 3:  # each spec said, so that one changed by --set reads as what ran
        what = f"{_count(len(work), 'workload')}: " + "; ".join(f"{label} `{spec}`" for label, spec in work.items())
    else:
        what = f"{len(work)} workloads ({', '.join(work)})"
    over = "seeds" if len(work) == 1 else "workloads and seeds"
    lines = [
        f"# {cfg.name}: {_count(len(cfg.schedulers), 'scheduler')} x {_count(len(work), 'workload')} x "
        f"{_count(len(cfg.seeds), 'seed')} on {cluster}",
        "",
        f"{what} (seeds {cfg.seeds}), interference `{cfg.interference}`, "
        f"{restart_phrase(cfg.restart_cost, cfg.app_restart_costs, cfg.start_cost or 0.0)}"
        + ("; Sia's calibration slowdowns" if cfg.calibration else "")
        + f"; {len(specs)} simulations, each a Ray task. Values are mean ± std over {over}.",
        "",
    ]
    lines += _policy_folders_held_out(cfg) + _overlapping_workloads(cfg)
    if train_info is not None and isinstance(cfg.train_config, PriorityTrainSection):
        lines += _priority_training_lines(cfg.train_config, train_info)
    elif train_info is not None and cfg.train_config is not None:
        lines += [
            f"`marl` is the policy this run trained (`train/`): agent `{cfg.train_config.agent}` with algo "
            f"`{cfg.train_config.algo}` in {train_info.get('train_s', 0):.0f} s, on the windows of its train section.",
            "",
        ]
    return lines


def _overlapping_workloads(cfg: ExperimentConfig) -> list[str]:
    """Dated windows of one trace that share part of it: the same jobs run in both, so their runs are not
    independent samples and a mean ± std over them says less than it seems (a sentence; none where no two overlap)."""
    from cluster_sim.traces.periods import DAY

    windows: dict[str, list[tuple[str, float, float]]] = {}
    for label, spec in cfg.workload_specs.items():
        if not isinstance(spec, str):
            continue
        opts = dict(o.split("=", 1) for o in spec.split(",")[1:] if "=" in o)
        if "start" in opts and "end" in opts:
            start, end = (_seconds(opts[k], spec) for k in ("start", "end"))
            windows.setdefault(spec.split(",")[0], []).append((label or spec, start, end))
    pairs = [
        f"{a} and {b} ({(min(end_a, end_b) - max(start_a, start_b)) / DAY:.2g} d)"
        for same in windows.values()
        for i, (a, start_a, end_a) in enumerate(same)
        for b, start_b, end_b in same[i + 1 :]
        if start_a < end_b and start_b < end_a
    ]
    if not pairs:
        return []
    return [
        f"Overlapping windows: {'; '.join(pairs[:3])}{f'; and {len(pairs) - 3} more pairs' if len(pairs) > 3 else ''} "
        "share part of the trace, so the same jobs arrive in both; their "
        "runs are not independent, and the ± over workloads understates how much another window could differ "
        "(for a verdict, take windows that do not overlap).",
        "",
    ]


def _trace_span(env: Any) -> str:
    """Where the training windows lie: dates of the trace where it records them (with the seconds the spec holds),
    else seconds."""
    start = trace_date(env.train_start, env.trace)
    if start.endswith(" s"):
        return f"between {env.train_start:,.0f} s and {env.train_end:,.0f} s"
    return (
        f"between {start} and {trace_date(env.train_end, env.trace)} ({env.train_start:,.0f}–"
        f"{env.train_end:,.0f} s from the trace's start)"
    )


def _priority_training_lines(section: PriorityTrainSection, train_info: Mapping[str, Any]) -> list[str]:
    """What the priority agents were trained on, so that the table below reads as held out or not."""
    from marl.env.priority_env import PriorityEnvConfig

    env = PriorityEnvConfig.from_dict(section.config["env"])
    init = (section.config.get("model") or {}).get("init_policy")
    what = "order their partition's jobs and choose each job's GPU type" if env.placing else "order their jobs"
    if env.placing and env.migrate is not None:
        what += f", moving a running job to a type whose score beats its own by ln {math.exp(env.migrate):.3g}"
    if env.decision != "partitions":
        what = (
            "score their jobs and (job, GPU type) pairs, and the scores re-weight the pairs of one cluster-wide "
            f"`{env.decision}` round"
        )
    episodes = (
        f"workload `{env.workload}`"
        if env.workload
        else f"random {env.window_days:g}-day windows of `{env.trace}` {_trace_span(env)} at loads "
        f"{env.load[0]:g}-{env.load[1]:g}"
    )
    return [
        f"`marl` is the policy this run trained (`train/`): {env.num_agents} priority agents that {what}, "
        f"through one shared network; PPO for {_count(int(train_info.get('iterations', 0)), 'iteration')} in "
        f"{train_info.get('train_s', 0):.0f} s"
        + "".join(f" (resumed after iteration {i})" for i in train_info.get("resumed_after", []))
        + f" on {episodes}, interference `{env.interference}`. "
        f"`{MARL_WARM_START}` is the same network before any update ("
        + (
            f"the order of `{init}`, its warm start by imitation"
            if init
            else f"`{env.decision}` itself"
            if env.decision != "partitions"
            else "QSSF's order"
        )
        + (", each job on its fastest GPU type" if env.placing and env.decision == "partitions" else "")
        + (", the interference predictor's estimates among its inputs" if env.interference_inputs else "")
        + "): the paired difference between the two is what training added.",
        "",
    ]


def _training_verdict(cfg: ExperimentConfig, rows: Runs, train_info: Mapping[str, Any] | None) -> list[str]:
    """Beside the trained policy's standing, which includes its warm start's: what training itself added (``marl``
    against ``marl-warm-start``, paired), whether the workloads lie outside the training span, and where trained
    policies' figures are; a brief run is no verdict on what training can do."""
    if train_info is None or MARL not in rows or MARL_WARM_START not in rows:
        return []
    gains = improvement(rows, MARL, MARL_WARM_START, "avg_jct")
    if not gains:
        return []
    better, same = sum(g > 0 for g in gains), sum(g == 0 for g in gains)
    change = -float(np.mean(gains)) + 0.0  # the change in average JCT (+0.0, not -0.0, where none)
    # equal runs are said as such: "better in 0 of 6" reads as worse where the two decided alike
    counts = f"better in {better} of {len(gains)}" + (f", the same in {same}" if same else "")
    if same == len(gains):
        why = (
            "the select stage shipped the warm start: no iterate beat it on the select windows"
            if train_info.get("selected") == "warm start"
            else "training changed no decision here"
        )
        counts = f"the same average JCT in all {len(gains)}: {why}"
    # a change in JCT, signed as the plain figure reads (+: longer): the tables below give reductions instead
    direction = "longer, worse" if change > 0 else "shorter, better" if change < 0 else ""
    direction += f" (the tables' reduction: {-change + 0.0:+.1f}%); " if direction else ""
    lines = [
        f"**What training added** (the verdict on it): `{MARL}` against `{MARL_WARM_START}`, paired on the same "
        f"{_count(len(gains), 'run')}: average JCT {change:+.1f}% ± {np.std(gains):.1f}% ({direction}{counts}). "
        f"`{MARL}`'s standing against the other schedulers includes its warm start's."
    ]
    held = _held_out(cfg)
    if held:
        lines[0] += " " + held
    lines[0] += (
        f" This run trained for {_count(int(train_info.get('iterations', 0)), 'iteration')} "
        f"({train_info.get('train_s', 0):.0f} s), "
        "with one seed on these workloads: a brief run shows the pipeline, not what training can reach; the "
        "shipped policies' figures, on many held-out windows: docs/results/learned-scheduler.md."
    )
    return [*lines, ""]


def _held_out(cfg: ExperimentConfig) -> str:
    """Whether every workload is a window of the training trace outside the training span (the priority agents'
    random windows) and the select stage's windows: a sentence (see :func:`_outside`), or '' where the training
    config records no trace span."""
    from marl.env.priority_env import PriorityEnvConfig

    if not isinstance(cfg.train_config, PriorityTrainSection):
        return ""
    env = PriorityEnvConfig.from_dict(cfg.train_config.config["env"])
    if env.workload:
        return ""
    spans = {"the training span": (env.train_start, env.train_end)}
    select = cfg.train_config.config.get("select")
    if select is not None:  # its windows chose the iterate that ships
        from marl.training.priority_select import select_windows

        windows = select_windows(env.trace, select["days"], select["stride"], select["load"], select.get("start"),
                                 select.get("end"))  # fmt: skip
        spans["the select span"] = _span_of(windows)
    return _outside(cfg, env.trace, spans)


def _span_of(windows: list[str]) -> tuple[float, float]:
    """The first start and the last end of window specs (seconds of their trace)."""
    bounds = [_seconds(dict(o.split("=", 1) for o in w.split(",")[1:] if "=" in o)[k], w) for w in windows
              for k in ("start", "end")]  # fmt: skip
    return min(bounds), max(bounds)


def _outside(cfg: ExperimentConfig, trace: str, spans: Mapping[str, tuple[float, float]]) -> str:
    """Whether each workload is held out from ``spans`` (windows of ``trace``): 'Every workload lies outside SPANS:
    held out.' where all are dated windows of ``trace`` outside them; otherwise which overlap which span, which lie
    outside, which are ``trace``'s jobs without dates (unknown) and which come from other traces."""
    trace = trace.split(",")[0]
    inside: dict[str, list[str]] = {name: [] for name in spans}
    held, undated, other = [], [], []
    for label, spec in cfg.workload_specs.items():
        name = label or str(spec)
        if not isinstance(spec, str) or spec.split(",")[0] != trace:
            other.append(name)
            continue
        opts = dict(o.split("=", 1) for o in spec.split(",")[1:] if "=" in o)
        if "start" not in opts or "end" not in opts:
            undated.append(name)
            continue
        start, end = (_seconds(opts[k], spec) for k in ("start", "end"))
        overlapped = [span for span, (first, last) in spans.items() if start < last and end > first]
        for span in overlapped:
            inside[span].append(name)
        if not overlapped:
            held.append(name)
    named = " and ".join(spans)
    if held and not (undated or other or any(inside.values())):
        return f"Every workload lies outside {named}: held out."
    said = [f"{', '.join(labels)} {_verb(labels, 'overlaps', 'overlap')} {span}" for span, labels in inside.items()
            if labels]  # fmt: skip
    parts = [f"Not held out: {'; '.join(said)}."] if said else []
    if held:
        parts.append(f"{', '.join(held)} {_verb(held, 'lies', 'lie')} outside {named}: held out.")
    if undated:
        parts.append(
            f"{', '.join(undated)} {_verb(undated, 'reads', 'read')} the training trace without a window "
            f"(start=, end=): not known to lie outside {named}."
        )
    if other:
        parts.append(
            f"{', '.join(other)} {_verb(other, 'comes', 'come')} from another trace than the one it "
            f"trained on: held out by source."
        )
    return " ".join(parts)


def _verb(names: list[str], one: str, many: str) -> str:
    return one if len(names) == 1 else many


def _policy_folders_held_out(cfg: ExperimentConfig) -> list[str]:
    """For each trained policy folder among the schedulers (``marl:DIR``) whose metadata records the windows it
    trained and was selected on: whether the workloads lie outside them."""
    from marl.deploy.registry import read_metadata

    lines = []
    for label in cfg.schedulers:
        name = cfg.policy_of(label)[0]
        if not name.startswith("marl:"):
            continue
        folder = name.removeprefix("marl:").split(",")[0]
        try:
            meta = read_metadata(Path(folder))[1]
        except (OSError, ValueError):
            continue
        config = (meta.get("trained") or {}).get("config") or meta.get("config") or {}
        env = config.get("env", config) if isinstance(config, dict) else {}
        trace, spans = env.get("trace"), _recorded_spans(env)
        if not isinstance(trace, str) or not spans:
            continue
        if (meta.get("selected") or {}).get("windows"):
            spans["its select windows"] = _span_of(meta["selected"]["windows"])
        for chosen in meta.get("chosen_on") or []:  # choices made by hand, after figures a person saw
            span = (_seconds(chosen["start"], trace), _seconds(chosen["end"], trace))
            spans[f"the windows chosen on by hand ({chosen['what']})"] = span
        sentence = _outside(cfg, trace, spans)
        if sentence:
            lines.append(f"`{label}` ({folder}): {sentence}")
    return [*lines, ""] if lines else []


def _recorded_spans(env: dict) -> dict[str, tuple[float, float]]:
    """The spans of its trace that a folder's recorded settings trained (and validated) on, in seconds, in each
    layout the loops record: ``train_start``/``train_end`` (PPO, the priority agents' DAgger), ``train_first``/
    ``train_last`` and ``validation_*`` (ES), ``first_start``/``windows``/``days`` (the round scorer's DAgger)."""
    from cluster_sim.traces.periods import DAY

    def num(key: str) -> float | None:
        value = env.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    days = num("days") or 0.0
    if (last := num("train_end")) is not None:
        return {"its training span": (num("train_start") or 0.0, last)}
    if (first := num("train_first")) is not None and (last := num("train_last")) is not None:
        spans = {"its training span": (first, last + days * DAY)}
        if (v0 := num("validation_first")) is not None:
            length = (num("validation_windows") or 0.0) * (num("validation_days") or 0.0) * DAY
            spans["its validation windows"] = (v0, v0 + length)
        return spans
    if (first := num("first_start")) is not None and (windows := num("windows")) is not None:
        return {"its training span": (first, first + windows * days * DAY)}
    return {}


def _seconds(value: str, spec: str) -> float:
    """A window bound of the trace spec ``spec``: seconds from the trace's start, or a date (counted from its start)."""
    from cluster_sim.traces.periods import trace_seconds

    return trace_seconds(value, spec)


def _metric_table(cfg: ExperimentConfig, rows: Runs) -> list[str]:
    order = sorted(cfg.schedulers, key=lambda n: float(np.mean([m["avg_jct"] for m in rows[n].values()])))
    lines = [
        "## Metrics (best average JCT first)",
        "",
        "| scheduler | " + " | ".join(label for _, label, _, _ in REPORT_METRICS) + " |",
        "|---|" + "---:|" * len(REPORT_METRICS),
    ]
    for name in order:
        runs = list(rows[name].values())
        cells = [
            _done(runs) if k == "jobs_completed" else _mean_std([m.get(k, math.nan) for m in runs], fmt)
            for k, _, fmt, _ in REPORT_METRICS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Time waiting: queued seconds per job (before its start and after preemptions). GPU util: busy GPU-seconds "
        "over (GPUs × makespan); it is low when a few long jobs run on alone long after the last arrival, which "
        "`plots/timeline.png` shows. Slowdown: JCT over the run time the workload gives the job, alone on the GPUs "
        "it asked for at the reference placement, on the type its times are given for (V100 for Philly-like "
        "traces, T4 for Pollux's and Sia's workloads); below 1 where jobs ran on a faster type or an elastic "
        "scheduler (Pollux, Sia) gave them more GPUs or a larger batch. "
        "Schedulers that decide in rounds (gavel and gavel-las every 360 s, sia and pollux every 60 s) start a "
        "new job at the next round, so short jobs' slowdown is high under them even where the average JCT is low "
        "(each job's wait for its first start: `first_start_delay` in a run's `jobs.csv`).",
    ]
    jcts = {n: [m["avg_jct"] for _, m in sorted(rows[n].items())] for n in order}
    if len(order) > 1 and all(jcts[n] == jcts[order[0]] for n in order):
        lines += [
            "",
            "Every scheduler gave the same average JCT on every run: at this load their choices made no "
            "difference (jobs hardly wait); offer more load to compare them.",
        ]
    elif len(order) > 1 and (hardly := _hardly_queued(rows, order)):
        lines += ["", hardly]
    oracles = [name for name in order if reads_true_durations(name)]
    if oracles:
        verb = "reads" if len(oracles) == 1 else "read"
        lines += [
            "",
            f"{', '.join(f'`{n}`' for n in oracles)} {verb} each job's true duration, which no deployed scheduler "
            "has: references, not baselines. Each shows what exact durations buy inside its own rule, not a bound "
            "on the others: an SRTF ranks jobs by true remaining time but places each where it starts "
            "(`@fastest`: its fastest GPU type with room, kept there), so on mixed GPUs long jobs left on slow "
            "types can raise its mean while its median and slowdown lead.",
        ]
    return [*lines, *_type_blind(cfg, order), ""]


def _hardly_queued(rows: Runs, order: list[str]) -> str:
    """Where no scheduler's jobs waited more than 1% of their JCT on average, a note that the gaps between them are
    not their orders (the queue they would order hardly formed); '' otherwise."""
    wait = {n: float(np.mean([m.get("avg_queue_delay", math.nan) for m in rows[n].values()])) for n in order}
    jct = {n: float(np.mean([m["avg_jct"] for m in rows[n].values()])) for n in order}
    if not all(wait[n] <= 0.01 * jct[n] for n in order):  # a NaN (no such column) fails too: no note
        return ""
    spread = (max(jct.values()) - min(jct.values())) / min(jct.values())
    return (
        f"No scheduler's jobs waited more than {max(wait.values()):.0f} s on average (at most 1% of their JCT): at "
        f"this load a queue hardly formed, so the {100 * spread:.1f}% between the schedulers' average JCTs comes from "
        "where they placed jobs and a few waits, not from the orders they would give a queue; offer more load to "
        "compare those."
    )


def _type_blind(cfg: ExperimentConfig, names: list[str]) -> list[str]:
    """On a cluster of several GPU types, which heuristics place jobs without regard to the type (``@any``, the
    default), so that part of their gap to the type-aware schedulers is that choice, and how to compare fairly."""
    from cluster_sim.policies import get_policy
    from cluster_sim.policies.elastic import ElasticPolicy
    from topology import build_cluster

    try:
        types = build_cluster(cfg.cluster).view.gpu_types
    except (ValueError, OSError):
        return []
    if len(types) < 2:
        return []
    blind = []
    for label in names:
        policy, options = cfg.policy_of(label)
        if ":" in policy:  # a policy folder or a class of one's own: it chooses as it was written to
            continue
        try:
            scheduler = get_policy(policy, **options)
        except (ValueError, TypeError):
            continue
        if not isinstance(scheduler, ElasticPolicy) and getattr(scheduler, "gpu_type", None) == "any":
            blind.append(label)
    if not blind:
        return []
    example = cfg.policy_of(blind[0])[0].split("@")[0] + "@fastest"
    one = len(blind) == 1
    return [
        "",
        f"{', '.join(f'`{n}`' for n in blind)} {_verb(blind, 'places', 'place')} jobs without regard to GPU type "
        f"(`@any`, the default) on this cluster of {', '.join(types)}: part of {'its' if one else 'their'} gap to the "
        f"type-aware schedulers (Gavel, Sia, the learned ones) is that choice; `{example}` tries the fastest type "
        "with room first (`@slowest`: the slowest).",
    ]


def _left_out(stalled: Sequence[Mapping[str, Any]]) -> list[str]:
    """Schedulers an earlier invocation into this folder tried and that stalled (the config then left them out)."""
    if not stalled:
        return []
    lines = ["## Left out", "", "Tried in an earlier run into this folder, these stalled (they left jobs waiting that "
             "they would never start) and this config leaves them out:", ""]  # fmt: skip
    for r in stalled:
        on = f" on {r['workload']}" if r.get("workload") else ""
        lines.append(f"- `{r['scheduler']}`{on} seed {r['seed']}: {r['reason']}")
    return [*lines, ""]


def warning_key(text: str) -> str:
    """A warning without its figures: the same warning on several workloads (each with its own job counts) is
    one warning, said once."""
    return re.sub(r"\d[\d,.]*", "#", text)


def _warnings(rows: Runs) -> list[str]:
    """What the simulations warned of (a policy on another cluster than its own, jobs on estimated speeds, a window
    squeezed into a burst), each once (the first workload's figures; how many others said the same), before the
    figures they qualify; where only some of the workloads gave it, which."""
    where: dict[str, set[str]] = {}
    for runs in rows.values():
        for (workload, _seed), m in runs.items():
            for text in m.get("warnings", []):
                where.setdefault(text, set()).add(workload)
    if not where:
        return []
    kinds: dict[str, list[str]] = {}
    for text in sorted(where):
        kinds.setdefault(warning_key(text), []).append(text)
    workloads = {w for ws in where.values() for w in ws}
    more = " (and {} more like it, with other figures)"
    said = []
    for texts in kinds.values():
        on = sorted({w for t in texts for w in where[t]})
        head = f"{', '.join(on)}: " if len(on) < len(workloads) and all(on) else ""  # said on some, not all
        said.append(head + texts[0] + (more.format(len(texts) - 1) if len(texts) > 1 else ""))
    return ["## Warnings", "", *(f"- {text}" for text in said), ""]


def _done(runs: list[Mapping[str, Any]]) -> str:
    """Jobs finished of those submitted, summed over the runs: a mean over workloads of other sizes says nothing."""
    done = sum(int(m.get("jobs_completed", 0)) for m in runs)
    total = sum(int(m.get("jobs_total", m.get("jobs_completed", 0))) for m in runs)
    return f"{done:,}/{total:,}"


def _per_workload_table(cfg: ExperimentConfig, rows: Runs) -> list[str]:
    """With several workloads, each one's average JCT per scheduler (mean ± std over seeds) and, beside it, the
    paired reduction against the first baseline on that workload: the pooled figures above mix workloads of
    very different lengths."""
    workloads = list(cfg.workload_specs)
    if len(workloads) < 2:
        return []
    base = cfg.baselines[0] if cfg.baselines else None
    order = sorted(cfg.schedulers, key=lambda n: float(np.mean([m["avg_jct"] for m in rows[n].values()])))
    lines = [
        "## Per workload",
        "",
        "Average JCT (s) on each workload, mean ± std over seeds"
        + (f"; in brackets the reduction against {base} on the same runs (positive: better)." if base else "."),
        "",
        "| scheduler | " + " | ".join(workloads) + " |",
        "|---|" + "---:|" * len(workloads),
    ]
    for name in order:
        cells = []
        for w in workloads:
            on_w = {run: m for run, m in rows[name].items() if run[0] == w}
            cell = _mean_std([m["avg_jct"] for m in on_w.values()], "{:.0f}")
            if base and name != base and on_w:
                paired = improvement({name: on_w, base: rows[base]}, name, base, "avg_jct")
                cell += f" ({_mean_std(paired, '{:+.1f}%', '{:.1f}%')})"
            cells.append(cell)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _gpu_type_table(cfg: ExperimentConfig, rows: Runs, typed: list[str]) -> list[str]:
    """Sia's per-scheduler figures on a cluster of several GPU types: GPU-hours per job on each type,
    restarts per job, contention, the policy's time per round, and the jobs whose speed on some type they
    ran on is an estimate rather than a measurement."""
    if len(typed) < 2:
        return []
    types = [k.removeprefix("gpu_hours_per_job_") for k in typed]
    lines = [
        "## GPU types, restarts and policy runtime",
        "",
        "GPU-hours per finished job on each GPU type; restarts per job (allocations after the first); contention "
        "(jobs waiting or running per GPU, time-averaged); the scheduler's wall time per round; the jobs, summed over "
        "the runs, that ran on a type where their model or application was never measured (their speed there is "
        "an estimate: `estimated_jobs` in each run's metrics).",
        "",
        "| scheduler | " + " | ".join(f"GPU-h/job {t}" for t in types)
        + " | restarts/job | jobs/GPU | round p50 (ms) | round p95 (ms) | jobs on estimated speeds (all runs) |",
        "|---|" + "---:|" * (len(types) + 5),
    ]  # fmt: skip
    for name in cfg.schedulers:
        ms = list(rows[name].values())
        cells = [_mean_std([m.get(k, math.nan) for m in ms], "{:.2f}") for k in typed]
        cells += [_mean_std([m.get(k, math.nan) for m in ms], f) for k, f in
                  (("restarts_per_job", "{:.2f}"), ("jobs_per_gpu", "{:.2f}"), ("round_ms_p50", "{:.1f}"),
                   ("round_ms_p95", "{:.1f}"))]  # fmt: skip
        cells.append(str(int(sum(m.get("estimated_jobs", 0) for m in ms))))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def published_comparison(cfg: ExperimentConfig, rows: Runs) -> list[dict[str, Any]]:
    """Per scheduler and workload: our average JCT (mean over seeds), the published one and their ratio;
    then each scheduler's mean over the workloads both have."""
    out = []
    for name, values in (cfg.published or {}).items():
        ours_all, theirs_all = [], []
        for label, theirs in values.items():
            if str(label) == "mean":  # a published mean over all the workloads
                continue
            runs = [m["avg_jct"] for (w, _), m in rows[name].items() if w == str(label)]
            if not runs:
                continue
            ours = float(np.mean(runs))
            ours_all.append(ours)
            theirs_all.append(float(theirs))
            out.append({"scheduler": name, "workload": str(label), "ours": ours, "published": float(theirs)})
        if "mean" in values:
            per_workload = {}
            for (w, _), m in rows[name].items():
                per_workload.setdefault(w, []).append(m["avg_jct"])
            ours_all = [float(np.mean(v)) for v in per_workload.values()]
            theirs_all = [float(values["mean"])]
        if ours_all:
            out.append({"scheduler": name, "workload": "mean", "ours": float(np.mean(ours_all)),
                        "published": float(np.mean(theirs_all))})  # fmt: skip
    for r in out:
        r["ratio"] = r["ours"] / r["published"]
    return out


def _published_table(cfg: ExperimentConfig, rows: Runs) -> list[str]:
    comp = published_comparison(cfg, rows)
    if not comp:  # none for the workloads that ran: say where they are and why they are not here
        return (
            ["## Beside the published figures", "", f"Published: {cfg.published_source}.", ""] if cfg.published else []
        )
    workloads = list(dict.fromkeys(r["workload"] for r in comp))
    step = cfg.published_step
    rounding = (
        f" The published figures are rounded to {step:g} s: each stands for an interval {step:g} s wide, and "
        "`in` / `outside` says where ours lies."
        if step
        else ""
    )
    lines = [
        "## Beside the published figures",
        "",
        f"Average JCT (s): ours / published (ratio). Published: {cfg.published_source or 'see the config'}.{rounding}",
        "",
        "| scheduler | " + " | ".join(workloads) + " |",
        "|---|" + "---:|" * len(workloads),
    ]

    def text(r: dict[str, Any]) -> str:
        if not step:
            return f"{r['ours']:.0f} / {r['published']:.0f} ({r['ratio']:.2f})"
        low, high = r["published"] - step / 2, r["published"] + step / 2
        where = "in" if low <= r["ours"] <= high else "outside"
        return f"{r['ours']:.0f} / {r['published']:.0f} ({r['ratio']:.2f}; {where} {low:.0f}–{high:.0f})"

    for name in dict.fromkeys(r["scheduler"] for r in comp):
        cell = {r["workload"]: r for r in comp if r["scheduler"] == name}
        lines.append(f"| {name} | " + " | ".join(text(cell[w]) if w in cell else "-" for w in workloads) + " |")
    return [*lines, ""]


def _improvement_tables(cfg: ExperimentConfig, rows: Runs) -> list[str]:
    if not cfg.baselines:
        return []
    lines = [
        "## Improvement over the baselines",
        "",
        "Reduction in percent (positive: the scheduler is better than the baseline), computed run by run on the "
        "same workload and seed and given as mean ± std over runs.",
        "",
    ]
    if repeated := _repeated_seeds(rows):
        lines += [
            f"On {', '.join(repeated)} every seed gave every scheduler the same result (a trace's jobs are fixed and "
            "these schedulers draw nothing at random): those runs repeat one simulation, so their spread is that of "
            "the workloads alone. Vary the workload to measure more.",
            "",
        ]
    claims = cfg.claims or {}
    for k, (key, label) in enumerate(IMPROVEMENT_METRICS):
        claim_col = bool(claims) and k == 0  # the papers' claims are about average JCT
        # the claims keep their papers' sign (a JCT change: -44% is 44% lower), the opposite of this table's
        heads = [f"vs {b}" for b in cfg.baselines] + (
            ["the paper's claim (its sign: -X% = X% lower)"] if claim_col else []
        )
        lines += [
            f"### {label}",
            "",
            "| scheduler | " + " | ".join(heads) + " |",
            "|---|" + "---:|" * len(cfg.baselines) + ("---|" if claim_col else ""),
        ]
        for name in cfg.schedulers:
            cells = [
                "-" if name == b else _mean_std(improvement(rows, name, b, key), "{:+.1f}%", "{:.1f}%")
                for b in cfg.baselines
            ]
            if claim_col:
                cells.append(claims.get(name, ""))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


# what a run simulated (not its wall time): equal in all of them, the runs repeat one simulation
SIMULATED = ("jobs_completed", "avg_jct", "p50_jct", "p95_jct", "p99_jct", "makespan", "preemptions", "events")


def _repeated_seeds(rows: Runs) -> list[str]:
    """The workloads run with several seeds on which each scheduler's runs all have the same metrics."""
    by_workload: dict[str, list[Any]] = {}
    for runs in rows.values():
        for workload, seed in runs:
            by_workload.setdefault(workload, []).append(seed)
    repeated = []
    for workload, seeds in by_workload.items():
        if len(set(seeds)) < 2:
            continue
        same = all(
            len({tuple(m.get(k) for k in SIMULATED) for (w, _), m in runs.items() if w == workload}) == 1
            for runs in rows.values()
        )  # fmt: skip
        if same:
            repeated.append(workload or "the workload")
    return repeated


def scaling_markdown(scaling: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Agent-count scaling",
        "",
        scaling["description"],
        "",
        "| agents | GPUs per agent | rollout env steps/s | agent decisions/s | policy round (ms) | "
        "per agent decision (ms) | eval episode wall (s) | avg JCT (s) | preempt/job | jobs done |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in scaling["rows"]:
        preempt = f"{r['preemptions_per_job']:.2f}" if "preemptions_per_job" in r else ""  # a row measured before
        lines.append(
            f"| {r['agents']} | {r['gpus_per_agent']} | {r['rollout_env_steps_per_s']:.1f} | "
            f"{r['rollout_agent_steps_per_s']:.1f} | {r['round_ms']:.2f} | {r['decision_ms']:.3f} | "
            f"{r['episode_wall_s']:.1f} | {r['avg_jct']:.0f} | {preempt} | {r['jobs_completed']}/{r['jobs_total']} |"
        )
    baselines = scaling["rows"][0].get("baselines") or {}
    if baselines:
        lines += ["", "Heuristics on the same evaluation episode (avg JCT): "
                  + ", ".join(f"{name} {value:.0f} s" for name, value in baselines.items()) + "."]  # fmt: skip
    return [*lines, ""]


def _console_table(cfg: ExperimentConfig, rows: Runs) -> str:
    from experiments.simulate import SUMMARY_COLUMNS, summary_table

    means = []
    for name in cfg.schedulers:
        runs = list(rows[name].values())
        m: dict[str, Any] = {"scheduler": name}
        for key, _, _ in SUMMARY_COLUMNS:
            m[key] = float(np.mean([r[key] for r in runs]))
        m["jobs_completed"] = int(m["jobs_completed"])
        means.append(m)
    means.sort(key=lambda m: m["avg_jct"])
    n = len(cfg.workload_specs)
    over = f"{n} workloads x seeds {cfg.seeds}" if n > 1 else f"seeds {cfg.seeds}"
    return summary_table(
        means,
        title=f"{cfg.name}: means over {over}, every column (done: jobs finished per run); interference "
        f"{cfg.interference}, {restart_phrase(cfg.restart_cost, cfg.app_restart_costs, cfg.start_cost)}",
    )
