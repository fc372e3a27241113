"""One evaluation episode on dc-1k (1,024 servers, 8,192 GPUs) with 32 agents served by Ray actors (by
default one per CPU, each answering its group of agents in one batched forward pass): the episode must
complete, and the figures that matter at scale are printed.

The policy's network is built for one partition shape (GPUs, servers, racks per agent). A policy trained
on ``small`` (one 64-GPU rack per agent) does not fit dc-1k's 32 partitions (two 16-server racks, 256
GPUs each), so by default the script exports an untrained policy of dc-1k's shape (seeded, same width as
``marl_small.yaml``); the cost of a decision does not depend on the weights. ``--policy DIR`` uses an
exported policy of the right shape instead.

Figures: ``decisions_per_s`` (answers of agents that had a choice, per second of the episode; an agent
with a single allowed action is not asked, see :mod:`marl.deploy.actors`), ``ms_per_decision`` (forward time
per agent decision inside the actors), ``ms_per_round`` (one round as the simulator sees it: all asked
agents, Ray's transport included), and the share of the episode's wall time spent in the actors versus
the coordinator (candidates and features). ``--check`` replays the episode with in-process inference and
reports whether every decision was the same.

    python -m experiments.benchmarks.marl_deploy_dc1k                  # 5,000 jobs, 32 agents
    python -m experiments.benchmarks.marl_deploy_dc1k --jobs 200 --check --json out.json
    python -m experiments.benchmarks.marl_deploy_dc1k --address HEAD:PORT   # an existing (multi-node) cluster
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cluster_sim.results import write_atomic


def export_untrained(
    out: Path, cluster: str, agents: int, queue_slots: int, hidden: int, predictor: str | None
) -> Path:
    """Export a freshly initialised (seed 0) policy of ``cluster``'s partition shape into ``out/policy``."""
    from marl.deploy.export import CKPT_META, export_policy_dir
    from marl.training.config import parse_train_config
    from marl.training.run_folder import checkpoint_meta
    from marl.training.train import module_spec_for

    env: dict[str, Any] = {
        "cluster": cluster,
        "num_agents": agents,
        "queue_slots": queue_slots,
        "queue_order": "estimate",
        "interference": "learned" if predictor else "none",
        "interference_model": predictor,
    }
    cfg = parse_train_config({"name": f"untrained-{cluster}", "env": env, "model": {"hidden": hidden}})
    torch.manual_seed(0)
    spec, _ = module_spec_for(cfg, cfg.env_config())
    module = spec.build()
    ckpt = out / "untrained"
    module.save_to_path(str(ckpt / "module"))
    write_atomic(ckpt / CKPT_META, json.dumps(checkpoint_meta(cfg, 0), indent=2) + "\n")
    export_policy_dir(ckpt, out / "policy", onnx=False, log=lambda m: None)
    return out / "policy"


class TimedPolicy:
    """Wraps the actor policy to time each round as the simulator sees it; prints progress every
    ``every`` rounds (``progress`` reports what the simulator has done)."""

    def __init__(self, policy: Any, progress: Any = None, every: int = 1000) -> None:
        self.policy = policy
        self.progress = progress
        self.every = every
        self.round_s: list[float] = []
        self.asked: list[int] = []
        self.t0 = time.perf_counter()

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        before = self.policy.agent_calls
        t0 = time.perf_counter()
        out = self.policy(batch)
        self.round_s.append(time.perf_counter() - t0)
        self.asked.append(self.policy.agent_calls - before)
        if self.progress is not None and len(self.round_s) % self.every == 0:
            print(f"  {len(self.round_s)} rounds, {self.progress()}, {time.perf_counter() - self.t0:.0f} s", flush=True)
        return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    from cluster_sim.perf_model import PerformanceModel
    from cluster_sim.simulator import Simulator
    from cluster_sim.workload_spec import parse_workload_spec
    from interference import load_interference_model
    from marl.deploy.actors import RayActorPolicy
    from marl.deploy.export import marl_scheduler, read_metadata
    from topology import build_cluster

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        if args.policy:
            policy_dir, which = Path(args.policy), f"exported policy {args.policy}"
        else:
            policy_dir = export_untrained(
                Path(tmp), args.cluster, args.agents, args.queue_slots, args.hidden, args.predictor_model
            )
            which = "untrained policy of dc-1k's partition shape (seed 0)"
        meta = read_metadata(policy_dir)
        export_s = time.perf_counter() - t0
        view = build_cluster(args.cluster).view
        workload = parse_workload_spec(args.workload, cluster_gpus=view.num_gpus, seed=args.seed)
        truth = load_interference_model("oracle", args.oracle_data)
        sim = Simulator(view, workload, perf=PerformanceModel(view), interference=truth, record_timeline=False)
        if args.address:
            ray.init(address=args.address, log_to_driver=False)
        else:
            ray.init(
                num_cpus=args.num_cpus, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False
            )
        try:
            t0 = time.perf_counter()
            actors = RayActorPolicy(policy_dir, num_actors=args.actors)
            actors.info()  # wait until every actor has loaded the policy
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
            start_s = time.perf_counter() - t0
            timed = TimedPolicy(actors, lambda: f"{sim.num_completed}/{len(workload)} jobs done")
            sched = marl_scheduler(timed, meta, policy_dir=policy_dir, name="marl-ray")
            t0 = time.perf_counter()
            result = sim.run(sched)
            episode_s = time.perf_counter() - t0
            served = actors.info()
            actors.shutdown()
        finally:
            ray.shutdown()
        identical = None
        if args.check:
            from marl.deploy.export import load_marl_policy

            print("  replaying the episode with in-process inference ...", flush=True)
            reference = sim.run(load_marl_policy(policy_dir))
            identical = bool(
                np.array_equal(reference.start, result.start, equal_nan=True)
                and np.array_equal(reference.end, result.end, equal_nan=True)
                and np.array_equal(reference.span, result.span)
            )
    m = result.metrics()
    rounds = np.array(timed.round_s)
    asked = np.array(timed.asked)
    busy = sum(s["busy_s"] for s in served)
    decisions = int(asked.sum())
    per_round = rounds[asked > 0]
    return {
        "cluster": args.cluster,
        "agents": int(meta["num_agents"]),
        "partition": meta["partition"],
        "policy": which,
        "workload": args.workload,
        "seed": args.seed,
        "jobs": len(workload),
        "jobs_completed": int(m["jobs_completed"]),
        "avg_jct_s": float(m["avg_jct"]),
        "episode_wall_s": episode_s,
        "actor_start_s": start_s,
        "export_s": export_s,
        "policy_rounds": len(rounds),
        "agent_decisions": decisions,
        "actors": len(served),
        "nodes": nodes,
        "actor_nodes": len({s["node_id"] for s in served}),
        "decisions_per_s": decisions / episode_s,
        "ms_per_decision": 1e3 * busy / max(decisions, 1),
        "ms_per_round": 1e3 * float(per_round.mean()) if len(per_round) else 0.0,
        "round_latency_ms_p50": 1e3 * float(np.median(per_round)) if len(per_round) else 0.0,
        "round_latency_ms_p99": 1e3 * float(np.quantile(per_round, 0.99)) if len(per_round) else 0.0,
        "agents_asked_per_round_mean": float(asked[asked > 0].mean()) if decisions else 0.0,
        "round_share_of_wall": float(rounds.sum() / episode_s),
        "cpus": args.num_cpus,
        "host": platform.node(),
        "identical_to_in_process": identical,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cluster", default="dc-1k")
    ap.add_argument("--agents", type=int, default=32)
    ap.add_argument("--workload", default="synthetic:5000,load=2", help="workload spec (see marlsched simulate)")
    ap.add_argument("--jobs", type=int, help="shorthand: synthetic:JOBS,load=2")
    ap.add_argument("--seed", type=int, default=1_000_001)
    ap.add_argument("--queue-slots", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--policy", help="an exported policy folder of the cluster's partition shape")
    ap.add_argument("--predictor-model", help="learned interference model file the agents read (default: none)")
    ap.add_argument("--oracle-data", default="gavel:../shared/traces/gavel/simulation_throughputs.json")
    ap.add_argument("--num-cpus", type=int, default=2, help="CPUs of the in-process Ray (the actors share them)")
    ap.add_argument("--actors", type=int, help="Ray actors serving the agents (default: one per CPU)")
    ap.add_argument("--address", help="an existing Ray cluster (default: start Ray in-process)")
    ap.add_argument("--check", action="store_true", help="replay in-process and compare every decision")
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if args.jobs:
        args.workload = f"synthetic:{args.jobs},load=2"
    out = run(args)
    for key, value in out.items():
        print(f"{key:30s} {value:.4g}" if isinstance(value, float) else f"{key:30s} {value}")
    if args.json:
        write_atomic(Path(args.json), json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
