"""Latency of the learned interference predictor on CPU: 10,000 job pairs per call.

Three paths are timed, each as the best of ``--repeats`` runs (the machine is shared, so the minimum is
the figure that reflects the code rather than the neighbours):

- ``pairs``: descriptor columns -> features -> contention model (mean, spread and range flag), the path
  of ``marlsched interference predict``;
- ``queries_cold``: 10,000 ``CoLocation`` objects with an empty cache (what the simulator pays once);
- ``queries_warm``: the same queries again, answered from the cache.

    python experiments/benchmarks/interference_predict.py [--model MODEL] [--out result.json]

Without ``--model`` a model is fitted for 50 steps to Gavel's pairs (``--data``) first (latency does
not depend on the fitted values). Inference is NumPy: element-wise work on one thread, the few small
matrix products in BLAS (set ``OMP_NUM_THREADS`` to bound its threads).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from interference.base import CoLocation, JobDescriptor, Sharing
from interference.features import JobColumns
from interference.gpu_specs import GPU_SPECS
from interference.learned import LearnedInterference


def random_columns(rng: np.random.Generator, n: int) -> JobColumns:
    gpus = np.array(list(GPU_SPECS))
    return JobColumns(
        params_m=np.exp(rng.uniform(np.log(0.5), np.log(3000.0), n)),
        gflops=np.exp(rng.uniform(np.log(1e-3), np.log(1000.0), n)),
        batch=2.0 ** rng.integers(0, 14, n),
        solo_sps=np.exp(rng.uniform(np.log(1.0), np.log(5e4), n)),
        amp=(rng.random(n) < 0.3).astype(np.float64),
        gpu_type=gpus[rng.integers(len(gpus), size=n)],
    )


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--pairs", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data", default="gavel:../shared/traces/gavel/simulation_throughputs.json")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rng = np.random.Generator(np.random.PCG64(args.seed))

    if args.model:
        model = LearnedInterference.load(args.model)
    else:
        from interference.gavel_data import load_gavel_pairs
        from interference.training import TrainConfig, fit

        model = fit(load_gavel_pairs(args.data), TrainConfig(steps=50, seed=args.seed))

    a = random_columns(rng, args.pairs)
    b = random_columns(rng, args.pairs)
    b = replace(b, gpu_type=a.gpu_type)  # same GPU type as A
    level = rng.integers(0, 3, args.pairs)
    model.predict_pairs(a, b, level)  # warm-up (allocations, lazy init)
    t_pairs = best_of(lambda: model.predict_pairs(a, b, level), args.repeats)

    def desc(c: JobColumns, i: int) -> JobDescriptor:
        return JobDescriptor(
            float(c.params_m[i]),
            float(c.gflops[i]),
            int(c.batch[i]),
            float(c.solo_sps[i]),
            bool(c.amp[i]),
            str(c.gpu_type[i]),
        )

    queries = [CoLocation(desc(a, i), ((desc(b, i), Sharing(int(level[i]))),)) for i in range(args.pairs)]

    def cold() -> None:
        model._cache.clear()
        model.throughput_factors(queries)

    t_cold = best_of(cold, max(3, args.repeats // 4))
    model.throughput_factors(queries)
    t_warm = best_of(lambda: model.throughput_factors(queries), args.repeats)

    result = {
        "pairs": args.pairs,
        "blas_threads": os.environ.get("OMP_NUM_THREADS", "default"),
        "repeats": args.repeats,
        "model": args.model or f"fitted for 50 steps to {args.data}",
        "members": model.params.members,
        "pairs_ms": round(1e3 * t_pairs, 2),
        "queries_cold_ms": round(1e3 * t_cold, 2),
        "queries_warm_ms": round(1e3 * t_warm, 2),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        out = Path(args.out)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, out)


if __name__ == "__main__":
    main()
