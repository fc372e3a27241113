"""Policy runtime per round of the heterogeneity-aware schedulers as the cluster grows (Sia's scaling study).

The ``sia-hetero`` cluster (6 x 4 T4, 3 x 8 RTX 2080 Ti, 2 x 8 A100) is scaled k times (every type's node
count x k) and one of Sia's Philly workloads is replayed k times over (each job k times, same arrivals), so
the load per GPU stays Sia's. Each policy runs until ``--hours`` of simulated time; the rounds it decides
after ``--warmup`` hours (the cluster is busy by then) are timed: median and p95 wall time of a whole round
(allocation, placement, decisions) and of its solver alone where it has one. Sia reports a median of 96 ms
per round at 1x for Sia, 13 ms for Gavel and 2.2 s for Pollux.

    python experiments/benchmarks/policy_runtime.py                    # 1x, 8x, 32x; sia, gavel, pollux
    python experiments/benchmarks/policy_runtime.py --scales 1 8 --policies sia gavel --hours 1.5
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

import numpy as np

from topology.datacenter import CLUSTER_PRESETS

SIA = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "sia-sosp23"


class _Stop(Exception):
    """Raised by :class:`_Timed` once the simulated time is up."""


class _Timed:
    """A policy that records the simulated time of each round it decides and stops the run at ``until``."""

    def __init__(self, policy: Any, until: float) -> None:
        self.policy, self.until, self.times = policy, until, []
        for attr in ("name", "elastic", "one_gpu_type", "wants_all_points"):
            if hasattr(policy, attr):
                setattr(self, attr, getattr(policy, attr))

    def reset(self, view) -> None:
        self.policy.reset(view)

    def schedule(self, view):
        if view.now >= self.until:
            raise _Stop
        before = len(self.policy.round_seconds)
        decisions = self.policy.schedule(view)
        self.times += [view.now] * (len(self.policy.round_seconds) - before)
        return decisions


def scaled_cluster(k: int) -> dict[str, Any]:
    spec = dict(CLUSTER_PRESETS["sia-hetero"])
    spec.update(name=f"sia-hetero-x{k}", racks_per_pod=spec["racks_per_pod"] * k)
    return spec


def measure(policy_name: str, k: int, workload: int, hours: float, warmup: float) -> dict[str, float]:
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from cluster_sim.workload_spec import parse_workload_spec

    cluster = scaled_cluster(k)
    spec = f"pollux:{SIA}/workloads/philly/workload-{workload}.csv,profiles={SIA}/traces"
    base = parse_workload_spec(spec, cluster_gpus=64 * k, seed=0)
    jobs = base.subset(np.repeat(np.arange(len(base)), k))
    sim = build_simulator(cluster, jobs, restart_cost=30, start_cost=30, app_restart_costs=True, calibration=True)
    policy = get_policy(policy_name)
    timed = _Timed(policy, hours * 3600.0)
    wall = time.perf_counter()
    with contextlib.suppress(_Stop):
        sim.run(timed)
    wall = time.perf_counter() - wall
    after = np.asarray(timed.times) >= warmup * 3600.0
    rounds = np.asarray(policy.round_seconds)[after] * 1000.0
    solve = np.asarray(getattr(policy, "solve_seconds", []), dtype=float)
    solve = solve[after[: len(solve)]] * 1000.0 if len(solve) == len(after) else np.zeros(0)
    active = len(sim.running) + len(sim.queue)
    return {
        "gpus": int(sim.topo.num_gpus),
        "jobs": len(jobs),
        "active": active,
        "rounds": int(after.sum()),
        "p50": float(np.median(rounds)) if len(rounds) else float("nan"),
        "p95": float(np.percentile(rounds, 95)) if len(rounds) else float("nan"),
        "solve_p50": float(np.median(solve)) if len(solve) else float("nan"),
        "wall": wall,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scales", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--policies", nargs="+", default=["sia", "gavel", "pollux"])
    ap.add_argument("--workload", type=int, default=1, help="Sia's Philly workload number (1-8)")
    ap.add_argument("--hours", type=float, default=2.0, help="simulated hours run at each scale")
    ap.add_argument("--warmup", type=float, default=1.0, help="simulated hours before rounds are timed")
    args = ap.parse_args(argv)
    if not (SIA / "workloads" / "philly").is_dir():
        raise SystemExit(f"policy_runtime: Sia's workloads are not at {SIA}/workloads/philly (see ../shared/traces)")
    print(f"{'policy':>8} {'scale':>5} {'GPUs':>5} {'jobs':>5} {'active':>6} {'rounds':>6} "
          f"{'round p50 ms':>12} {'p95 ms':>8} {'solve p50 ms':>12} {'run s':>6}", flush=True)  # fmt: skip
    for k in args.scales:
        for name in args.policies:
            r = measure(name, k, args.workload, args.hours, args.warmup)
            print(f"{name:>8} {k:>4}x {r['gpus']:>5} {r['jobs']:>5} {r['active']:>6} {r['rounds']:>6} "
                  f"{r['p50']:>12.1f} {r['p95']:>8.1f} {r['solve_p50']:>12.1f} {r['wall']:>6.1f}",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
