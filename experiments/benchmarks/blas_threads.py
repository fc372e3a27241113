"""Replays of Sia and Pollux with BLAS on one thread (what the simulator sets, ``cluster_sim.blas_threads``)
and on BLAS's default threads: wall seconds and the average JCT of each, which must be the same.

A simulation's linear algebra is tiny (Pollux refits each job's seven step-time parameters with L-BFGS-B,
thousands of fits a replay; Sia's goodputs); BLAS's threads only slow such calls down, the more so the
busier the cores. Ray's workers already run on one thread, so this is about in-process runs (``marlsched
simulate``, the Python API, the benchmarks).

    python experiments/benchmarks/blas_threads.py
    python experiments/benchmarks/blas_threads.py --jobs 160
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

SIA = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "sia-sosp23"


def replay(policy: str, jobs: int) -> tuple[float, float]:
    """(wall seconds, average JCT) of ``policy`` on the first ``jobs`` jobs of Sia's first Philly workload."""
    from cluster_sim import goodput
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    goodput._fit.cache_clear()  # every fit done again
    spec = f"pollux:{SIA}/workloads/philly/workload-1.csv,profiles={SIA}/traces,max_jobs={jobs}"
    sim = build_simulator("sia-hetero", spec, app_restart_costs=True, calibration=True)
    start = time.perf_counter()
    result = sim.run(get_policy(policy))
    return time.perf_counter() - start, float(result.jct.mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=60, help="the first jobs of Sia's workload-1 (160 in all)")
    ap.add_argument("--policies", nargs="+", default=["sia", "pollux"])
    args = ap.parse_args()
    if not SIA.is_dir():
        raise SystemExit(f"Sia's artifact not found at {SIA}: ../shared/traces/sia-sosp23 beside the repository")
    from cluster_sim import goodput, simulator

    threads = {var: os.environ.get(var, "unset") for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load {load:.1f}, {threads}; the first {args.jobs} jobs of Sia's workload-1")
    # BLAS's default threads first: the simulator's setting, once made, lasts for the process
    one_thread = simulator.one_blas_thread
    simulator.one_blas_thread = goodput.one_blas_thread = lambda: None
    try:
        default = {name: replay(name, args.jobs) for name in args.policies}
    finally:
        simulator.one_blas_thread = goodput.one_blas_thread = one_thread
    one = {name: replay(name, args.jobs) for name in args.policies}
    print(f"{'policy':8s} {'default threads s':>18s} {'one thread s':>13s} {'speed-up':>9s} {'avg JCT s':>10s} same")
    for name in args.policies:
        (d_s, d_jct), (o_s, o_jct) = default[name], one[name]
        print(f"{name:8s} {d_s:18.1f} {o_s:13.1f} {d_s / o_s:8.1f}x {o_jct:10.1f} {d_jct == o_jct}")


if __name__ == "__main__":
    main()
