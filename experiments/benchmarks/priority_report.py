"""The priority agents against the heuristics on held-out windows: every figure a user asks of a shipped
policy, in one run (parallel simulations, one process per CPU), written to ``OUT/report.md``,
``OUT/results.json`` and two PNGs.

1. ``small`` (4 agents) at loads 0.7, 0.9 and 1.1: average JCT per window for the policy, the non-oracle
   heuristics and the oracles (sjf, srtf), mean ± std and paired gains vs Tiresias and vs the best
   non-oracle heuristic of each window set.
2. The same policy on a 512-GPU cluster of ``small``'s rack shape with 8 agents (load 0.9).
3. The cost of decentralisation: 1, 2, 4 and 8 agents on that 512-GPU cluster (load 0.9; agents own
   whole racks, and ``small`` has only 4): average JCT and forward time per round and per agent decision
   (``agents.png``).
4. dc-1k with 32 agents served by Ray actors: average JCT beside Tiresias, and decisions per second
   (``marl.deploy.actors.RayActorScorer``). Philly's held-out weeks cannot load dc-1k (8,192 GPUs, about three
   times Philly's cluster): offering 0.4 of it already squeezes their 11,634 jobs into two hours, a
   burst. So dc-1k runs a steady synthetic stream with Philly's job statistics at load 0.9
   (``--dc1k-workload``, tenants' models by the independent rule).

Windows: ``--days``-long, ``--stride`` apart over 2017-11-01..14 of Philly (held out of training), model
rule independent, ground-truth interference, restart cost 30 s.

    python experiments/benchmarks/priority_report.py --policy experiments/policies/philly-small --out results/priority
    python experiments/benchmarks/priority_report.py --policy DIR --parts small --loads 0.9   # selection only
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.traces.periods import window_spec
from experiments.regimes import DEV_END, DEV_START, GAVEL, PHILLY

ROOT = Path(__file__).resolve().parents[2]
MEDIUM = ROOT / "experiments" / "configs" / "clusters" / "medium-512.yaml"
HEURISTICS = ("fifo", "tiresias", "gandiva", "drf", "closest-gpus", "qssf")
ORACLES = ("sjf", "srtf")
POLICY = "policy"


def window_specs(
    days: float, stride: float, load: float, start: float = DEV_START, end: float = DEV_END, options: str = ""
) -> list[str]:
    """Philly windows of ``days`` every ``stride`` days between ``start`` and ``end`` at ``load`` (``options``:
    more of the trace's spec options, e.g. ``gpu_scale=8``)."""
    length, step = days * 86400.0, stride * 86400.0
    starts = np.arange(start, end - length + 1.0, step)
    trace = f"philly:{PHILLY}" + (f",{options}" if options else "")
    return [window_spec(trace, t, t + length, load) for t in starts]


class TimedScorer:
    """Wraps a scorer and counts its rounds and seconds (the forward passes of all agents)."""

    def __init__(self, scorer: Any) -> None:
        self.scorer, self.rounds, self.seconds = scorer, 0, 0.0

    def __call__(self, obs: dict) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.scorer(obs)
        self.seconds += time.perf_counter() - t0
        self.rounds += 1
        return out


def run_one(task: dict[str, Any]) -> dict[str, Any]:
    """One simulation: ``task`` names the cluster, the workload spec, the scheduler and its agents."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from marl.deploy.priority_export import load_priority_policy

    data = f"gavel:{GAVEL}" if GAVEL.is_file() else None
    sim = build_simulator(task["cluster"], task["spec"], seed=0, interference="oracle", interference_data=data)
    out = dict(task)
    t0 = time.perf_counter()
    if task["scheduler"] == POLICY:
        sched = load_priority_policy(task["policy_dir"], num_agents=task["agents"], name=POLICY)
        sched.scorer = timed = TimedScorer(sched.scorer)
        result = sim.run(sched)
        out.update(rounds=timed.rounds, ms_per_round=1e3 * timed.seconds / max(timed.rounds, 1))
        out["ms_per_decision"] = out["ms_per_round"] / len(sched.parts)
    else:
        result = sim.run(get_policy(task["scheduler"], seed=0))
    out.update(avg_jct=float(result.jct.mean()), jobs=len(result.jct), wall_s=time.perf_counter() - t0)
    return out


def _task_key(t: dict[str, Any]) -> tuple:
    """What makes a simulation: a policy's runs also by the policy's fingerprint (re-tuned or retrained: rerun)."""
    policy = t.get("policy_id") if t["scheduler"] == POLICY else None
    return (t["part"], t["cluster"], t["load"], t["window"], t["scheduler"], t["agents"], t["spec"], policy)


def policy_fingerprint(policy_dir: str | Path) -> str:
    """A short hash of the policy's network and metadata (hysteresis included)."""
    h = hashlib.sha256()
    for name in ("metadata.json", "policy.pt"):
        h.update((Path(policy_dir) / name).read_bytes())
    return h.hexdigest()[:12]


def run_all(tasks: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    """Run ``tasks`` in ``workers`` processes, printing each as it finishes; results in task order."""
    done: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for i, r in enumerate(pool.map(run_one, tasks), 1):
            agents = f" {r['agents']} agents" if r["scheduler"] == POLICY else ""
            print(
                f"[{i}/{len(tasks)}] {r['part']:<8} {r['cluster'][-14:]:>14} w{r['window']} {r['scheduler']}{agents}: "
                f"avg JCT {r['avg_jct']:,.0f} s ({r['wall_s']:.0f} s)",
                flush=True,
            )
            done.append(r)
    return done


def paired(rows: Sequence[dict[str, Any]], a: str, b: str | Sequence[str]) -> tuple[float, float]:
    """Mean and std over windows of avg_jct(a) / avg_jct(b) - 1; ``b`` a list: the best of them per window."""
    by_window: dict[int, dict[str, float]] = {}
    for r in rows:
        key = r["scheduler"] if r["scheduler"] != POLICY else f"{POLICY}{r['agents']}"
        by_window.setdefault(r["window"], {})[key] = r["avg_jct"]
    ratios = []
    for w in by_window.values():
        ref = w[b] if isinstance(b, str) else min(w[x] for x in b)
        ratios.append(w[a] / ref - 1.0)
    return float(np.mean(ratios)), float(np.std(ratios))


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> list[str]:
    """A markdown table: one row per window, means ± std, paired gain vs tiresias and vs the best heuristic."""
    key = {c: c for c in columns}
    windows = sorted({r["window"] for r in rows})
    cell: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        name = r["scheduler"] if r["scheduler"] != POLICY else f"{POLICY}{r['agents']}"
        cell[(r["window"], name)] = r
    lines = ["| window | jobs | " + " | ".join(key[c] for c in columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    for w in windows:
        jobs = next(r["jobs"] for r in rows if r["window"] == w)
        vals = " | ".join(f"{cell[(w, c)]['avg_jct']:,.0f}" if (w, c) in cell else "" for c in columns)
        lines.append(f"| {w} | {jobs:,} | {vals} |")
    stats = []
    for c in columns:
        v = [cell[(w, c)]["avg_jct"] for w in windows if (w, c) in cell]
        stats.append(f"{np.mean(v):,.0f} ± {np.std(v):,.0f}" if v else "")
    lines.append("| mean ± std | | " + " | ".join(stats) + " |")
    present = [c for c in HEURISTICS if all((w, c) in cell for w in windows)]
    for ref in ("tiresias", present):
        if isinstance(ref, str) and ref not in present:
            continue
        label = f"paired vs {ref}" if isinstance(ref, str) else "paired vs best heuristic"
        gains = [
            "{:+.1%} ± {:.1%}".format(*paired(rows, c, ref)) if all((w, c) in cell for w in windows) else ""
            for c in columns
        ]
        lines.append(f"| {label} | | " + " | ".join(gains) + " |")
    return lines


def plot_agents(rows: Sequence[dict[str, Any]], path: Path) -> None:
    from experiments.plots import _plt

    plt = _plt()
    counts = sorted({r["agents"] for r in rows})
    jct = [np.mean([r["avg_jct"] for r in rows if r["agents"] == k]) for k in counts]
    ms = [np.mean([r["ms_per_decision"] for r in rows if r["agents"] == k]) for k in counts]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    ax[0].plot(counts, jct, marker="o")
    ax[0].set_xlabel("agents")
    ax[0].set_ylabel("mean avg JCT (s)")
    ax[1].plot(counts, ms, marker="o", color="tab:orange")
    ax[1].set_xlabel("agents")
    ax[1].set_ylabel("forward ms per agent decision")
    for a in ax:
        a.set_xscale("log", base=2)
        a.set_xticks(counts, [str(k) for k in counts])
    fig.suptitle("priority agents on 512 GPUs (8 racks), held-out windows at load 0.9")
    fig.tight_layout()
    _save(fig, path)


def plot_loads(rows: Sequence[dict[str, Any]], loads: Sequence[float], names: Sequence[str], path: Path) -> None:
    from experiments.plots import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        vals, errs = [], []
        for load in loads:
            m, s = paired([r for r in rows if r["load"] == load], name, "tiresias")
            vals.append(100 * m)
            errs.append(100 * s)
        ax.bar(np.arange(len(loads)) + i * width, vals, width, yerr=errs, label=name.replace(POLICY, "policy, agents="))
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xticks(np.arange(len(loads)) + 0.4 - width / 2, [f"load {x}" for x in loads])
    ax.set_ylabel("avg JCT vs Tiresias (%, paired)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    _save(fig, path)


def _save(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def dc1k(policy_dir: str, spec: str, agents: int) -> dict[str, Any]:
    """Workload ``spec`` on dc-1k with ``agents`` agents on Ray actors (in-process Ray), beside Tiresias."""
    import ray

    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from marl.deploy.actors import deploy_policy

    data = f"gavel:{GAVEL}" if GAVEL.is_file() else None
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", include_dashboard=False, log_to_driver=False, object_store_memory=200 * 1024**2)
    try:
        sched, actors = deploy_policy(policy_dir, num_agents=agents, name=POLICY)
        sim = build_simulator("dc-1k", spec, seed=0, interference="oracle", interference_data=data)
        t0 = time.perf_counter()
        result = sim.run(sched)
        wall = time.perf_counter() - t0
        served = actors.info()
        busy = sum(s["busy_s"] for s in served)
        out = {
            "agents": agents,
            "actors": len(served),
            "jobs": len(result.jct),
            "avg_jct": float(result.jct.mean()),
            "rounds": actors.calls,
            "decisions": actors.agent_calls,
            "decisions_per_s": actors.agent_calls / wall,
            "ms_per_decision": 1e3 * busy / max(actors.agent_calls, 1),
            "ms_per_round": 1e3 * wall / max(actors.calls, 1),
            "wall_s": wall,
        }
        actors.shutdown()
        out["tiresias"] = float(sim.run(get_policy("tiresias", seed=0)).jct.mean())
        return out
    finally:
        if started:
            ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", required=True, help="a priority-agent policy folder")
    ap.add_argument("--out", default="results/priority_report")
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--stride", type=float, default=1.75)
    ap.add_argument("--loads", type=float, nargs="+", default=[0.7, 0.9, 1.1])
    ap.add_argument("--parts", nargs="+", default=["small", "medium", "agents", "dc1k"])
    ap.add_argument("--heuristics", nargs="+", default=list(HEURISTICS + ORACLES))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--dc1k-workload", default="synthetic:10000,load=0.9", help="dc-1k's workload spec")
    ap.add_argument("--reuse", action="store_true", help="keep the simulations already in OUT/results.json")
    args = ap.parse_args(argv)
    from marl.deploy.registry import policy_kind

    if policy_kind(args.policy) != "priority":
        raise SystemExit(
            f"--policy {args.policy}: not a priority-agent policy folder (metadata.json, agent 'priority')"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    policy = str(Path(args.policy).resolve())
    policy_id = policy_fingerprint(policy)
    tasks: list[dict[str, Any]] = []

    def add(part: str, cluster: str, load: float, names: Sequence[str], agents: Sequence[int]) -> None:
        for w, spec in enumerate(window_specs(args.days, args.stride, load)):
            base = {"part": part, "cluster": cluster, "load": load, "window": w, "spec": spec, "policy_dir": policy,
                    "policy_id": policy_id}  # fmt: skip
            tasks.extend({**base, "scheduler": POLICY, "agents": k} for k in agents)
            tasks.extend({**base, "scheduler": n, "agents": 0} for n in names)

    if "small" in args.parts:
        for load in args.loads:
            add("small", "small", load, args.heuristics, [4])
    if "medium" in args.parts:
        add("medium", str(MEDIUM), 0.9, ["tiresias", "qssf"], [8])
    if "agents" in args.parts:
        add("agents", str(MEDIUM), 0.9, [], [1, 2, 4] if "medium" in args.parts else [1, 2, 4, 8])
    t0 = time.perf_counter()
    saved = out / "results.json"
    kept = json.loads(saved.read_text())["rows"] if args.reuse and saved.is_file() else []
    wanted = {_task_key(t) for t in tasks}
    kept = list({_task_key(r): r for r in kept if _task_key(r) in wanted}.values())  # this policy's, once each
    done = {_task_key(r) for r in kept}
    rows = kept + run_all([t for t in tasks if _task_key(t) not in done], args.workers)
    from cluster_sim.results import write_atomic

    write_atomic(saved, json.dumps({"args": vars(args), "rows": rows, "dc1k": None}, indent=1))
    report = [f"# Priority agents: `{args.policy}`", ""]
    report += [
        f"Held-out Philly windows of {args.days:g} days every {args.stride:g} days over 2017-11-01..14, "
        "model rule independent, ground-truth interference, restart cost 30 s; average JCT in seconds.",
        "",
    ]
    meta = json.loads((Path(policy) / "metadata.json").read_text())
    tuned = meta.get("tuned")
    report += [
        f"Policy `{policy_id}`: hysteresis {meta.get('agents', {}).get('hysteresis', float('nan')):.4f} "
        + (
            f"(ln {tuned['factor']:g}, selected on {len(tuned['windows'])} training windows)."
            if tuned
            else "(untuned)."
        ),
        "",
    ]
    cols = [f"{POLICY}4", *args.heuristics]
    for load in args.loads if "small" in args.parts else []:
        part = [r for r in rows if r["part"] == "small" and r["load"] == load]
        report += [f"## small (256 GPUs, 4 agents), load {load}", "", *table(part, cols), ""]
    if "small" in args.parts:
        shown = [f"{POLICY}4"] + [n for n in ("qssf", "srtf") if n in args.heuristics]
        plot_loads([r for r in rows if r["part"] == "small"], args.loads, shown, out / "loads.png")
        report += ["![paired gains](loads.png)", ""]
    if "medium" in args.parts:
        part = [r for r in rows if r["part"] == "medium"]
        report += [
            "## 512 GPUs (8 racks, 8 agents), load 0.9",
            "",
            *table(part, [f"{POLICY}8", "tiresias", "qssf"]),
            "",
        ]
    if "agents" in args.parts:
        part = [r for r in rows if r["scheduler"] == POLICY and r["cluster"] == str(MEDIUM)]
        report += [
            "## Agents on 512 GPUs, load 0.9: the cost of decentralisation",
            "",
            "| agents | mean avg JCT (s) | paired vs 1 agent | forward ms per round | ms per agent decision |",
            "|---:|---:|---:|---:|---:|",
        ]
        for k in sorted({r["agents"] for r in part}):
            rk = [r for r in part if r["agents"] == k]
            gain = "{:+.1%} ± {:.1%}".format(*paired(part, f"{POLICY}{k}", f"{POLICY}1")) if k > 1 else "0"
            report.append(
                f"| {k} | {np.mean([r['avg_jct'] for r in rk]):,.0f} | {gain} | "
                f"{np.mean([r['ms_per_round'] for r in rk]):.2f} | {np.mean([r['ms_per_decision'] for r in rk]):.3f} |"
            )
        plot_agents(part, out / "agents.png")
        report += ["", "![agents](agents.png)", ""]
    dc = None
    if "dc1k" in args.parts:
        print(f"dc-1k: 32 agents on Ray actors, {args.dc1k_workload} ...", flush=True)
        dc = dc1k(policy, args.dc1k_workload, 32)
        head = "jobs, avg JCT (s), tiresias (s), vs tiresias, actors, decisions/s, ms per decision, ms per round"
        vals = [
            f"{dc['jobs']:,}",
            f"{dc['avg_jct']:,.0f}",
            f"{dc['tiresias']:,.0f}",
            f"{dc['avg_jct'] / dc['tiresias'] - 1:+.1%}",
            str(dc["actors"]),
            f"{dc['decisions_per_s']:,.0f}",
            f"{dc['ms_per_decision']:.3f}",
            f"{dc['ms_per_round']:.2f}",
        ]
        report += [
            f"## dc-1k (8,192 GPUs), 32 agents on Ray actors, `{args.dc1k_workload}`",
            "",
            "| " + head.replace(", ", " | ") + " |",
            "|" + "---:|" * len(vals),
            "| " + " | ".join(vals) + " |",
            "",
        ]
    report.append(f"Total {(time.perf_counter() - t0) / 60:.1f} min with {args.workers} workers.")
    write_atomic(out / "results.json", json.dumps({"args": vars(args), "rows": rows, "dc1k": dc}, indent=1))
    write_atomic(out / "report.md", "\n".join(report) + "\n")
    print("\n".join(report))


if __name__ == "__main__":
    main()
