"""What the interference predictor buys when jobs may share GPUs: a table of average JCTs.

The Philly report period (2017-11-01..14) at load 0.9 on ``small``, with the ground-truth interference in
the simulator and GPU sharing allowed. Arrival order with backfilling throughout; only the packing
differs: none, blind (first lone GPU), predictor-guided (the learned model: a pair is packed only if its
predicted combined throughput is >= 1, or always, to the best partner), and guided by the ground truth
itself (the ceiling of any predictor).

    python experiments/benchmarks/gpu_sharing.py [--model MODEL.json] [--json out.json]

Without ``--model`` a predictor is fitted to Gavel's tables first (about 17 s).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from cluster_sim.build import build_simulator
from cluster_sim.policies import get_policy
from cluster_sim.policies.gpu_packing import GpuPacking

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
PHILLY = SHARED / "pollux-osdi21" / "traces" / "philly.csv"
GAVEL = f"gavel:{SHARED / 'gavel' / 'simulation_throughputs.json'}"
DEV_WINDOW = "start=2017-11-01,end=2017-11-15"  # the report period


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="learned predictor (default: fit one to Gavel's tables)")
    ap.add_argument("--workload", default=f"philly:{PHILLY},{DEV_WINDOW},load=0.9")
    ap.add_argument("--cluster", default="small")
    ap.add_argument("--json", default=None, help="write the figures here too")
    args = ap.parse_args()
    model = args.model
    if model is None:
        from interference.gavel_data import load_gavel_pairs
        from interference.training import TrainConfig, fit

        model = str(Path(tempfile.mkdtemp()) / "predictor.json")
        fit(load_gavel_pairs(GAVEL), TrainConfig()).save(model)
    rows = [
        ("no sharing", lambda: get_policy("pack-none")),
        ("blind packing", lambda: get_policy("pack-blind")),
        ("predictor-guided (gain >= 1)", lambda: GpuPacking(mode="aware", predictor=model)),
        ("predictor-guided (best partner)", lambda: GpuPacking(mode="aware", predictor=model, min_gain=0.0)),
        ("ground-truth-guided (gain >= 1)", lambda: GpuPacking(mode="aware", predictor="oracle", predictor_data=GAVEL)),
    ]
    results = []
    print(f"{args.workload} on {args.cluster}, ground-truth interference, GPU sharing allowed")
    print(f"{'packing':34s} {'avg JCT (s)':>12s} {'p50 (s)':>9s} {'p99 (s)':>9s} {'vs none':>8s} {'wall (s)':>9s}")
    base = None
    for label, make in rows:
        sim = build_simulator(
            args.cluster, args.workload, interference="oracle", interference_data=GAVEL, gpu_sharing=True
        )
        t0 = time.perf_counter()
        res = sim.run(make())
        wall = time.perf_counter() - t0
        m = res.metrics()
        base = m["avg_jct"] if base is None else base
        results.append({"packing": label, **{k: m[k] for k in ("avg_jct", "p50_jct", "p99_jct")}, "wall_s": wall})
        print(
            f"{label:34s} {m['avg_jct']:12,.0f} {m['p50_jct']:9,.0f} {m['p99_jct']:9,.0f} "
            f"{m['avg_jct'] / base - 1:+8.1%} {wall:9.1f}",
            flush=True,
        )
    if args.json:
        out = Path(args.json)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps({"workload": args.workload, "cluster": args.cluster, "rows": results}, indent=2))
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
