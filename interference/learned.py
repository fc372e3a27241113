"""Learned interference predictor: a contention model with a few fitted, sign-constrained parameters.

Two jobs time-slice a GPU. Job ``a`` next to partner ``b`` keeps the fraction

    f_a = 1 / (1 + s_a · p_b),     p_b = g_b · (λ u_b + (1 − λ) m_b),     s_a = S · sigmoid(c + v_u u_a + v_m m_a)

of its solo throughput, where

- ``u`` is a job's GPU (SM) use and ``m`` its memory-bandwidth use, both in (0, 1]: the profiled
  ``gpu_util`` and ``mem_util`` (%) when the user has them, otherwise estimated from the descriptor as
  ``sigmoid(c + w · z)`` over the intensity features ``z`` (achieved fraction of peak FLOP/s, GPU seconds
  per step, FLOPs per parameter; see :mod:`interference.features`) with every weight ``w ≥ 0``;
- ``p_b`` is the partner's pressure in [0, 1] (a fitted mix ``λ`` of its two uses), times the gate
  ``g_b`` that silences partners which issue almost no GPU work (see :func:`partner_gate`);
- ``s_a`` is the job's sensitivity, bounded by ``S = MAX_SENSITIVITY``, a function of its own two uses
  with weights of either sign. Giving it every descriptor feature fits better in-sample but extrapolates
  worse: on a held-out model family the leave-one-family-out MAE is 0.136 that way and 0.1265 this way
  (Gavel's recommendation model, with a batch and a FLOPs-per-parameter ratio no other family has, was
  predicted insensitive; it is the most sensitive). The pressure weights carry a small penalty for the
  same reason (``TrainConfig.pres_l2``).

Why this form rather than a free network (the previous set model was no better than predicting the mean
on a held-out model family): the structure holds on jobs no table measured. A heavier partner never
predicts less slowdown (``p`` is monotone in every intensity feature and in the profile columns), a
partner that barely uses the GPU barely slows anyone down, the factor lies in (0, 1], and two equal jobs
get equal factors. On Gavel's measurements a rank-one latent model of this form (one sensitivity and one
pressure per job type) fits with MAE 0.061; what remains is how well descriptors predict those two
numbers, which is what the fitted parameters learn. If both jobs' ``mem_gb`` are known and together
exceed the GPU's memory, the pair is infeasible (:data:`~interference.composition.INFEASIBLE_GPU_FACTOR`).

Job types the model was fitted on (recognised by their descriptor facts) also carry a residual, fitted
after the structure with the structure frozen: per-type log-scales of sensitivity and pressure and a
non-negative rank-R interaction, ``slow_ab = s_a p_b exp(α_a + β_b) + Σ_r e_ar g_br``. It lets pairs of
measured types that were never run together be predicted from how each behaved with others (the
random-split accuracy). A pair of one measured and one new job keeps what is known of the measured
side, fitted last with everything else frozen by seeing each training sample from either side as if
the other job were new: a measured job's sensitivity scale, ``min(S, s_a exp(σ_a)) · p_b``, or a measured
partner's pressure, ``s_a (p_b exp(π_b) + q_b)`` with ``q_b ≥ 0`` (so a measured partner that slows others
for reasons other than GPU work, as Gavel's A3C does through its CPU workers, keeps that effect). On
Gavel's leave-one-family-out folds this is what most of the held-out pairs are (with it the MAE went
from 0.152 to 0.136, before the sensitivity was narrowed to the job's own uses). A pair of two new jobs
gets the structure alone, so every guarantee above holds for new jobs, and a new partner's pressure is
always monotone and gated.

Below the lowest combined GPU use ``u_a + u_b`` of any training pair, the slowdown shrinks in proportion
towards none: two jobs that together use less of the GPU than any measured pair did are not predicted to
slow each other down by extrapolation (Gavel's pairs, all heavy users, say nothing about light ones).

The parameters are an ensemble of ``K`` members fitted on bootstrap resamples of the job types; the
prediction is their mean and ``std`` their spread, the uncertainty the CLI reports.

**Out of range, the safe prior.** The model records the range of what it was fitted on: every intensity
and own feature, the GPU datasheet figures, and which profile columns its samples carried (and their
range). A monotone structure extrapolates in direction, not in scale: measured elsewhere (a public set of
lighter jobs) the Gavel-fitted answers were further from the truth than assuming no interference at all.
So beyond the range the answer and its std move toward a prior with no fitted part (:func:`safe_prior`):

- no interference, 1.0, the answer of a scheduler that knows nothing and the upper bound of any factor;
- or, where both jobs' solo ``gpu_util`` is known, time slicing: kernels of two jobs interleave, so while
  the two together keep the GPU busy at most 100% of the time neither waits much, and beyond it each gets
  its share, ``f = min(1, 100 / (u_a + u_b))``. Context switches and memory-bandwidth contention are left
  out, so it errs toward too little slowdown, as the 1.0 it reduces to for light jobs does.

Its std is ``prior_std``, the deviation from 1.0 that 68% of the training targets stay within (it covers
what was measured). A job's trust falls linearly from 1 at the edge of the range to 0 at
``OOD_TOLERANCE`` of the range's width beyond it; a pair's trust is the product of its jobs', and never
below ``OOD_FLOOR``. Answers and member spreads are ``w · model + (1 − w) · prior``, the std that of the
mixture. A profile column the model was not fitted on is not used by the structure (it was never
matched to a measurement; see issue 63's figures): it only selects the time-slicing prior, and the pair
counts as out of range. Within the range a heavier partner never predicts less slowdown; beyond it the
answer heads for the prior instead.
Jobs sharing a server or an uplink follow the physical contention models of
:mod:`interference.contention`, composed as :mod:`interference.composition` says, exactly as the ground
truth does. Inference is plain NumPy; the model file is JSON.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from interference.base import CoLocation, JobDescriptor
from interference.composition import INFEASIBLE_GPU_FACTOR, HostScalars, compose
from interference.features import (
    INTENSITY_FEATURES,
    OWN_FEATURES,
    PROFILE_COLUMNS,
    JobColumns,
    gpu_table,
    intensity_features,
    own_features,
)
from interference.queries import FactorCache, FlatQueries, flatten

FORMAT = "marlsched-interference-contention/3"
MIN_USE = 1e-3  # a profiled utilisation of 0 % still means the job is resident
# A partner's pressure is gated by the work it issues: gate = x^n / (x^n + h^n), x its achieved fraction of
# peak FLOP/s. A job at 1% of peak keeps 0.4% of its pressure, one at 3% keeps 96%. Fixed, not fitted:
# Gavel's only such job (A3C, 0.02% of peak, whose CPU workers contend with the partner's input
# pipeline) would teach the opposite, and measurements elsewhere show tiny partners barely slow a job.
GATE_FRAC = 0.02
GATE_POWER = 8.0
# Bound on the sensitivity: no job slows below 1 / (1 + S) next to one partner (Gavel's lowest feasible
# normalised throughput is about 0.1). With the gate it bounds a tiny partner's effect: at 1% of peak the
# slowdown is at most S x 0.0039 = 4%.
MAX_SENSITIVITY = 10.0
# How far beyond the fitted range, as a share of the range's width per feature, the answer has moved all the
# way to the prior (linearly from the edge). A choice, not a fit: the only data beyond the range that Gavel
# offers are its held-out families, all heavy GPU users like the training ones, which would teach trust that
# measurements of lighter jobs punished. A quarter keeps a job a little past the edge (a batch size one
# step beyond the largest measured) near the model's answer.
OOD_TOLERANCE = 0.25
# The share of the model's answer kept however far out: its order of a job's partners survives (the
# structure is monotone everywhere), its scale is not trusted. It costs at most 5% of the model-prior gap.
OOD_FLOOR = 0.05
# Narrowest range width per feature kind, for features the training data did not vary (Gavel: amp always
# 0, a model fitted on one GPU type): one e-fold for log features and flags, 10 points of utilisation.
MIN_WIDTH_LOG = 1.0
MIN_WIDTH_UTIL = 0.1
PRIOR_COVERAGE = 0.6827  # the prior's std covers this share of the training targets' deviation from 1.0
GPU_RANGE_FIGURES = ("fp32_tflops", "mem_bw_gbs", "mem_gb")  # datasheet figures whose range is recorded
PROFILE_FEATURES = {"gpu_util": "gpu_util/100", "mem_util": "mem_util/100", "mem_gb": "log mem_gb"}


def safe_prior(gpu_util_a: np.ndarray, gpu_util_b: np.ndarray) -> np.ndarray:
    """The factor out of range (see the module doc): 1.0, or time slicing ``min(1, 100 / (u_a + u_b))``
    where both jobs' solo GPU utilisation (%) is known. No fitted constant."""
    total = np.asarray(gpu_util_a, dtype=np.float64) + np.asarray(gpu_util_b, dtype=np.float64)
    return np.where(np.isnan(total), 1.0, 100.0 / np.maximum(total, 100.0))


def profile_features(cols: JobColumns, names: Sequence[str]) -> np.ndarray:
    """(N, len(names)) profile columns on the scale their range is recorded in (NaN where not profiled)."""
    scale = {"gpu_util": lambda x: x / 100.0, "mem_util": lambda x: x / 100.0, "mem_gb": np.log}
    return np.stack([scale[c](getattr(cols, c)) for c in names], axis=1) if names else np.empty((len(cols), 0))


def gpu_figures(gpu: dict[str, np.ndarray]) -> np.ndarray:
    """(N, len(GPU_RANGE_FIGURES)) log datasheet figures of each row's GPU."""
    return np.log(np.stack([gpu[f] for f in GPU_RANGE_FIGURES], axis=1))


def partner_gate(frac_peak: np.ndarray, gpu_util: np.ndarray) -> np.ndarray:
    """How much of its pressure a partner exerts; 1 when its GPU use was profiled (that is its pressure)."""
    x = np.asarray(frac_peak, dtype=np.float64) ** GATE_POWER
    return np.where(np.isnan(gpu_util), x / (x + GATE_FRAC**GATE_POWER), 1.0)


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


@dataclass(frozen=True)
class ContentionParams:
    """Fitted parameters of ``K`` ensemble members (lists for JSON; arrays via :meth:`arrays`).

    ``z`` (intensity) is standardised with ``z_mean/z_std`` before use; ``z_lo/z_hi`` and ``o_lo/o_hi``
    are the raw ranges of the intensity and own features seen in training (the out-of-range flag).
    Non-negative parameters are stored raw and passed through softplus.
    """

    z_mean: list[float]
    z_std: list[float]
    z_lo: list[float]
    z_hi: list[float]
    o_lo: list[float]
    o_hi: list[float]
    wu: list[list[float]]  # (K, Z) raw; GPU-use weights = softplus(wu)
    cu: list[float]  # (K,)
    wm: list[list[float]]  # (K, Z) raw; memory-bandwidth-use weights = softplus(wm)
    cm: list[float]  # (K,)
    mix: list[float]  # (K,) raw; λ = sigmoid(mix), the weight of GPU use in the pressure
    v: list[list[float]]  # (K, 2) sensitivity weights on the job's own [u, m]
    c: list[float]  # (K,)
    # measured job types: their facts, and a rank-R residual (K, T, R) raw, softplus'd; see the module doc
    type_keys: list[list] = field(default_factory=list)
    type_scale: list = field(default_factory=list)  # (K, T, 2): log-scale of sensitivity and pressure
    type_sens: list = field(default_factory=list)
    type_pres: list = field(default_factory=list)
    # one measured job next to a new one (see the module doc): (K, T) log-scale of the measured job's
    # sensitivity, and (K, T, 2) log-scale and raw additive term (softplus'd) of its pressure
    side_sens: list = field(default_factory=list)
    side_pres: list = field(default_factory=list)
    # doubt beyond the ensemble's spread, by how many of the pair's two job types the model was fitted on:
    # [both measured, one new, both new] (empty: not calibrated); see ``interference.calibration``
    novelty_std: list = field(default_factory=list)
    # (K,) each member's lowest combined GPU use u_a + u_b over its training pairs: below it, slowdowns
    # shrink in proportion towards none (empty: no such guard, models saved before it)
    pair_use_lo: list = field(default_factory=list)
    # the range beyond which answers move to the safe prior (empty gpu_lo: models saved before it, no prior):
    # log datasheet figures (GPU_RANGE_FIGURES) of the training GPUs, the profile columns the training samples
    # carried with their range (PROFILE_FEATURES scale), and the prior's std
    gpu_lo: list = field(default_factory=list)
    gpu_hi: list = field(default_factory=list)
    profile_fitted: list = field(default_factory=list)
    prof_lo: list = field(default_factory=list)
    prof_hi: list = field(default_factory=list)
    prior_std: float = 0.0

    @property
    def members(self) -> int:
        return len(self.c)

    def arrays(self) -> dict[str, np.ndarray]:
        skip = ("type_keys", "novelty_std", "profile_fitted", "prior_std")
        return {k: np.asarray(val, dtype=np.float64) for k, val in asdict(self).items() if k not in skip}


def type_key(params_m: float, gflops: float, batch: float, solo_sps: float, amp: float, gpu_type: str) -> tuple:
    """The identity of a measured job type: its descriptor facts, rounded so that JSON round trips match."""
    return (*(float(f"{x:.9g}") for x in (params_m, gflops, batch, solo_sps, amp)), str(gpu_type).upper())


def type_keys_of(cols: JobColumns) -> list[tuple]:
    return [
        type_key(*row)
        for row in zip(cols.params_m, cols.gflops, cols.batch, cols.solo_sps, cols.amp, cols.gpu_type, strict=True)
    ]


@dataclass(frozen=True, eq=False)
class PairPrediction:
    """Factor of each job next to its partner: ensemble mean, spread, and the out-of-range flag."""

    factor: np.ndarray
    std: np.ndarray
    out_of_range: np.ndarray  # bool: an input of either job lies outside the fitted range
    trust: np.ndarray | None = None  # weight of the model's answer against the safe prior, in [OOD_FLOOR, 1]
    ood: list[str] | None = None  # per pair, the out-of-range inputs ("a:amp;b:gpu_fp32_tflops"), "" if none


class LearnedInterference:
    """:class:`~interference.base.InterferenceModel` backed by fitted :class:`ContentionParams`."""

    name = "learned"
    pure = True  # answers depend on the query alone, so callers may memoise them

    def __init__(self, params: ContentionParams, meta: dict | None = None):
        self.params = params
        self.meta = dict(meta or {})
        self._p = params.arrays()
        self._types = {type_key(*k): i for i, k in enumerate(params.type_keys)}
        self._type_params = np.unique([float(k[0]) for k in params.type_keys])
        self._host = HostScalars()
        self._cache = FactorCache(self._compute)

    # -- the model -----------------------------------------------------------------------------------
    def _raw(self, cols: JobColumns) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Raw intensity and own features, and the GPU datasheet rows of ``cols``."""
        gpu = gpu_table(cols.gpu_type)
        return intensity_features(cols, gpu), own_features(cols), gpu

    def _type_index(self, cols: JobColumns) -> np.ndarray:
        """Index of each row's measured type in the residual tables, -1 for jobs no table measured."""
        t = np.full(len(cols), -1, dtype=np.int64)
        if not self._types:
            return t
        maybe = np.flatnonzero(np.isin(cols.params_m, self._type_params))  # cheap pre-filter
        for i, key in zip(maybe.tolist(), type_keys_of(cols.take(maybe)), strict=True):
            t[i] = self._types.get(key, -1)
        return t

    @property
    def guarded(self) -> bool:
        """Whether the model recorded its range (models saved before the safe prior did not)."""
        return bool(self.params.gpu_lo)

    def _profile_use(self, cols: JobColumns) -> JobColumns:
        """``cols`` with the profile columns the model was not fitted on blanked: the structure never saw
        them matched to a measurement (models without a recorded range use every column, as they did)."""
        if not self.guarded:
            return cols
        blank = {c: np.full(len(cols), np.nan) for c in PROFILE_COLUMNS if c not in self.params.profile_fitted}
        return replace(cols, **blank) if blank else cols

    def range_excess(self, cols: JobColumns, raw: tuple | None = None) -> tuple[np.ndarray, list[str]]:
        """(N, F) how far each input feature lies beyond the fitted range, as a share of the range's width
        (0 inside; ``inf`` for a profile column the model was not fitted on), and the F feature names."""
        p = self._p
        z, o, gpu = self._raw(cols) if raw is None else raw
        names = [*INTENSITY_FEATURES, *OWN_FEATURES]
        x, lo, hi = np.hstack([z, o]), np.concatenate([p["z_lo"], p["o_lo"]]), np.concatenate([p["z_hi"], p["o_hi"]])
        width = np.full(len(lo), MIN_WIDTH_LOG)
        if self.guarded:
            fitted = list(self.params.profile_fitted)
            names += [f"gpu_{f}" for f in GPU_RANGE_FIGURES] + fitted
            x = np.hstack([x, gpu_figures(gpu), profile_features(cols, fitted)])
            lo = np.concatenate([lo, p["gpu_lo"], p["prof_lo"]])
            hi = np.concatenate([hi, p["gpu_hi"], p["prof_hi"]])
            width = np.concatenate([width, np.full(len(GPU_RANGE_FIGURES), MIN_WIDTH_LOG)])
            width = np.concatenate([width, [MIN_WIDTH_UTIL if c != "mem_gb" else MIN_WIDTH_LOG for c in fitted]])
        width = np.maximum(hi - lo, width)
        excess = np.maximum(np.maximum(lo - x, x - hi), 0.0) / width
        excess = np.where(np.isnan(excess), 0.0, excess)  # a fitted profile column left empty: estimated
        if self.guarded:
            unfitted = [c for c in PROFILE_COLUMNS if c not in self.params.profile_fitted]
            given = np.stack([~np.isnan(getattr(cols, c)) for c in unfitted], axis=1) if unfitted else None
            if given is not None:
                excess = np.hstack([excess, np.where(given, np.inf, 0.0)])
                names += [f"{c} (not fitted)" for c in unfitted]
        return excess, names

    def job_trust(self, cols: JobColumns, raw: tuple | None = None) -> np.ndarray:
        """(N,) weight of the model's answer for each job: 1 within the fitted range, falling linearly to 0 at
        ``OOD_TOLERANCE`` of the range's width beyond it (all 1 for models without a recorded range)."""
        if not self.guarded:
            return np.ones(len(cols))
        excess, _ = self.range_excess(cols, raw)
        return np.clip(1.0 - excess.max(axis=1, initial=0.0) / OOD_TOLERANCE, 0.0, 1.0)

    def _gpu_pairs(
        self, cols: JobColumns, job: np.ndarray, other: np.ndarray, raw: tuple | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(K, n) factors of the fitted structure alone, the (n,) trust of each pair and its (n,) prior."""
        raw = self._raw(cols) if raw is None else raw
        if self.guarded:
            trust = self.job_trust(cols, raw)
            w = np.maximum(OOD_FLOOR, trust[job] * trust[other])
        else:
            w = np.ones(len(job))
        prior = safe_prior(cols.gpu_util[job], cols.gpu_util[other])
        return self._structure(self._profile_use(cols), job, other, raw), w, prior

    def gpu_members(self, cols: JobColumns, job: np.ndarray, other: np.ndarray, raw: tuple | None = None) -> np.ndarray:
        """(K, n) factor of each row ``job[i]`` of ``cols`` sharing its GPU with row ``other[i]``, moved toward
        the safe prior as far as the pair lies beyond the fitted range (``raw``: :meth:`_raw` of ``cols``)."""
        f, w, prior = self._gpu_pairs(cols, job, other, raw)
        return np.where(f == INFEASIBLE_GPU_FACTOR, f, w * f + (1.0 - w) * prior)

    def _structure(self, cols: JobColumns, job: np.ndarray, other: np.ndarray, raw: tuple) -> np.ndarray:
        """(K, n) factors of the fitted structure and residuals, profile columns as ``cols`` gives them."""
        p = self._p
        z_raw, _, gpu = raw
        z = (z_raw - p["z_mean"]) / p["z_std"]
        u = sigmoid(p["cu"][:, None] + softplus(p["wu"]) @ z.T)  # (K, N)
        m = sigmoid(p["cm"][:, None] + softplus(p["wm"]) @ z.T)
        gu, mu = cols.gpu_util / 100.0, cols.mem_util / 100.0
        u = np.where(np.isnan(gu), u, np.clip(gu, MIN_USE, 1.0))
        m = np.where(np.isnan(mu), m, np.clip(mu, MIN_USE, 1.0))
        gate = partner_gate(np.exp(z_raw[:, 0]), cols.gpu_util)
        lam = sigmoid(p["mix"])[:, None]
        pressure = (lam * u[:, other] + (1.0 - lam) * m[:, other]) * gate[other]
        v = p["v"]
        sens = MAX_SENSITIVITY * sigmoid(p["c"][:, None] + v[:, :1] * u[:, job] + v[:, 1:] * m[:, job])
        slow = sens * pressure
        t = self._type_index(cols)
        ta, tb = t[job], t[other]
        both = (ta >= 0) & (tb >= 0)
        if both.any():
            a, b, scale = ta[both], tb[both], p["type_scale"]
            ts, tp = softplus(p["type_sens"]), softplus(p["type_pres"])  # (K, T, R)
            slow[:, both] = slow[:, both] * np.exp(scale[:, a, 0] + scale[:, b, 1]) + (ts[:, a] * tp[:, b]).sum(2)
        if p["side_sens"].size:
            job_only, partner_only = (ta >= 0) & (tb < 0), (ta < 0) & (tb >= 0)
            if job_only.any():
                scaled = sens[:, job_only] * np.exp(p["side_sens"][:, ta[job_only]])
                slow[:, job_only] = np.minimum(scaled, MAX_SENSITIVITY) * pressure[:, job_only]
            if partner_only.any():
                side = p["side_pres"][:, tb[partner_only]]  # (K, n, 2)
                own = pressure[:, partner_only] * np.exp(side[..., 0]) + softplus(side[..., 1])
                slow[:, partner_only] = sens[:, partner_only] * own
        if p["pair_use_lo"].size:  # below every measured pair's GPU use, no extrapolated slowdown
            slow = slow * np.clip((u[:, job] + u[:, other]) / p["pair_use_lo"][:, None], 0.0, 1.0)
        f = 1.0 / (1.0 + slow)
        over = cols.mem_gb[job] + cols.mem_gb[other] > gpu["mem_gb"][job]  # NaN compares False: feasible
        return np.where(over[None, :], INFEASIBLE_GPU_FACTOR, f)

    def outside_fitted_range(self, jobs: Sequence[JobDescriptor]) -> np.ndarray:
        """Which of ``jobs`` have an input outside the range the model was fitted on, where its answers move
        toward the safe prior (what a simulation in learned mode then takes as the truth)."""
        return self.out_of_range(JobColumns.from_descriptors(jobs))

    def out_of_range(self, cols: JobColumns, raw: tuple | None = None) -> np.ndarray:
        """Rows with an input outside the range the model was fitted on."""
        return (self.range_excess(cols, raw)[0] > 0).any(axis=1)

    # -- queries -------------------------------------------------------------------------------------
    def predict_pairs(self, job: JobColumns, other: JobColumns, level: np.ndarray) -> PairPrediction:
        """Factor of each ``job[i]`` with the single neighbour ``other[i]`` at ``level[i]`` (vectorised).

        ``std`` at the GPU level is the ensemble spread, widened by the calibrated doubt of the pair's
        novelty class when the model was calibrated, and mixed with the prior's std by the pair's trust;
        server and uplink levels are physical formulas without fitted parts (std 0).
        """
        n = len(job)
        both = JobColumns(**{f: np.concatenate([getattr(job, f), getattr(other, f)]) for f in job.__dataclass_fields__})
        level = np.asarray(level, dtype=np.int64)
        idx, nbr = np.arange(n), n + np.arange(n)
        flat = FlatQueries(descriptors=[], job=idx, nbr=nbr, nbr_query=idx, nbr_level=level)
        got: dict[str, np.ndarray] = {}

        raw = self._raw(both)

        def gpu_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            f, w, prior = self._gpu_pairs(both, a, b, raw)
            mean = f.mean(axis=0)
            got.update(rows=a, spread=f.std(axis=0), mean=mean, w=w, prior=prior)
            return np.where(mean == INFEASIBLE_GPU_FACTOR, mean, w * mean + (1.0 - w) * prior)

        factor = compose(flat, both, gpu_pairs)
        std = np.zeros(n)
        trust = np.ones(n)
        if "rows" in got:
            rows = got["rows"]
            var = got["spread"] ** 2
            if self.params.novelty_std:
                t = self._type_index(both)
                new = (t[rows] < 0).astype(np.int64) + (t[n + rows] < 0)
                var = var + np.asarray(self.params.novelty_std, dtype=np.float64)[new] ** 2
            w = got["w"]
            var = w * var + (1.0 - w) * self.params.prior_std**2 + w * (1.0 - w) * (got["mean"] - got["prior"]) ** 2
            std[rows] = np.sqrt(var)
            trust[rows] = w
        excess, names = self.range_excess(both, raw)
        out = excess > 0
        oor = out[:n].any(axis=1) | out[n:].any(axis=1)
        named = [[name for name, e in zip(names, row, strict=True) if e] for row in out.tolist()]
        ood = [";".join([*(f"a:{x}" for x in named[i]), *(f"b:{x}" for x in named[n + i])]) for i in range(n)]
        return PairPrediction(factor=factor, std=std, out_of_range=oor, trust=trust, ood=ood)

    def novelty(self, job: JobColumns, other: JobColumns) -> np.ndarray:
        """How many of each pair's two jobs are of a type the model was not fitted on (0, 1 or 2)."""
        return (self._type_index(job) < 0).astype(np.int64) + (self._type_index(other) < 0)

    def with_novelty_std(self, novelty_std: Sequence[float], info: dict) -> LearnedInterference:
        """This model with calibrated doubt per novelty class (and ``info`` on how it was measured)."""
        params = ContentionParams(**{**asdict(self.params), "novelty_std": [float(x) for x in novelty_std]})
        return LearnedInterference(params, {**self.meta, "calibration": info})

    def throughput_factors(self, queries: Sequence[CoLocation]) -> np.ndarray:
        return self._cache(queries)

    def _compute(self, queries: list[CoLocation]) -> np.ndarray:
        return self.flat_factors(flatten(queries))

    def flat_factors(self, flat: FlatQueries) -> np.ndarray:
        """Factors of queries already in flat form (what the simulator builds; not cached here)."""
        return compose(flat, None, lambda a, b: self.gpu_members(flat.columns(), a, b).mean(axis=0), host=self._host)

    # -- persistence ---------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """One JSON file: parameters, feature names and training metadata (written atomically)."""
        path = Path(path)
        doc = {
            **self.meta,
            "format": FORMAT,
            "intensity_features": list(INTENSITY_FEATURES),
            "own_features": list(OWN_FEATURES),
            "params": asdict(self.params),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @staticmethod
    def load(path: str | Path) -> LearnedInterference:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"interference model {path} not found; train one with "
                "`marlsched interference train --data gavel:PATH --seed S --out MODEL`"
            )
        try:
            doc = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(
                f"{path}: not a marlsched interference model (not JSON: {e}); give the file `marlsched interference "
                "train --out MODEL` wrote, e.g. experiments/policies/interference-gavel/model.json"
            ) from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            got = doc.get("format") if isinstance(doc, dict) else None
            raise ValueError(f"{path}: model format {got!r}, expected {FORMAT!r}; retrain it with this version")
        if doc.get("intensity_features") != list(INTENSITY_FEATURES) or doc.get("own_features") != list(OWN_FEATURES):
            raise ValueError(f"{path}: trained on different features than this version computes; retrain it")
        try:
            params = ContentionParams(**doc.pop("params"))
        except TypeError as e:
            raise ValueError(f"{path}: malformed parameters ({e}); retrain it") from None
        return LearnedInterference(params, {k: v for k, v in doc.items() if k != "format"})
