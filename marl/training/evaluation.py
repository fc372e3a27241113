"""The evaluation phase of training: the trained policy, its warm start, the expert and the heuristics on
workload seeds that training never draws, written as ``eval.json`` and ``comparison.md``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.results import write_atomic
from marl.env.placement_config import EnvConfig
from marl.training.config import TrainConfig

Log = Callable[[str], None]

EVAL_METRICS = ("avg_jct", "p50_jct", "p95_jct", "avg_queue_delay", "makespan", "gpu_utilization", "jobs_completed")


def evaluate_run(cfg: TrainConfig, run_dir: str | Path, log: Log = print) -> dict[str, Any]:
    """Trained policy, warm-started policy, expert and heuristics on the evaluation seeds; writes
    ``eval.json`` and ``comparison.md`` into ``run_dir``."""
    from marl.deploy.export import TorchScriptPolicy, load_marl_policy, marl_scheduler, read_metadata
    from marl.env.obs_layout import ObsLayout
    from marl.training.expert import ExpertPolicy

    run_dir = Path(run_dir).resolve()
    policy_dir = run_dir / "policy"
    meta = read_metadata(policy_dir)
    schedulers: dict[str, Callable[[], Any]] = {"marl": lambda: load_marl_policy(policy_dir)}
    warm = run_dir / "warm_start" / "module"
    if warm.is_dir():
        from marl.models.rl_module import HGNNRLModule

        net = HGNNRLModule.from_checkpoint(str(warm)).net
        warm_fn = TorchScriptPolicy(net)
        schedulers["marl-warm-start"] = lambda: marl_scheduler(
            warm_fn, meta, policy_dir=policy_dir, name="marl-warm-start"
        )
    layout = ObsLayout.from_dict(meta["layout"])
    expert = ExpertPolicy(layout, meta["placements"], cfg.warm_start.strategy, cfg.warm_start.backfill)
    schedulers["expert"] = lambda: marl_scheduler(expert, meta, policy_dir=policy_dir, name="expert")
    from cluster_sim.policies import get_policy

    for name in cfg.evaluation.heuristics:
        schedulers[name] = lambda name=name: get_policy(name, seed=cfg.seed)
    per_seed: dict[str, list[dict]] = {name: [] for name in schedulers}
    workload = cfg.evaluation.workload or EnvConfig.from_dict(cfg.env).workload
    t0 = time.perf_counter()
    for seed in cfg.evaluation.seeds:
        sim = eval_simulator(cfg, workload, seed)
        for name, make in schedulers.items():
            result = sim.run(make())
            metrics = result.metrics()
            metrics["scheduler"] = name
            per_seed[name].append(metrics)
    means = {name: {k: float(np.mean([m[k] for m in runs])) for k in EVAL_METRICS} for name, runs in per_seed.items()}
    for name, runs in per_seed.items():
        means[name]["avg_jct_std"] = float(np.std([m["avg_jct"] for m in runs]))
    report = {
        "workload": workload,
        "seeds": list(cfg.evaluation.seeds),
        "interference": cfg.evaluation.interference,
        "cluster": meta["cluster"],
        "num_agents": meta["num_agents"],
        "mean": means,
        "per_seed": per_seed,
        "eval_s": time.perf_counter() - t0,
    }
    write_atomic(run_dir / "eval.json", json.dumps(report, indent=2, default=_json_default) + "\n")
    table = comparison_markdown(report)
    write_atomic(run_dir / "comparison.md", table)
    log(table)
    return report


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def eval_simulator(cfg: TrainConfig, workload_spec: str, seed: int) -> Any:
    """The evaluation simulator: the run's cluster and workload, the evaluation's ground-truth interference."""
    from cluster_sim.build import build_simulator

    env = EnvConfig.from_dict(cfg.env)
    mode = cfg.evaluation.interference
    data = {"oracle": cfg.evaluation.oracle_data, "learned": env.interference_model}.get(mode)
    return build_simulator(
        env.cluster,
        workload_spec,
        seed=seed,
        interference=mode,
        interference_data=data,
        restart_cost=env.restart_cost,
        perf_model=env.perf_model,
    )


def comparison_markdown(report: Mapping[str, Any]) -> str:
    """Markdown table of the mean metrics per scheduler, best average JCT first, relative to FIFO."""
    means = report["mean"]
    ref = means.get("fifo", {}).get("avg_jct")
    cluster = report["cluster"]
    if isinstance(cluster, Mapping):
        cluster = cluster.get("name", "an inline cluster spec")
    lines = [
        f"# MARL vs heuristics: {report['workload']} on {cluster}, {report['num_agents']} agents",
        "",
        f"Interference: {report['interference']}; workload seeds {report['seeds']} (never drawn in training); "
        "means over seeds.",
        "",
        "| scheduler | avg JCT (s) | ± std | vs FIFO | p50 JCT (s) | p95 JCT (s) | queue delay (s) | makespan (s) "
        "| GPU util | jobs done |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in sorted(means.items(), key=lambda kv: kv[1]["avg_jct"]):
        rel = f"{m['avg_jct'] / ref:.3f}" if ref else "-"
        lines.append(
            f"| {name} | {m['avg_jct']:.0f} | {m['avg_jct_std']:.0f} | {rel} | {m['p50_jct']:.0f} | "
            f"{m['p95_jct']:.0f} | {m['avg_queue_delay']:.0f} | {m['makespan']:.0f} | {m['gpu_utilization']:.3f} | "
            f"{m['jobs_completed']:.0f} |"
        )
    return "\n".join(lines) + "\n"
