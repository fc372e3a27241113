"""Fitting the learned interference predictor (:mod:`interference.learned`) to measured GPU-sharing pairs.

Each feasible measured pair gives two samples, "A next to B on one GPU" and "B next to A", with
normalised throughputs as targets. Pairs come from Gavel's tables (``gavel:PATH``) and from the user's
own measurements (``pairs:FILE``, :mod:`interference.pairs_csv`), alone or together: a user's pairs carry
the jobs' solo profile columns when measured, and only a model fitted on such samples uses them (see
:mod:`interference.learned`). The ``K`` ensemble members are fitted together (one batched
computation) by mean squared error, each on its own bootstrap resample of the job types, so that their
spread says how much the data pin a prediction down. Every random choice flows from ``seed``
(``numpy.random.Generator(PCG64)`` and ``torch.manual_seed``), so a seed fixes the model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch.nn.functional import softplus

from interference.base import CoLocation, JobDescriptor, Sharing
from interference.features import (
    INTENSITY_FEATURES,
    OWN_FEATURES,
    PROFILE_COLUMNS,
    JobColumns,
    gpu_table,
    intensity_features,
    own_features,
)
from interference.gavel_data import GavelPairs
from interference.learned import (
    MAX_SENSITIVITY,
    MIN_USE,
    PRIOR_COVERAGE,
    ContentionParams,
    LearnedInterference,
    gpu_figures,
    partner_gate,
    profile_features,
    type_keys_of,
)
from interference.queries import flatten


@dataclass(frozen=True)
class TrainConfig:
    """Defaults chosen on Gavel (seed 0): the structure by leave-one-family-out MAE, the type residual by
    random-split MAE.

    - Sensitivity from the job's own GPU and memory-bandwidth use only: 0.1265, against 0.136 with any
      sign on every descriptor feature (a penalty on those weights instead: 0.128; a constant: 0.127).
    - ``pres_l2`` on the pressure weights, with the sensitivity as above: 0 / 0.003 / 0.01 / 0.03 / 0.1
      give 0.1265 / 0.120 / 0.118 / 0.120 / 0.124.
    - Type residual, rank and penalty: 4 and 1e-5: 0.039; 8 and 1e-5: 0.036; 8 and 1e-4: 0.033;
      8 and 3e-4: 0.035; 12 and 1e-4: 0.035; 16 and 1e-5: 0.036.
    - Members 8 / 12 / 16: leave-one-family-out 0.1183 / 0.1172 / 0.1173 (seed 1: 0.1179 / 0.1174 / –);
      12 keeps 10,000 pairs within the latency budget.
    """

    members: int = 12
    steps: int = 1500
    lr: float = 0.03
    pres_l2: float = 0.01  # penalty on the pressure weights: a new partner's pressure stays near the mean
    type_rank: int = 8  # rank of the residual of measured job types (0: none)
    type_l2: float = 1e-4  # penalty on the residual
    seed: int = 0


def gavel_queries(pairs: GavelPairs) -> tuple[list[CoLocation], np.ndarray, np.ndarray]:
    """Directed single-GPU samples of the feasible scale-1 rows: (queries, targets, source row)."""
    rows = np.flatnonzero(pairs.feasible & (pairs.scale_factor == 1))
    queries: list[CoLocation] = []
    targets: list[float] = []
    source: list[int] = []
    for r in rows:
        g = str(pairs.gpu_type[r])
        a = pairs.descriptor(g, str(pairs.job_a[r]))
        b = pairs.descriptor(g, str(pairs.job_b[r]))
        queries.append(CoLocation(a, ((b, Sharing.GPU),)))
        queries.append(CoLocation(b, ((a, Sharing.GPU),)))
        targets += [float(pairs.norm_a[r]), float(pairs.norm_b[r])]
        source += [int(r), int(r)]
    return queries, np.array(targets), np.array(source, dtype=np.int64)


def _bootstrap_weights(groups: np.ndarray, members: int, rng: np.random.Generator) -> np.ndarray:
    """(members, N) sample weights: each member draws the groups (job types) with replacement."""
    names, inverse = np.unique(groups, return_inverse=True)
    draws = rng.integers(len(names), size=(members, len(names)))
    counts = np.stack([np.bincount(d, minlength=len(names)) for d in draws]).astype(np.float64)
    return counts[:, inverse]


def fit_queries(
    queries: Sequence[CoLocation],
    y: np.ndarray,
    cfg: TrainConfig,
    progress: Callable[[int, float], None] | None = None,
    meta: dict | None = None,
) -> LearnedInterference:
    """Fit the ensemble to single-GPU-neighbour ``queries`` with measured factors ``y``."""
    if any(len(q.neighbours) != 1 or q.neighbours[0][1] != Sharing.GPU for q in queries):
        raise ValueError("training samples must each have exactly one neighbour on the job's GPU")
    t0 = time.perf_counter()
    rng = np.random.Generator(np.random.PCG64(cfg.seed))
    torch.manual_seed(cfg.seed)
    flat = flatten(queries)
    cols = flat.columns()
    z_raw = intensity_features(cols, gpu_table(cols.gpu_type))
    o_raw = own_features(cols)
    z_mean, z_std = z_raw.mean(0), np.maximum(z_raw.std(0), 1e-3)
    z = torch.tensor((z_raw - z_mean) / z_std, dtype=torch.float64)
    job = torch.from_numpy(flat.job)
    nbr = torch.from_numpy(flat.nbr)
    target = torch.tensor(np.asarray(y, dtype=np.float64))
    # a job type is resampled with all its samples: Gavel's by name, a user's (no name) by its facts
    groups = np.array([q.job.name or repr(q.job._key()) for q in queries])
    weights = torch.tensor(_bootstrap_weights(groups, cfg.members, rng))
    weights = weights / weights.sum(1, keepdim=True)

    k, nz = cfg.members, z.shape[1]

    def param(*shape: int, init: float = 0.0) -> torch.nn.Parameter:
        return torch.nn.Parameter(init + 0.1 * torch.randn(*shape, dtype=torch.float64))

    p = {
        "wu": param(k, nz, init=-1.0),
        "cu": param(k),
        "wm": param(k, nz, init=-1.0),
        "cm": param(k),
        "mix": param(k),
        "v": param(k, 2),
        "c": param(k, init=-2.0),
    }
    nd, r = len(flat.descriptors), cfg.type_rank
    # a partner that issues almost no GPU work has no pressure (partner_gate); Gavel's A3C pairs are
    # therefore constants to the fit: whatever slows A3C's partners is not GPU contention
    gate = torch.tensor(partner_gate(np.exp(z_raw[:, 0]), cols.gpu_util))
    # profiled jobs (a user's pairs) enter with their measured uses, as at inference
    measured = {c: torch.tensor(np.clip(getattr(cols, c) / 100.0, MIN_USE, 1.0)) for c in ("gpu_util", "mem_util")}
    has = {c: torch.tensor(~np.isnan(getattr(cols, c))) for c in measured}

    def uses() -> tuple[torch.Tensor, torch.Tensor]:
        """(K, D) GPU and memory-bandwidth use: profiled where measured, else estimated from the descriptor."""
        u = torch.sigmoid(p["cu"][:, None] + softplus(p["wu"]) @ z.T)
        m = torch.sigmoid(p["cm"][:, None] + softplus(p["wm"]) @ z.T)
        u = torch.where(has["gpu_util"], torch.nan_to_num(measured["gpu_util"]), u)
        return u, torch.where(has["mem_util"], torch.nan_to_num(measured["mem_util"]), m)

    def predict(types: str | None) -> torch.Tensor:
        u, m = uses()  # (K, D)
        lam = torch.sigmoid(p["mix"])[:, None]
        pressure = (lam * u[:, nbr] + (1.0 - lam) * m[:, nbr]) * gate[nbr]
        v = p["v"]
        sens = MAX_SENSITIVITY * torch.sigmoid(p["c"][:, None] + v[:, :1] * u[:, job] + v[:, 1:] * m[:, job])
        slow = sens * pressure
        if types == "both":
            scale = p["type_scale"]
            slow = slow * torch.exp(scale[:, job, 0] + scale[:, nbr, 1])
            slow = slow + (softplus(p["type_sens"])[:, job] * softplus(p["type_pres"])[:, nbr]).sum(2)
        elif types == "job":  # the job measured, its partner taken as new
            slow = torch.clamp(sens * torch.exp(p["side_sens"][:, job]), max=MAX_SENSITIVITY) * pressure
        elif types == "partner":  # the partner measured, the job taken as new
            side = p["side_pres"][:, nbr]
            slow = sens * (pressure * torch.exp(side[..., 0]) + softplus(side[..., 1]))
        return 1.0 / (1.0 + slow)

    # stage 1: the descriptor structure, each member on its bootstrap resample
    opt = torch.optim.Adam(p.values(), lr=cfg.lr)
    for step in range(cfg.steps):
        loss = (weights * (predict(None) - target) ** 2).sum()
        loss = loss + cfg.pres_l2 * (softplus(p["wu"]) ** 2 + softplus(p["wm"]) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if progress is not None and (step % 200 == 0 or step == cfg.steps - 1):
            progress(step, loss.item() / k)
    # stage 2: residuals of the measured types on all samples, the structure frozen
    if r:
        for t in p.values():
            t.requires_grad_(False)
        res = {
            "type_scale": torch.nn.Parameter(torch.zeros(k, nd, 2, dtype=torch.float64)),
            "type_sens": param(k, nd, r, init=-3.0),
            "type_pres": param(k, nd, r, init=-3.0),
        }
        p.update(res)
        opt = torch.optim.Adam(res.values(), lr=cfg.lr)
        for step in range(cfg.steps):
            loss = ((predict("both") - target) ** 2).mean() * k
            loss = loss + cfg.type_l2 * sum((t**2).mean() for t in res.values()) * k
            opt.zero_grad()
            loss.backward()
            opt.step()
            if progress is not None and (step % 200 == 0 or step == cfg.steps - 1):
                progress(cfg.steps + step, loss.item() / k)
        # stage 3: one measured job next to a new one: each sample seen from either side, the rest frozen
        for t in res.values():
            t.requires_grad_(False)
        side = {
            "side_sens": torch.nn.Parameter(torch.zeros(k, nd, dtype=torch.float64)),
            "side_pres": torch.nn.Parameter(torch.stack([torch.zeros(k, nd), torch.full((k, nd), -6.0)], 2).double()),
        }
        p.update(side)
        opt = torch.optim.Adam(side.values(), lr=cfg.lr)
        for step in range(cfg.steps):
            loss = (((predict("job") - target) ** 2).mean() + ((predict("partner") - target) ** 2).mean()) * k
            loss = loss + cfg.type_l2 * sum((t**2).mean() for t in side.values()) * k
            opt.zero_grad()
            loss.backward()
            opt.step()
            if progress is not None and (step % 200 == 0 or step == cfg.steps - 1):
                progress(2 * cfg.steps + step, loss.item() / k)

    def lst(t: torch.Tensor | np.ndarray) -> list:
        return (t.detach().numpy() if isinstance(t, torch.Tensor) else t).tolist()

    with torch.no_grad():  # each member's lowest combined GPU use over the training pairs
        u, _ = uses()
        use_lo = (u[:, job] + u[:, nbr]).min(dim=1).values
    # the range the model was fitted on: beyond it answers move to the safe prior (interference.learned)
    fitted = [c for c in PROFILE_COLUMNS if not np.isnan(getattr(cols, c)).all()]
    prof = profile_features(cols, fitted)
    gpu_x = gpu_figures(gpu_table(cols.gpu_type))
    params = ContentionParams(
        z_mean=lst(z_mean), z_std=lst(z_std),
        z_lo=lst(z_raw.min(0)), z_hi=lst(z_raw.max(0)), o_lo=lst(o_raw.min(0)), o_hi=lst(o_raw.max(0)),
        type_keys=[list(key) for key in type_keys_of(cols)] if r else [],
        pair_use_lo=lst(use_lo),
        gpu_lo=lst(gpu_x.min(0)), gpu_hi=lst(gpu_x.max(0)), profile_fitted=fitted,
        prof_lo=lst(np.nanmin(prof, axis=0)) if fitted else [], prof_hi=lst(np.nanmax(prof, axis=0)) if fitted else [],
        prior_std=float(np.quantile(np.abs(1.0 - np.asarray(y, dtype=np.float64)), PRIOR_COVERAGE)),
        **{name: lst(t) for name, t in p.items()},
    )  # fmt: skip
    info = {
        "train_config": asdict(cfg),
        "train_samples": len(queries),
        "train_seconds": round(time.perf_counter() - t0, 2),
        "features": {"intensity": list(INTENSITY_FEATURES), "own": list(OWN_FEATURES)},
        "inputs": trained_inputs(cols),
        **(meta or {}),
    }
    return LearnedInterference(params, info)


PROFILE_INPUTS = PROFILE_COLUMNS  # optional per-job profile columns (JobDescriptor)
DESCRIPTOR_INPUTS = ("params_m", "gflops", "batch", "solo_sps", "amp", "gpu_type")


def trained_inputs(cols) -> dict[str, object]:
    """Which inputs the training samples carried: the public descriptor facts always, and each optional
    profile column with the share of training jobs that had it (0: the model never saw it measured, so a
    user's profile values feed the structure, not a fitted weight)."""
    return {
        "descriptors": list(DESCRIPTOR_INPUTS),
        "profile": {c: round(float(np.mean(~np.isnan(getattr(cols, c)))), 4) for c in PROFILE_INPUTS},
    }


def pairs_queries(path: str) -> tuple[list[CoLocation], np.ndarray]:
    """Directed single-GPU samples of a user's measured pairs CSV (:mod:`interference.pairs_csv`: the
    descriptor columns, optional profile columns, measured ``norm_a`` and ``norm_b``)."""
    from interference.pairs_csv import read_measured, read_pairs_csv

    rows, _, a, b, level = read_pairs_csv(path)
    off = np.flatnonzero(level != int(Sharing.GPU))
    if len(off):
        i = int(off[0])
        raise ValueError(
            f"{path}: line {i + 2}: column 'level' is {rows[i]['level']!r}; training uses pairs measured on one "
            "GPU (level gpu): server and uplink sharing follow physical models with nothing to fit"
        )
    ya, yb = read_measured(path, rows, purpose="training")
    da, db = descriptors_of(a), descriptors_of(b)
    queries = [q for x, y in zip(da, db, strict=True) for q in (CoLocation(x, ((y, Sharing.GPU),)),
                                                                 CoLocation(y, ((x, Sharing.GPU),)))]  # fmt: skip
    return queries, np.stack([ya, yb], axis=1).reshape(-1)


def descriptors_of(cols: JobColumns) -> list[JobDescriptor]:
    """One :class:`JobDescriptor` per row, profile columns ``None`` where NaN."""

    def opt(x: float) -> float | None:
        return None if np.isnan(x) else float(x)

    out = []
    for i in range(len(cols)):
        facts = dict(params_m=float(cols.params_m[i]), gflops=float(cols.gflops[i]), batch=int(cols.batch[i]))
        facts |= dict(solo_sps=float(cols.solo_sps[i]), amp=bool(cols.amp[i]), gpu_type=str(cols.gpu_type[i]))
        out.append(JobDescriptor(**facts, **{c: opt(float(getattr(cols, c)[i])) for c in PROFILE_COLUMNS}))
    return out


DATA_KINDS = ("gavel", "pairs")


def load_training_data(specs: Sequence[str]) -> tuple[list[CoLocation], np.ndarray, list[dict], GavelPairs | None]:
    """Samples of every ``--data`` spec (``gavel:PATH``, ``pairs:FILE``; a bare path is a pairs file where it ends
    in ``.csv``, else Gavel's JSON): (queries, targets, one summary per source, Gavel's pairs if one was Gavel's)."""
    from interference.gavel_data import load_gavel_pairs

    queries: list[CoLocation] = []
    targets: list[np.ndarray] = []
    sources: list[dict] = []
    gavel: GavelPairs | None = None
    for spec in specs:
        kind, sep, path = spec.partition(":")
        if sep and kind.isalpha() and len(kind) > 1 and kind not in DATA_KINDS:
            raise ValueError(f"--data {spec}: unknown source kind {kind!r}; pass gavel:PATH or pairs:FILE")
        if not sep or kind not in DATA_KINDS:
            kind, path = ("pairs" if spec.lower().endswith(".csv") else "gavel"), spec
        if kind == "gavel":
            if gavel is not None:
                raise ValueError(f"--data {spec}: Gavel's tables given twice; pass one gavel:PATH")
            gavel = load_gavel_pairs(path)
            q, y, _ = gavel_queries(gavel)
            path = gavel.source
        else:
            q, y = pairs_queries(path)
        queries += q
        targets.append(y)
        sources.append({"kind": kind, "path": str(path), "samples": len(q)})
    if not queries:
        raise ValueError("no training data: pass --data gavel:PATH and/or --data pairs:FILE")
    return queries, np.concatenate(targets), sources, gavel


def fit(
    pairs: GavelPairs, cfg: TrainConfig, progress: Callable[[int, float], None] | None = None
) -> LearnedInterference:
    """Fit on every feasible single-GPU pair of ``pairs``."""
    queries, y, _ = gavel_queries(pairs)
    return fit_queries(queries, y, cfg, progress, meta={"data": pairs.source})
