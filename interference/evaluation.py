"""Held-out evaluation of the learned predictor on Gavel's single-GPU pairs.

A model trained on every pair cannot be scored on those pairs, so evaluation re-trains the model's own
configuration (read from its metadata) on the training part of each fold and predicts the held-out part:

- ``random``: the feasible measured pairs (one per GPU type and unordered pair of job types) are split
  into 5 folds; each fold is an 80/20 split, and every pair is held out exactly once. Both directions of
  a pair (A next to B, B next to A) stay on the same side, so a held-out measurement never leaks through
  its mirror.
- ``leave-model-out``: one fold per model family (ResNet-18, ResNet-50, Transformer, LM, Recommendation,
  A3C, CycleGAN). The held-out family's pairs with any job are held out, and the model (and the oracle
  never sees that family.

The mean predictor on the same split predicts the training targets' mean for every held-out sample.
Besides the error, evaluation scores what a scheduler needs from the model, ranking a job's possible
partners: for each job (type on a GPU type) and each two of its held-out partners whose measured factors
differ by at least ``RANK_MIN_GAP``, is the partner that slows it less predicted to slow it less?
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from interference.gavel_data import GavelPairs
from interference.gavel_jobs import GAVEL_FAMILIES, SPLITS
from interference.queries import flatten
from interference.training import TrainConfig, fit_queries, gavel_queries

RANDOM_FOLDS = 5
# MAE of predicting the overall mean normalised throughput on all feasible single-GPU pairs of Gavel's
# simulation_throughputs.json (K80, P100, V100): the reference every predictor is held to; recomputed by
# `global_mean_mae`.
GAVEL_MEAN_PREDICTOR_MAE = 0.144
RANK_MIN_GAP = 0.05


def partner_ranking(pred: np.ndarray, y: np.ndarray, job: np.ndarray) -> dict[str, float]:
    """Per-job ranking of partners: pairwise order accuracy over partner pairs whose measured factors
    differ by >= ``RANK_MIN_GAP`` (a predicted tie counts half), and the mean per-job Spearman (jobs with
    >= 3 partners)."""
    correct, total = 0.0, 0
    rhos = []
    for key in np.unique(job):
        m = np.flatnonzero(job == key)
        yi, pi = y[m], pred[m]
        dy, dp = yi[:, None] - yi[None, :], pi[:, None] - pi[None, :]
        sel = np.triu(np.abs(dy) >= RANK_MIN_GAP, 1)
        agree = (dy * dp)[sel]
        correct += float((agree > 0).sum()) + 0.5 * float((agree == 0).sum())  # a tie: a coin toss
        total += int(sel.sum())
        if len(m) >= 3 and np.ptp(yi) > 0 and np.ptp(pi) > 0:
            rhos.append(float(spearmanr(pi, yi).statistic))
    return {
        "pairwise_order_accuracy": correct / total if total else float("nan"),
        "ranked_pairs": total,
        "per_job_spearman": float(np.mean(rhos)) if rhos else float("nan"),
        "share_jobs_negative": float(np.mean(np.array(rhos) < 0)) if rhos else float("nan"),
    }


def metrics(
    pred: np.ndarray, y: np.ndarray, job: np.ndarray | None = None, std: np.ndarray | None = None
) -> dict[str, float]:
    """Error, bias (mean predicted minus measured), rank correlation, the error of always answering 1.0 (no
    slowdown), given each sample's job key partner ranking, and given a predicted ``std`` its coverage
    (the share of errors within one std)."""
    err = np.abs(pred - y)
    out = {
        "mae": float(err.mean()),
        "bias": float((pred - y).mean()),
        "mape": float(100.0 * (err / np.maximum(y, 1e-6)).mean()),
        "spearman": float(spearmanr(pred, y).statistic) if len(y) > 2 and np.ptp(pred) > 0 else float("nan"),
        "no_slowdown_mae": float(np.abs(1.0 - y).mean()),
        "n": len(y),
    }
    if job is not None:
        out.update(partner_ranking(pred, y, job))
    if std is not None:
        out["coverage"] = float((err <= std).mean())
    return out


COVERAGE = 0.6827  # the share of a normal distribution within one standard deviation


def novelty_std(residual: np.ndarray, novelty: np.ndarray, fallback: list[float] | None = None) -> list[float]:
    """Calibrated doubt per novelty class (0, 1, 2 new job types in the pair): the |residual| that
    ``COVERAGE`` of the class's held-out errors stay within; a class without samples takes ``fallback``'s
    value (0 if none)."""
    out = []
    for c in range(3):
        r = np.abs(residual[novelty == c])
        out.append(float(np.quantile(r, COVERAGE)) if len(r) else float((fallback or [0.0, 0.0, 0.0])[c]))
    return out


def floor_unmeasured(sigma: list[float], samples: list[int]) -> tuple[list[float], list[int]]:
    """Doubt per novelty class where a class had no held-out sample (random folds of one's own pairs hold out no
    job type): at least that of the class with fewer new types, so a pair of a type the data lacks is never
    surer than a measured one. Returns the doubts and the classes floored."""
    out, floored = list(sigma), []
    for c in (1, 2):
        if not samples[c]:
            out[c] = max(out[c], out[c - 1])
            floored.append(c)
    return out, floored


def job_keys(queries: list) -> np.ndarray:
    """The job (type on its GPU type) each sample's factor belongs to."""
    return np.array([f"{q.job.gpu_type}|{q.job.name}" for q in queries])


def global_mean_mae(pairs: GavelPairs) -> float:
    _, y, _ = gavel_queries(pairs)
    return float(np.abs(y - y.mean()).mean())


def folds(pairs: GavelPairs, split: str, seed: int) -> list[tuple[str, np.ndarray]]:
    """(fold name, held-out row mask over ``pairs``) for each fold; infeasible rows are never held out."""
    usable = pairs.feasible & (pairs.scale_factor == 1)
    if split == "random":
        rows = np.flatnonzero(usable)
        perm = np.random.Generator(np.random.PCG64(seed)).permutation(rows)
        out = []
        for k, chunk in enumerate(np.array_split(perm, RANDOM_FOLDS)):
            mask = np.zeros(len(pairs), dtype=bool)
            mask[chunk] = True
            out.append((f"fold{k}", mask))
        return out
    if split == "leave-model-out":
        fa, fb = pairs.family_a(), pairs.family_b()
        return [(fam, usable & ((fa == fam) | (fb == fam))) for fam in GAVEL_FAMILIES]
    raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")


def cross_validate(
    pairs: GavelPairs,
    split: str,
    cfg: TrainConfig,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Held-out predictions for every fold and their metrics, next to the mean predictor's."""
    pred_all, y_all, base_all, gpu_all, fold_all, job_all = [], [], [], [], [], []
    spread_all, novelty_all = [], []
    extra: dict[str, list[np.ndarray]] = {}  # the structure's own answer, trust, prior, out-of-range flag
    per_fold = {}
    for name, held in folds(pairs, split, cfg.seed):
        if held.sum() == 0:
            continue
        train_rows = pairs.feasible & (pairs.scale_factor == 1) & ~held
        if split == "leave-model-out":
            fa, fb = pairs.family_a(), pairs.family_b()
            train_rows &= (fa != name) & (fb != name)
        train_q, train_y, _ = gavel_queries(pairs.select(train_rows))
        model = fit_queries(train_q, train_y, cfg)
        test_q, test_y, _ = gavel_queries(pairs.select(held))
        flat = flatten(test_q)
        cols = flat.columns()
        members, trust, prior = model._gpu_pairs(cols, flat.job, flat.nbr)
        raw, spread = members.mean(axis=0), members.std(axis=0)
        pred = trust * raw + (1.0 - trust) * prior  # what the model answers: the safe prior out of range
        oor = model.out_of_range(cols)
        novelty = model.novelty(cols.take(flat.job), cols.take(flat.nbr))
        base = np.full(len(test_y), float(train_y.mean()))
        keys = job_keys(test_q)
        per_fold[name] = {
            **metrics(pred, test_y, keys, spread),
            "mean_predictor_mae": float(np.abs(base - test_y).mean()),
        }
        if log is not None:
            f = per_fold[name]
            log(f"{split} {name}: mae {f['mae']:.4f} (mean predictor {f['mean_predictor_mae']:.4f}), n {f['n']}")
        pred_all.append(pred)
        y_all.append(test_y)
        base_all.append(base)
        gpu_all.append(np.array([q.job.gpu_type for q in test_q]))
        fold_all.append(np.full(len(test_y), name))
        job_all.append(keys)
        spread_all.append(spread)
        novelty_all.append(novelty)
        for key, value in (("raw", raw), ("trust", trust), ("prior", prior), ("oor", oor[flat.job] | oor[flat.nbr])):
            extra.setdefault(key, []).append(value)
        extra.setdefault("prior_std", []).append(np.full(len(test_y), model.params.prior_std))
    pred, y, base = np.concatenate(pred_all), np.concatenate(y_all), np.concatenate(base_all)
    gpu, fold = np.concatenate(gpu_all), np.concatenate(fold_all)
    spread, novelty = np.concatenate(spread_all), np.concatenate(novelty_all)
    raw, trust, prior, oor, prior_sd = (np.concatenate(extra[k]) for k in ("raw", "trust", "prior", "oor", "prior_std"))
    # calibrated doubt, judged honestly: each fold's std from the other folds' errors only (of the model's own
    # answers, where it is trusted), mixed with the prior's std by each pair's trust
    calibrated = np.empty(len(y))
    for name in np.unique(fold):
        mine = fold == name
        sigma = np.asarray(novelty_std(raw[~mine] - y[~mine], novelty[~mine]))
        var = spread[mine] ** 2 + sigma[novelty[mine]] ** 2
        w = trust[mine]
        var = w * var + (1 - w) * prior_sd[mine] ** 2 + w * (1 - w) * (raw[mine] - prior[mine]) ** 2
        calibrated[mine] = np.sqrt(var)
    job_all_c = np.concatenate(job_all)
    result = {
        "split": split,
        **metrics(pred, y, job_all_c, spread),
        "coverage_calibrated": float((np.abs(pred - y) <= calibrated).mean()),
        "structure_alone": metrics(raw, y, job_all_c),
        "out_of_range": out_of_range_report(pred, raw, prior, y, calibrated, oor, job_all_c),
        "novelty_std": novelty_std(pred - y, novelty),
        "novelty_counts": [int((novelty == c).sum()) for c in range(3)],
        "mean_predictor_mae": float(np.abs(base - y).mean()),
        "mean_predictor_mae_all_pairs": global_mean_mae(pairs),
        "reference_mean_predictor_mae": GAVEL_MEAN_PREDICTOR_MAE,
        "per_gpu": {g: metrics(pred[gpu == g], y[gpu == g]) for g in sorted(set(gpu.tolist()))},
        "per_fold": per_fold,
        "train_config": {k: v for k, v in vars(cfg).items()},
        "data": pairs.source,
    }
    return {
        "result": result, "pred": pred, "y": y, "gpu": gpu, "fold": fold, "novelty": novelty, "raw": raw,
        "out_of_range": oor, "std": calibrated,
    }  # fmt: skip


def out_of_range_report(
    pred: np.ndarray,
    raw: np.ndarray | None,
    prior: np.ndarray,
    y: np.ndarray,
    std: np.ndarray,
    oor: np.ndarray,
    job: np.ndarray | None = None,
) -> dict:
    """On the samples flagged out of range: the answer's MAE beside the safe prior's and the structure's
    alone, and the coverage of ``std``."""
    if not oor.any():
        return {"n": 0}
    m = oor
    out = {
        "n": int(m.sum()),
        "mae": float(np.abs(pred[m] - y[m]).mean()),
        "prior_mae": float(np.abs(prior[m] - y[m]).mean()),
        "coverage": float((np.abs(pred[m] - y[m]) <= std[m]).mean()),
    }
    if raw is not None:
        out["structure_alone_mae"] = float(np.abs(raw[m] - y[m]).mean())
    if job is not None:
        out["pairwise_order_accuracy"] = partner_ranking(pred[m], y[m], job[m])["pairwise_order_accuracy"]
    return out


def config_from_meta(meta: dict, seed: int | None = None) -> TrainConfig:
    cfg = TrainConfig(**meta.get("train_config", {}))
    return cfg if seed is None else replace(cfg, seed=seed)


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def parity_plot(path: Path, pred: np.ndarray, y: np.ndarray, gpu: np.ndarray, title: str) -> None:
    """Measured vs predicted normalised throughput, one colour per GPU type (written atomically)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5), dpi=120)
    for g in sorted(set(gpu.tolist())):
        m = gpu == g
        ax.scatter(y[m], pred[m], s=8, alpha=0.6, label=g)
    ax.plot([0, 1], [0, 1], color="black", lw=1)
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("measured normalised throughput")
    ax.set_ylabel("predicted normalised throughput")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left")
    fig.tight_layout()
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    os.replace(tmp, path)


CALIBRATION_MEMBERS = 4  # ensemble members of the calibration fits: the error's scale, not the prediction


def calibrate(pairs: GavelPairs, model, cfg: TrainConfig, log: Callable[[str], None] | None = None):
    """``model`` with calibrated doubt (:meth:`~interference.learned.LearnedInterference.with_novelty_std`):
    the held-out errors of its configuration on leave-one-family-out folds (pairs with one or two new
    job types) and on random folds (pairs of measured types), refitted with fewer members."""
    small = replace(cfg, members=min(cfg.members, CALIBRATION_MEMBERS))
    lofo = cross_validate(pairs, "leave-model-out", small, log=log)
    rand = cross_validate(pairs, "random", small, log=log)
    residual = np.concatenate([lofo["pred"] - lofo["y"], rand["pred"] - rand["y"]])
    novelty = np.concatenate([lofo["novelty"], rand["novelty"]])
    sigma = novelty_std(residual, novelty)
    info = {
        "novelty_std": sigma,
        "samples": [int((novelty == c).sum()) for c in range(3)],
        "coverage_target": COVERAGE,
        "folds": "leave-model-out and random (5)",
        "members": small.members,
    }
    return model.with_novelty_std(sigma, info)


def calibrate_on_own_pairs(
    model, queries: list, y: np.ndarray, own: np.ndarray, cfg: TrainConfig, log: Callable[[str], None] | None = None
):
    """``model`` with its doubt calibrated on the user's own pairs: each of ``RANDOM_FOLDS`` random folds of
    the pairs whose samples ``own`` marks is held out (both directions) from a refit on everything else,
    with fewer members; per novelty class the held-out errors set the std, Gavel's calibration (or 0) where
    the class has no sample. ``queries`` hold each pair's two directions next to each other."""
    small = replace(cfg, members=min(cfg.members, CALIBRATION_MEMBERS))
    pair_ids = np.flatnonzero(own[::2])
    if len(pair_ids) < RANDOM_FOLDS:
        if log is not None:
            log(f"{len(pair_ids)} measured pairs: too few to calibrate the doubt on them (needs {RANDOM_FOLDS})")
        return model
    perm = np.random.Generator(np.random.PCG64(cfg.seed)).permutation(pair_ids)
    residual, novelty = [], []
    for k, chunk in enumerate(np.array_split(perm, RANDOM_FOLDS)):
        held = np.zeros(len(y), dtype=bool)
        held[2 * chunk] = held[2 * chunk + 1] = True
        fitted = fit_queries([q for q, h in zip(queries, held, strict=True) if not h], y[~held], small)
        test = [q for q, h in zip(queries, held, strict=True) if h]
        flat = flatten(test)
        cols = flat.columns()
        raw = fitted._gpu_pairs(cols, flat.job, flat.nbr)[0].mean(axis=0)
        residual.append(raw - y[held])
        novelty.append(fitted.novelty(cols.take(flat.job), cols.take(flat.nbr)))
        if log is not None:
            log(f"own pairs fold{k}: mae {np.abs(residual[-1]).mean():.4f}, n {held.sum()}")
    res, nov = np.concatenate(residual), np.concatenate(novelty)
    gavel = list(model.params.novelty_std)
    sigma = novelty_std(res, nov, fallback=gavel or None)
    samples = [int((nov == c).sum()) for c in range(3)]
    sigma, floored = floor_unmeasured(sigma, samples) if not gavel else (sigma, [])
    if floored and log is not None:
        log(
            "own pairs: no fold held out a job type, so the doubt for pairs with a type your data lacks is not "
            f"measured; it is set to that of pairs with fewer new types ({sigma[floored[0]]:.3f}), a floor, not a "
            "calibration (train with Gavel's pairs as well, --data gavel:PATH --data pairs:PATH, to calibrate it "
            "on left-out job families)"
        )
    info = {
        **model.meta.get("calibration", {}),
        "own_pairs": {"novelty_std": sigma, "samples": samples, "floored": floored,
                      "folds": f"random ({RANDOM_FOLDS}) over the measured pairs", "members": small.members},
    }  # fmt: skip
    return model.with_novelty_std(sigma, info)


def evaluate_pairs_file(model, path: str | Path) -> dict:
    """The model on a pairs CSV with measured ``norm_a``/``norm_b``: its metrics beside always answering
    1.0 (no slowdown) and, where every row has both jobs' solo GPU utilisation, the utilisation reference
    ``1 − (u_a + u_b) / 400``. Each row gives two samples (A next to B, B next to A); a job's partners are
    ranked among the rows where it is the same job (its descriptor facts and GPU)."""
    from interference.learned import safe_prior
    from interference.pairs_csv import read_measured, read_pairs_csv

    rows, _, a, b, level = read_pairs_csv(path)
    ya, yb = read_measured(path, rows)
    pa, pb = model.predict_pairs(a, b, level), model.predict_pairs(b, a, level)
    y = np.concatenate([ya, yb])
    pred = np.concatenate([pa.factor, pb.factor])
    std = np.concatenate([pa.std, pb.std])

    def keys(c) -> np.ndarray:
        return np.array([f"{g}|{p:.6g}|{f:.6g}|{n:.6g}|{s:.6g}|{m:g}" for g, p, f, n, s, m in
                         zip(c.gpu_type, c.params_m, c.gflops, c.batch, c.solo_sps, c.amp, strict=True)])  # fmt: skip

    job = np.concatenate([keys(a), keys(b)])
    oor = np.concatenate([pa.out_of_range, pb.out_of_range])
    prior = np.concatenate([safe_prior(a.gpu_util, b.gpu_util), safe_prior(b.gpu_util, a.gpu_util)])
    gpu = np.concatenate([level, level]) == 0
    prior = np.where(gpu, prior, pred)  # server and uplink levels are physical formulas: no prior there
    out = {
        "data": str(path),
        "model": metrics(pred, y, job, std),
        "no_slowdown": metrics(np.ones_like(y), y, job),
        "safe_prior": metrics(prior, y, job),
        "out_of_range_share": float(oor.mean()),
        "out_of_range": out_of_range_report(pred, None, prior, y, std, oor, job),
    }
    util = np.concatenate([a.gpu_util + b.gpu_util, b.gpu_util + a.gpu_util])
    if not np.isnan(util).any():
        out["utilisation_reference"] = metrics(1.0 - util / 400.0, y, job)
    return {"result": out, "pred": pred, "y": y}


def stand_in_profiles(pairs: GavelPairs, gpu_type: str) -> dict[str, dict[str, float]]:
    """Synthetic solo profile columns for Gavel's job types on ``gpu_type``, which Gavel did not profile.

    A documented rule, not a measurement: from the job type's pairs measured on the *other* GPU types
    (never ``gpu_type``'s own, so a profile carries no target of that GPU's pairs), ``gpu_util`` is
    100 x the mean slowdown ``1/f - 1`` the job inflicts on its partners and ``mem_util`` 100 x the
    mean slowdown it suffers, each divided by the largest over the job types and clipped to [1, 100]:
    what an ideal solo profile would say about how hard a job drives the GPU and how much it needs it.
    Types measured on no other GPU get no profile. Returns {job type: {"gpu_util": %, "mem_util": %}}.
    """
    rows = np.flatnonzero(pairs.feasible & (pairs.scale_factor == 1) & (pairs.gpu_type != gpu_type))
    slow_b = 1.0 / pairs.norm_b[rows] - 1.0  # B's slowdown next to A: inflicted by A
    slow_a = 1.0 / pairs.norm_a[rows] - 1.0
    victim = np.concatenate([pairs.job_b[rows], pairs.job_a[rows]])
    partner = np.concatenate([pairs.job_a[rows], pairs.job_b[rows]])
    slow = np.concatenate([slow_b, slow_a])
    types = sorted(set(victim.tolist()))
    inflicted = np.array([slow[partner == t].mean() for t in types])
    suffered = np.array([slow[victim == t].mean() for t in types])
    gpu_util = np.clip(100.0 * inflicted / inflicted.max(), 1.0, 100.0)
    mem_util = np.clip(100.0 * suffered / suffered.max(), 1.0, 100.0)
    return {t: {"gpu_util": float(u), "mem_util": float(m)} for t, u, m in zip(types, gpu_util, mem_util, strict=True)}


def write_gavel_pairs_csv(
    path: str | Path, pairs: GavelPairs, rows: np.ndarray, profiles: dict[str, dict[str, float]] | None = None
) -> None:
    """Gavel's measured rows ``rows`` as a measured pairs CSV (the ``eval --pairs`` / ``train --data pairs:``
    columns), with the profile columns of ``profiles`` where a job type has them (written atomically)."""
    import csv

    from interference.pairs_csv import MEASURED, REQUIRED

    path = Path(path)
    prof_cols = ("gpu_util", "mem_util")
    fields = [*REQUIRED, *(f"{p}_{c}" for p in "ab" for c in prof_cols), *MEASURED]
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in np.asarray(rows).tolist():
            g = str(pairs.gpu_type[r])
            row: dict[str, object] = {"gpu_type": g, "level": "gpu", "norm_a": f"{pairs.norm_a[r]:.6g}"}
            row["norm_b"] = f"{pairs.norm_b[r]:.6g}"
            for p, job in (("a", str(pairs.job_a[r])), ("b", str(pairs.job_b[r]))):
                d = pairs.descriptor(g, job)
                row |= {f"{p}_params_m": d.params_m, f"{p}_gflops": d.gflops, f"{p}_batch": d.batch}
                row |= {f"{p}_solo_sps": f"{d.solo_sps:.9g}", f"{p}_amp": int(d.amp)}
                for c in prof_cols:
                    value = (profiles or {}).get(job, {}).get(c)
                    row[f"{p}_{c}"] = "" if value is None else f"{value:.2f}"
            w.writerow(row)
    tmp.replace(path)
