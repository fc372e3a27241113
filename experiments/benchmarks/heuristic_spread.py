"""How far apart the heuristics are over consecutive windows of a trace at a target load: the room a learned
scheduler has. Prints each window's average JCT per policy, the means, and each mean relative to a
reference policy (default tiresias). Oracle policies (sjf, srtf) bound what knowing durations buys.

    python experiments/benchmarks/heuristic_spread.py                       # Philly 2017-11-01..14, 2-day windows
    python experiments/benchmarks/heuristic_spread.py --days 7 --load 1.1 --policies fifo tiresias srtf qssf
    python experiments/benchmarks/heuristic_spread.py --days 7 --stride 1.75 --reference qssf \
        --policies tiresias qssf srtf marl:experiments/policies/philly-small    # 5 overlapping weeks
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
PHILLY = TRACES / "pollux-osdi21" / "traces" / "philly.csv"
GAVEL = TRACES / "gavel" / "simulation_throughputs.json"
DEV_START, DEV_END = 4_973_359.0, 6_182_959.0  # 2017-11-01 .. 2017-11-15, seconds from the trace start


def main(argv: list[str] | None = None) -> None:
    from cluster_sim.build import build_simulator
    from experiments.simulate import make_scheduler_by_name

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=f"philly:{PHILLY}", help="a trace workload spec without options")
    ap.add_argument("--start", type=float, default=DEV_START, help="seconds from the trace start")
    ap.add_argument("--end", type=float, default=DEV_END)
    ap.add_argument("--days", type=float, default=2.0, help="window length")
    ap.add_argument("--stride", type=float, default=None, help="days between window starts (default: --days)")
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--cluster", default="small")
    ap.add_argument("--policies", nargs="+", default=["fifo", "tiresias", "qssf", "qssf-np", "sjf", "srtf"])
    ap.add_argument("--reference", default="tiresias")
    ap.add_argument("--interference", default="oracle")
    args = ap.parse_args(argv)
    data = f"gavel:{GAVEL}" if args.interference == "oracle" and GAVEL.is_file() else None
    length = args.days * 86400.0
    stride = (args.stride or args.days) * 86400.0
    rows = []
    print(f"{'window':>8} {'jobs':>6} " + " ".join(f"{p:>10}" for p in args.policies), flush=True)
    for k, t0 in enumerate(np.arange(args.start, args.end - length + stride - 1.0, stride)):
        spec = f"{args.trace},start={t0},end={min(t0 + length, args.end)},load={args.load}"
        row = {}
        for name in args.policies:
            sim = build_simulator(args.cluster, spec, seed=0, interference=args.interference, interference_data=data)
            row[name] = float(sim.run(make_scheduler_by_name(name, 0)).metrics()["avg_jct"])
        rows.append(row)
        print(f"{k:>8} {len(sim.jobs):>6} " + " ".join(f"{row[p]:>10.0f}" for p in args.policies), flush=True)
    means = {p: float(np.mean([r[p] for r in rows])) for p in args.policies}
    print(f"{'mean':>8} {'':>6} " + " ".join(f"{means[p]:>10.0f}" for p in args.policies))
    stds = {p: float(np.std([r[p] for r in rows])) for p in args.policies}
    print(f"{'std':>8} {'':>6} " + " ".join(f"{stds[p]:>10.0f}" for p in args.policies))
    if args.reference in means:
        ref = means[args.reference]
        print(f"{'vs ' + args.reference:>15} " + " ".join(f"{means[p] / ref - 1:>+10.1%}" for p in args.policies))
        paired = {p: [r[p] / r[args.reference] - 1 for r in rows] for p in args.policies}
        print(
            f"{'paired':>15} "
            + " ".join(f"{np.mean(paired[p]):+.1%}±{np.std(paired[p]):.1%}".rjust(10) for p in args.policies)
        )


if __name__ == "__main__":
    main()
