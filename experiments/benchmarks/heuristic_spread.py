"""How far apart the heuristics are over consecutive windows of a trace at a target load: the room a learned
scheduler has. Prints each window's average JCT per policy, the means, and each mean relative to a
reference policy (default tiresias). Oracle policies (sjf, srtf) bound what knowing durations buys.

    python experiments/benchmarks/heuristic_spread.py                       # Philly 2017-11-01..14, 2-day windows
    python experiments/benchmarks/heuristic_spread.py --days 7 --load 1.1 --policies fifo tiresias srtf qssf
    python experiments/benchmarks/heuristic_spread.py --regime hetero      # a named regime (experiments/regimes.py)
    python experiments/benchmarks/heuristic_spread.py --days 7 --stride 1.75 --reference qssf \
        --policies tiresias qssf srtf marl:experiments/policies/philly-small    # 5 overlapping weeks
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from cluster_sim.traces.periods import window_spec


def play(cluster: str, spec: str, seed: int, name: str, interference: str, data: str | None, sharing: bool,
         options: dict) -> tuple[float, int]:  # fmt: skip
    """One policy on one window: (its average JCT, the window's jobs); a function of its arguments only, so it
    runs in any process."""
    from cluster_sim.build import build_simulator
    from experiments.simulate import make_scheduler_by_name

    sim = build_simulator(
        cluster, spec, seed=seed, interference=interference, interference_data=data, gpu_sharing=sharing, **options
    )
    return float(sim.run(make_scheduler_by_name(name, 0)).metrics()["avg_jct"]), len(sim.jobs)


def main(argv: list[str] | None = None) -> None:
    from experiments.regimes import DEV_END, DEV_START, GAVEL, PHILLY, REGIMES

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regime", choices=sorted(REGIMES), help="a named regime (experiments/regimes.py); "
                    "--policies and --reference still apply")  # fmt: skip
    ap.add_argument("--trace", default=f"philly:{PHILLY}", help="a trace workload spec without options")
    ap.add_argument("--start", type=float, default=DEV_START, help="seconds from the trace start")
    ap.add_argument("--end", type=float, default=DEV_END)
    ap.add_argument("--days", type=float, default=2.0, help="window length")
    ap.add_argument("--stride", type=float, default=None, help="days between window starts (default: --days)")
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--cluster", default="small")
    ap.add_argument("--policies", nargs="+", default=None,
                    help="default: the regime's, else fifo tiresias qssf qssf-np sjf srtf")  # fmt: skip
    ap.add_argument("--reference", default=None, help="default: the regime's, else tiresias")
    ap.add_argument("--interference", default="oracle")
    ap.add_argument("--workers", type=int, default=1, help="processes playing windows side by side (same figures)")
    args = ap.parse_args(argv)
    if args.regime:
        reg = REGIMES[args.regime]
        workloads = reg.workloads()
        cluster, interference, sharing, options = reg.cluster, reg.interference, reg.gpu_sharing, reg.sim_options
        policies, reference = args.policies or list(reg.policies), args.reference or reg.reference
        print(f"regime {reg.name}: {cluster}, {len(workloads)} workloads, e.g. {workloads[0][0]}")
    else:
        length = args.days * 86400.0
        stride = (args.stride or args.days) * 86400.0
        workloads = [
            (window_spec(args.trace, t0, min(t0 + length, args.end), args.load), 0)
            for t0 in np.arange(args.start, args.end - length + stride - 1.0, stride)
        ]
        cluster, interference, sharing, options = args.cluster, args.interference, False, {}
        policies = args.policies or ["fifo", "tiresias", "qssf", "qssf-np", "sjf", "srtf"]
        reference = args.reference or "tiresias"
    data = f"gavel:{GAVEL}" if interference == "oracle" and GAVEL.is_file() else None
    rows = []
    print(f"{'window':>8} {'jobs':>6} " + " ".join(f"{p:>10}" for p in policies), flush=True)
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        cells = {
            (k, name): pool.submit(play, cluster, spec, seed, name, interference, data, sharing, options)
            for k, (spec, seed) in enumerate(workloads)
            for name in policies
        }
        for k in range(len(workloads)):
            row = {name: cells[k, name].result()[0] for name in policies}
            rows.append(row)
            jobs = cells[k, policies[0]].result()[1]
            print(f"{k:>8} {jobs:>6} " + " ".join(f"{row[p]:>10.0f}" for p in policies), flush=True)
    means = {p: float(np.mean([r[p] for r in rows])) for p in policies}
    print(f"{'mean':>8} {'':>6} " + " ".join(f"{means[p]:>10.0f}" for p in policies))
    stds = {p: float(np.std([r[p] for r in rows])) for p in policies}
    print(f"{'std':>8} {'':>6} " + " ".join(f"{stds[p]:>10.0f}" for p in policies))
    if reference in means:
        ref = means[reference]
        print(f"{'vs ' + reference:>15} " + " ".join(f"{means[p] / ref - 1:>+10.1%}" for p in policies))
        paired = {p: [r[p] / r[reference] - 1 for r in rows] for p in policies}
        print(
            f"{'paired':>15} "
            + " ".join(f"{np.mean(paired[p]):+.1%}±{np.std(paired[p]):.1%}".rjust(10) for p in policies)
        )
        fair = [p for p in policies if "oracle" not in p and not p.startswith(("srtf", "sjf"))]
        if len(fair) > 1:
            best, worst = min(fair, key=means.get), max(fair, key=means.get)
            print(f"spread of the non-oracle policies: best {best} {means[best]:.0f} s, worst {worst} "
                  f"{means[worst]:.0f} s ({means[worst] / means[best] - 1:+.1%} over the best)")  # fmt: skip


if __name__ == "__main__":
    main()
