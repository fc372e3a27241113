"""Online correction of the interference predictor on job types it never saw, during a simulated run.

The predictor is fitted on Gavel's pairs without the held-out model families (``--holdout``). A packing
scheduler (``pack-aware`` with ``online=True``) then runs a loaded workload of Gavel's job types, the
held-out ones included, on a cluster of one-GPU servers (so a job's throughput is its GPU pair's alone),
against the measured ground truth (``oracle`` with Gavel's tables). Every pair it co-locates is observed
once, in both directions, and corrects the predictor (:class:`interference.online.OnlineCorrection`).

The observations are replayed in order, and after 0, 25, 50, ... of them the corrected predictor is scored
on every distinct pair of the run that involves a held-out type: mean absolute error against the ground
truth, and how often the truth lies within one predicted standard deviation. Prints the table and writes
a PNG beside it (``--out``).

    python experiments/benchmarks/online_correction.py
    python experiments/benchmarks/online_correction.py --holdout Transformer --jobs 600 --out results/online
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

GAVEL = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "gavel" / "simulation_throughputs.json"
CHECKPOINTS = (0, 10, 25, 50, 100, 200)  # co-locations observed (each one: both jobs' throughputs)


def holdout_predictor(families: list[str], seed: int):
    """The learned predictor fitted on Gavel's single-GPU pairs without ``families``."""
    from interference.gavel_data import load_gavel_pairs
    from interference.training import TrainConfig, fit_queries, gavel_queries

    pairs = load_gavel_pairs(GAVEL)
    fa, fb = pairs.family_a(), pairs.family_b()
    keep = pairs.feasible & (pairs.scale_factor == 1) & ~np.isin(fa, families) & ~np.isin(fb, families)
    queries, y, _ = gavel_queries(pairs.select(keep))
    return fit_queries(queries, y, TrainConfig(seed=seed))


def main(argv: list[str] | None = None) -> None:
    from cluster_sim.build import build_simulator
    from cluster_sim.policies.gpu_packing import GpuPacking
    from interference.base import CoLocation, Sharing
    from interference.gavel_jobs import GAVEL_FAMILIES, gavel_family_of, gavel_job_type_of
    from interference.loader import load_interference_model
    from interference.online import OnlineCorrection

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--holdout", default="ResNet-50,Recommendation", help="model families the predictor never sees")
    ap.add_argument("--jobs", type=int, default=800, help="synthetic jobs (1-GPU ones are kept)")
    ap.add_argument(
        "--load",
        type=float,
        default=5.0,
        help="offered load of the synthetic workload before its "
        "multi-GPU jobs are dropped (5: about 2.5 for the one-GPU jobs kept; they queue and get packed)",
    )
    ap.add_argument("--prior-type", type=float, default=0.3, help="prior std of a type's log-slowdown offset")
    ap.add_argument("--prior-pair", type=float, default=1.0, help="prior std of a pair's own log-slowdown term")
    ap.add_argument("--noise", type=float, default=0.25, help="std of one observation on the log-slowdown scale")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="folder for online_correction.png")
    args = ap.parse_args(argv)
    families = [f.strip() for f in args.holdout.split(",") if f.strip()]
    unknown = sorted(set(families) - set(GAVEL_FAMILIES))
    if unknown:
        raise SystemExit(f"--holdout: unknown families {unknown}; choose from {', '.join(GAVEL_FAMILIES)}")
    if not GAVEL.is_file():
        raise SystemExit(f"online_correction: Gavel's throughputs are not at {GAVEL} (see ../shared/traces)")

    base = holdout_predictor(families, args.seed)
    truth = load_interference_model("oracle", f"gavel:{GAVEL}")
    cluster = {"name": "one-gpu-servers", "pods": 1, "racks_per_pod": 4, "servers_per_rack": 8,
               "server": {"base": "pcie-4", "gpus_per_server": 1}, "gpu_type": "V100"}  # fmt: skip
    spec = f"synthetic:{args.jobs},load={args.load},model_rule=gavel"
    sim = build_simulator(cluster, spec, seed=args.seed, interference="oracle", interference_data=f"gavel:{GAVEL}",
                          gpu_sharing=True)  # fmt: skip
    jobs = sim.jobs.subset(np.flatnonzero(sim.jobs.num_gpus == 1))
    sim = build_simulator(cluster, jobs, seed=args.seed, interference="oracle", interference_data=f"gavel:{GAVEL}",
                          gpu_sharing=True)  # fmt: skip
    policy = GpuPacking(mode="aware", predictor="oracle", predictor_data=f"gavel:{GAVEL}", online=True)
    policy.base_model = base  # the held-out predictor, corrected online; `oracle` above only satisfies aware
    result = sim.run(policy)
    history = policy.model.history

    def family(d) -> str | None:
        job_type = gavel_job_type_of(d)
        return gavel_family_of(job_type) if job_type else None

    pairs = dict.fromkeys((a, b) for a, b, _ in history)  # distinct directed pairs, in order of observation
    held = [(a, b) for a, b in pairs if {family(a), family(b)} & set(families)]
    if not held:
        seen = sorted({str(family(d)) for a, b in pairs for d in (a, b)})
        raise SystemExit(f"{len(history)} observations, none with a held-out family (seen: {seen}); raise --load")
    y = truth.throughput_factors([CoLocation(a, ((b, Sharing.GPU),)) for a, b in held])
    print(f"{len(jobs)} one-GPU jobs, avg JCT {result.metrics()['avg_jct']:.0f} s; {len(history)} observations, "
          f"{len(held)} distinct pairs with a held-out family ({', '.join(families)})")  # fmt: skip
    print(f"{'co-locations observed':>22} {'MAE':>7} {'within 1 std':>13}")
    rows = []
    total = len(history) // 2
    marks = [c for c in CHECKPOINTS if c <= total]
    for k in marks + ([total] if total not in marks else []):
        model = OnlineCorrection(base, prior_type=args.prior_type, prior_pair=args.prior_pair, noise=args.noise)
        for a, b, f in history[: 2 * k]:
            model.observe(a, b, f)
        pred = np.array([model.predict(a, b) for a, b in held])
        mae = float(np.abs(pred[:, 0] - y).mean())
        cover = float((np.abs(pred[:, 0] - y) <= pred[:, 1]).mean())
        rows.append((k, mae, cover))
        print(f"{k:>22} {mae:>7.3f} {cover:>13.2f}", flush=True)
    if args.out:
        write_plot(Path(args.out) / "online_correction.png", rows, families)


def write_plot(path: Path, rows: list[tuple[int, float, float]], families: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=120)
    ax.plot([r[0] for r in rows], [r[1] for r in rows], marker="o")
    ax.set_xlabel("co-locations observed (each gives both jobs' throughput)")
    ax.set_ylabel("MAE of the throughput factor")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Online correction, held-out families: {', '.join(families)}", fontsize=9)
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    os.replace(tmp, path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
