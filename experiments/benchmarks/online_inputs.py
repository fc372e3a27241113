"""The placing agents' interference inputs corrected online: how far off they are before and after.

A placing policy whose agents read a learned predictor's estimates (``experiments/policies/default-hetero``)
runs the ``hetero`` regime's windows (``small-hetero``, Philly jobs as Gavel's types, the measured ground truth)
twice: as shipped, and with ``interference_online`` (:mod:`marl.env.interference_obs`), where every pair of
jobs alone together on a server corrects the predictor at the server level. Each time such a pair is first
seen, the factor the agents were told (the correction so far) and the uncorrected predictor's are set beside
the factor each job runs at. Prints their mean absolute errors by how many pairs had been seen before, and
the average JCT of both runs, paired per window.

    python experiments/benchmarks/online_inputs.py [--policy DIR] [--windows 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BINS = (0, 10, 25, 50, 100, 200)  # pairs observed before (per run)


def run_window(policy: str, spec: str, online: bool) -> tuple[float, list[tuple[float, float, float]]]:
    """(average JCT, [(truth, told, uncorrected) per job of each first-seen pair]) of one run."""
    from cluster_sim.build import build_simulator
    from experiments.regimes import GAVEL, REGIMES
    from interference.base import CoLocation, Sharing
    from interference.online import OnlineCorrection
    from marl.deploy.priority_export import load_priority_policy

    reg = REGIMES["hetero"]
    sim = build_simulator(reg.cluster, spec, seed=0, interference="oracle", interference_data=f"gavel:{GAVEL}",
                          gpu_sharing=reg.gpu_sharing, restart_cost=30.0, **reg.sim_options)  # fmt: skip
    sched = load_priority_policy(policy, interference_online=online)
    seen: list[tuple[float, float, float]] = []
    original = OnlineCorrection.observe

    def observe(model: OnlineCorrection, job, partner, factor: float) -> None:
        told = model.predict(job, partner)[0]
        base = float(model.base.throughput_factors([CoLocation(job, ((partner, Sharing.SERVER),))])[0])
        seen.append((factor, told, base))
        original(model, job, partner, factor)

    OnlineCorrection.observe = observe  # type: ignore[method-assign]
    try:
        jct = float(sim.run(sched).jct.mean())
    finally:
        OnlineCorrection.observe = original  # type: ignore[method-assign]
    return jct, seen


def main(argv: list[str] | None = None) -> dict:
    from experiments.regimes import REGIMES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default=str(REPO / "experiments/policies/default-hetero"))
    ap.add_argument("--windows", type=int, default=3, help="the regime's first windows (7 in all)")
    args = ap.parse_args(argv)
    specs = [spec for spec, _ in REGIMES["hetero"].workloads()][: args.windows]
    rows, errors = [], []
    for w, spec in enumerate(specs):
        t0 = time.perf_counter()
        shipped, _ = run_window(args.policy, spec, online=False)
        online, seen = run_window(args.policy, spec, online=True)
        rows.append((shipped, online))
        errors.append(np.array(seen).reshape(-1, 3))
        print(f"window {w}: avg JCT {shipped:,.0f} s as shipped, {online:,.0f} s online "
              f"({online / shipped - 1:+.1%}); {len(seen) // 2} pairs observed; {time.perf_counter() - t0:.0f} s",
              flush=True)  # fmt: skip
    print("\nmean absolute error of the factor of each job of a pair when the pair is first seen")
    print(f"{'pairs seen before':>18}  {'jobs':>5}  {'uncorrected':>11}  {'told (online)':>13}")
    table = []
    for lo, hi in zip(BINS, (*BINS[1:], None), strict=True):
        part = [e[2 * lo : 2 * hi if hi is not None else None] for e in errors]
        arr = np.concatenate(part) if part else np.zeros((0, 3))
        if not len(arr):
            continue
        base, told = np.abs(arr[:, 2] - arr[:, 0]).mean(), np.abs(arr[:, 1] - arr[:, 0]).mean()
        label = f"{lo}-{hi - 1}" if hi is not None else f"{lo}+"
        table.append({"pairs_before": label, "jobs": len(arr), "uncorrected_mae": base, "online_mae": told})
        print(f"{label:>18}  {len(arr):>5}  {base:>11.3f}  {told:>13.3f}")
    ratio = np.array([o / s for s, o in rows])
    spread = ratio.std(ddof=1) if len(ratio) > 1 else 0.0
    print(f"\naverage JCT online vs as shipped: {ratio.mean() - 1:+.1%} ± {spread:.1%} over {len(rows)} windows")
    return {"windows": rows, "table": table}


if __name__ == "__main__":
    main()
