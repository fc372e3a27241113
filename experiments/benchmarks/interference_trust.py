"""Can a user trust the learned interference predictor on their own jobs? Out of range, and trained on theirs.

Prints, on Gavel's measured tables (``--data``), with the default training configuration (seed 0):

1. ``leave-one-family-out``: held-out MAE of the answer (the safe prior out of range) and of the fitted
   structure alone, the coverage of the calibrated std (each fold's std from the other folds' errors),
   and on the held-out pairs flagged out of range: MAE beside the safe prior's, and coverage.
2. ``leave-one-GPU-out``: fitted on two of Gavel's GPU types, scored on the third (K80 lies below the
   others' datasheet figures, V100 above): GPU specs outside the fitted range, with measured truth.
3. ``far out``: Gavel's V100 pairs moved to an H200 (67 TFLOP/s, 4.8 TB/s, 141 GB) with solo speeds scaled
   by the FP32 peak ratio, and descriptors scaled far beyond any family (x100 parameters and GFLOPs):
   no truth is measured there, so it prints how close the answer is to the prior (at most
   ``OOD_FLOOR`` of the model-prior gap).
4. ``profile columns, model fitted without them``: the V100 pairs with stand-in profile columns
   (:func:`interference.evaluation.stand_in_profiles`, derived from the job types' K80 and P100 pairs)
   fed to a model fitted without profiles on K80 and P100; the answer, the prior it moves to (time
   slicing), 1.0, and what the structure said when it fed the unfitted columns in (the behaviour before).
5. ``your own pairs``: the user's source is Gavel's V100 pairs with those stand-in profiles. ``--few``
   random V100 pairs (seeded) are the user's measurements (``train --data pairs:FILE``); the other V100
   pairs are the test. Models: descriptors only (Gavel without V100: a copy of the JSON without its
   ``v100`` table), the same plus ``--data pairs:FEW``, and ``--data pairs:FEW`` alone.

    python experiments/benchmarks/interference_trust.py [--data PATH] [--few 20,40,80] [--skip-lofo]

About 4 to 6 minutes on 2 cores (leave-one-family-out alone about 2).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

GAVEL = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "gavel" / "simulation_throughputs.json"


def fmt(m: dict, keys=("mae", "prior_mae", "structure_alone_mae", "coverage")) -> str:
    return ", ".join(f"{k} {m[k]:.3f}" for k in keys if k in m) + f", n {m['n']}"


def without_gpu(data: Path, gpu: str, out: Path) -> Path:
    """A copy of Gavel's JSON without the ``gpu`` table (written atomically)."""
    raw = json.loads(data.read_text())
    raw.pop(gpu.lower())
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(raw))
    tmp.replace(out)
    return out


def score(model, pairs, rows: np.ndarray, profiles: dict | None = None) -> dict:
    """The model's answer on Gavel rows (both directions): metrics, prior and out-of-range report."""
    from interference.evaluation import job_keys, metrics, out_of_range_report
    from interference.features import JobColumns
    from interference.learned import safe_prior
    from interference.training import gavel_queries

    q, y, _ = gavel_queries(pairs.select(np.isin(np.arange(len(pairs)), rows)))
    if profiles:
        q = [replace(c, job=_prof(c.job, profiles), neighbours=((_prof(c.neighbours[0][0], profiles), 0),)) for c in q]
    a = JobColumns.from_descriptors([c.job for c in q])
    b = JobColumns.from_descriptors([c.neighbours[0][0] for c in q])
    p = model.predict_pairs(a, b, np.zeros(len(q), dtype=np.int64))
    raw = model._gpu_pairs(JobColumns.from_descriptors([c.job for c in q] + [c.neighbours[0][0] for c in q]),
                           np.arange(len(q)), len(q) + np.arange(len(q)))[0].mean(axis=0)  # fmt: skip
    prior = safe_prior(a.gpu_util, b.gpu_util)
    keys = job_keys(q)
    return {
        "all": metrics(p.factor, y, keys, p.std),
        "prior": metrics(prior, y, keys),
        "out_of_range": out_of_range_report(p.factor, raw, prior, y, p.std, p.out_of_range, keys),
        "trust": float(np.mean(p.trust)),
    }


def train(sources: list[str], cfg):
    """``marlsched interference train --data SOURCE ...`` with the doubt calibrated on the user's pairs only
    (Gavel's calibration, 70 s a model, is left out: these models are scored on the user's source)."""
    from interference.evaluation import calibrate_on_own_pairs
    from interference.training import fit_queries, load_training_data

    queries, y, info, _ = load_training_data(sources)
    model = fit_queries(queries, y, cfg, meta={"data": info})
    own = np.concatenate([np.full(s["samples"], s["kind"] == "pairs") for s in info])
    return calibrate_on_own_pairs(model, queries, y, own, cfg) if own.any() else model


def _prof(d, profiles: dict):
    got = profiles.get(d.name)
    return d if got is None else replace(d, gpu_util=got["gpu_util"], mem_util=got["mem_util"])


def main(argv: list[str] | None = None) -> int:
    from interference.evaluation import cross_validate, evaluate_pairs_file, stand_in_profiles, write_gavel_pairs_csv
    from interference.gavel_data import load_gavel_pairs
    from interference.learned import LearnedInterference
    from interference.training import TrainConfig, fit_queries, gavel_queries

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(GAVEL), help="Gavel's simulation_throughputs.json")
    ap.add_argument("--few", default="20,40,80", help="how many V100 pairs the user measured (comma list)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=None, help="optimiser steps per stage (default: TrainConfig's)")
    ap.add_argument("--skip-lofo", action="store_true", help="skip leave-one-family-out (about 2 minutes)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    data = Path(args.data.removeprefix("gavel:"))
    pairs = load_gavel_pairs(data)
    usable = pairs.feasible & (pairs.scale_factor == 1)
    cfg = TrainConfig(seed=args.seed)
    cfg = replace(cfg, steps=args.steps) if args.steps else cfg

    if not args.skip_lofo:
        cv = cross_validate(pairs, "leave-model-out", cfg)["result"]
        print("1. leave-one-family-out (7 folds)")
        print(f"   answer: MAE {cv['mae']:.3f} (structure alone {cv['structure_alone']['mae']:.3f}, mean predictor "
              f"{cv['mean_predictor_mae']:.3f}, always 1.0 {cv['no_slowdown_mae']:.3f}), calibrated coverage "
              f"{cv['coverage_calibrated']:.2f}, partner pairwise {cv['pairwise_order_accuracy']:.2f}")  # fmt: skip
        print(f"   out of range: {fmt(cv['out_of_range'])}")

    print("2. leave-one-GPU-out (GPU specs outside the fitted range; measured truth)")
    models = {}
    for gpu in ("K80", "V100"):
        keep = usable & (pairs.gpu_type != gpu)
        q, y, _ = gavel_queries(pairs.select(keep))
        models[gpu] = model = fit_queries(q, y, cfg)
        s = score(model, pairs, np.flatnonzero(usable & (pairs.gpu_type == gpu)))
        print(f"   {gpu} held out: answer {fmt(s['all'], ('mae', 'coverage'))}, partner pairwise "
              f"{s['all']['pairwise_order_accuracy']:.2f}; out of range: {fmt(s['out_of_range'])}")  # fmt: skip

    print("3. far out (no measured truth: distance of the answer from the prior)")
    full_q, full_y, _ = gavel_queries(pairs)
    full = fit_queries(full_q, full_y, cfg)
    from interference.features import JobColumns

    v = np.flatnonzero(usable & (pairs.gpu_type == "V100"))
    qv, _, _ = gavel_queries(pairs.select(np.isin(np.arange(len(pairs)), v)))
    a = JobColumns.from_descriptors([c.job for c in qv])
    b = JobColumns.from_descriptors([c.neighbours[0][0] for c in qv])
    lvl = np.zeros(len(qv), dtype=np.int64)
    h200 = np.full(len(qv), "H200")
    cases = {
        "H200, speeds x 67/15.7": lambda c: replace(c, gpu_type=h200, solo_sps=c.solo_sps * 67 / 15.7),
        "x100 params and GFLOPs": lambda c: replace(c, params_m=c.params_m * 100, gflops=c.gflops * 100),
    }
    for name, move in cases.items():
        aa, bb = move(a), move(b)
        p = full.predict_pairs(aa, bb, lvl)
        both = JobColumns(**{f: np.concatenate([getattr(aa, f), getattr(bb, f)]) for f in aa.__dataclass_fields__})
        raw = full._gpu_pairs(both, np.arange(len(qv)), len(qv) + np.arange(len(qv)))[0].mean(axis=0)
        gap = np.abs(raw - 1.0)
        share = float(np.abs(p.factor - 1.0).sum() / max(gap.sum(), 1e-12))
        off = np.abs(p.factor - 1).mean()
        print(f"   {name}: {p.out_of_range.mean():.0%} flagged, mean |answer - prior| {off:.4f} "
              f"= {share:.3f} of the structure's gap {gap.mean():.3f}; std {p.std.mean():.3f}")  # fmt: skip

    print("4. profile columns on a model fitted without them (V100 pairs, stand-in profiles, K80+P100 model)")
    profiles = stand_in_profiles(pairs, "V100")
    s = score(models["V100"], pairs, v, profiles)
    unguarded = LearnedInterference(replace(models["V100"].params, gpu_lo=[], gpu_hi=[]), models["V100"].meta)
    old = score(unguarded, pairs, v, profiles)
    pairwise = s["all"]["pairwise_order_accuracy"]
    print(f"   answer {fmt(s['all'], ('mae', 'coverage'))}, partner pairwise {pairwise:.2f}; "
          f"time-slicing prior MAE {s['prior']['mae']:.3f}; always 1.0 {s['all']['no_slowdown_mae']:.3f}; "
          f"unfitted columns fed to the structure (before) {old['all']['mae']:.3f}")  # fmt: skip
    print(f"   out of range: {fmt(s['out_of_range'])}")

    print("5. your own pairs: train --data pairs:FEW (V100 pairs with stand-in profiles), test on the other V100 pairs")
    rng = np.random.Generator(np.random.PCG64(args.seed))
    order = rng.permutation(v)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        no_v100 = without_gpu(data, "V100", tmp / "gavel_no_v100.json")
        desc = train([f"gavel:{no_v100}"], cfg)
        for k in [int(x) for x in args.few.split(",")]:
            few, test = order[:k], order[k:]
            write_gavel_pairs_csv(tmp / "few.csv", pairs, few, profiles)
            write_gavel_pairs_csv(tmp / "test.csv", pairs, test, profiles)
            write_gavel_pairs_csv(tmp / "test_plain.csv", pairs, test)
            got = {
                "descriptors only (Gavel without V100)": evaluate_pairs_file(desc, tmp / "test_plain.csv")["result"],
                "  same, given the profiles": evaluate_pairs_file(desc, tmp / "test.csv")["result"],
            }
            for name, sources in (("gavel + pairs:FEW", [f"gavel:{no_v100}", f"pairs:{tmp / 'few.csv'}"]),
                                  ("pairs:FEW alone", [f"pairs:{tmp / 'few.csv'}"])):  # fmt: skip
                got[name] = evaluate_pairs_file(train(sources, cfg), tmp / "test.csv")["result"]
            print(f"   {k} measured pairs, {len(test)} test pairs:")
            first = next(iter(got.values()))
            for name, r in got.items():
                m = r["model"]
                print(f"     {name:<40} MAE {m['mae']:.3f}, Spearman {m['spearman']:.2f}, partner pairwise "
                      f"{m['pairwise_order_accuracy']:.2f}, coverage {m['coverage']:.2f}")  # fmt: skip
            print(f"     {'always 1.0':<40} MAE {first['no_slowdown']['mae']:.3f}; time-slicing prior MAE "
                  f"{got['  same, given the profiles']['safe_prior']['mae']:.3f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
