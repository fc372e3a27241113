"""Pollux's goodput model (Qiao et al., OSDI'21): throughput fitted to a job's own step times, times its
statistical efficiency from its gradient statistics.

Goodput = throughput x efficiency. Throughput is ``batch / step time`` with the step time modelled from
seven parameters fitted to the (step, sync) times the job measured on the configurations it ran on:

- compute per micro-batch ``T_c = α_c + β_c · per-GPU batch``;
- network ``T_n = α_n + β_n · max(GPUs − 2, 0)`` across nodes, ``α_r + β_r · ...`` inside one node;
- step ``((T_c^γ + T_n^γ)^(1/γ)) + accumulation steps · T_c`` (γ in [1, 10]: from no overlap to full).

Efficiency at global batch ``B`` (relative to the initial batch ``B0``) is ``(var + sqr) / (var / s + sqr) /
s`` with ``s = B / B0``: progress per sample, from the gradient noise scale. The fit follows Pollux's
objective (RMS log error of compute and step times, a small pull of γ towards 1, a penalty on the
retrogression terms) and its rules for parameters the data cannot identify (one per-GPU batch seen: α_c
is half the compute time; no multi-node or multi-GPU data: those terms stay at their floor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cluster_sim.blas_threads import one_blas_thread

_FLOOR = 1e-8


@dataclass(frozen=True, slots=True)
class PerfParams:
    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def as_array(self) -> np.ndarray:
        return np.array([self.alpha_c, self.beta_c, self.alpha_n, self.beta_n, self.alpha_r, self.beta_r, self.gamma])


def _network_time(p: np.ndarray, nodes: np.ndarray, replicas: np.ndarray) -> np.ndarray:
    multi_node, multi_gpu = nodes > 1, replicas > 1
    alpha = np.where(multi_node, p[2], np.where(multi_gpu, p[4], _FLOOR))
    beta = np.where(multi_node, p[3], np.where(multi_gpu, p[5], _FLOOR))
    return alpha + beta * np.maximum(replicas - 2, _FLOOR)


def _log_sync_step(p: np.ndarray, compute: np.ndarray, network: np.ndarray) -> np.ndarray:
    g = p[6]
    return np.log(compute**g + network**g) / g


def step_time(params: PerfParams, nodes, replicas, atomic_bsz, accum_steps) -> np.ndarray:
    """Predicted seconds per optimizer step (all accumulation steps included)."""
    p = params.as_array()
    compute = p[0] + p[1] * np.asarray(atomic_bsz, dtype=np.float64)
    network = _network_time(p, np.asarray(nodes), np.asarray(replicas))
    return np.asarray(accum_steps) * compute + np.exp(_log_sync_step(p, compute, network))


def fit_perf_params(
    nodes: Sequence[int], replicas: Sequence[int], atomic_bsz: Sequence[int], compute: Sequence[float],
    step: Sequence[float],
) -> PerfParams:  # fmt: skip
    """Fit the seven step-time parameters to measured compute (step − sync) and step times."""
    key = tuple(zip(*(tuple(map(float, x)) for x in (nodes, replicas, atomic_bsz, compute, step)), strict=True))
    return _fit(tuple(sorted(key)))


@lru_cache(maxsize=4096)
def _fit(rows: tuple[tuple[float, ...], ...]) -> PerfParams:
    from scipy.optimize import minimize

    n, r, b, tc, ts = (np.array(c) for c in zip(*rows, strict=True))
    x0 = np.array([1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3])
    lo = np.array([_FLOOR] * 6 + [1.0])
    hi = np.array([np.inf] * 6 + [10.0])
    if len(np.unique(b)) == 1:  # one per-GPU batch seen: split compute evenly between α_c and β_c · b
        x0[0] = lo[0] = hi[0] = np.mean(tc) / 2
    if not np.any(n > 1):
        x0[2] = hi[2] = lo[2]
        x0[3] = hi[3] = lo[3]
    if not np.any((n == 1) & (r > 1)):
        x0[4] = hi[4] = lo[4]
        x0[5] = hi[5] = lo[5]
    if not np.any(r > 2):
        x0[3] = hi[3] = lo[3]
        x0[5] = hi[5] = lo[5]
    free = lo < hi
    log_tc, log_ts = np.log(tc), np.log(ts)

    cross, inside = n > 1, (n == 1) & (r > 1)
    m = np.maximum(r - 2, _FLOOR)
    count = len(n)
    # where each row's network terms come from in ``[p..., _FLOOR]`` (as _network_time picks them)
    alpha_at = np.where(cross, 2, np.where(r > 1, 4, 7))
    beta_at = np.where(cross, 3, np.where(r > 1, 5, 7))
    crossf, insidef = cross.astype(np.float64), inside.astype(np.float64)
    cross_m, inside_m = crossf * m, insidef * m
    p = np.append(x0, _FLOOR)

    def objective(z: np.ndarray) -> tuple[float, np.ndarray]:
        """Pollux's fitting objective and its gradient (written out, each piece computed once: L-BFGS-B calls
        it about 70 times a fit, and an elastic replay fits thousands of profiles)."""
        p[:7][free] = z
        g = p[6]
        compute = p[0] + p[1] * b
        network = p[alpha_at] + p[beta_at] * m
        log_c = np.log(compute)
        d1 = log_c - log_tc
        err1 = max(np.sqrt((d1 * d1).sum() / count), 1e-12)
        cg, ng = compute**g, network**g
        total = cg + ng
        log_total = np.log(total)
        d2 = log_total / g - log_ts
        err2 = max(np.sqrt((d2 * d2).sum() / count), 1e-12)
        reg = 1e-3 * (g - 1) ** 2 + 1e-2 * ((p[3] / p[2]) ** 2 + (p[5] / p[4]) ** 2)
        w1 = d1 / (err1 * count * compute)  # d err1 / d compute
        w2 = d2 / (err2 * count)  # d err2 / d step
        dc = w1 + w2 * (cg / (compute * total))
        dn = w2 * (ng / (network * total))
        grad = np.array([
            dc.sum(),
            (dc * b).sum(),
            (dn * crossf).sum() - 2e-2 * p[3] ** 2 / p[2] ** 3,
            (dn * cross_m).sum() + 2e-2 * p[3] / p[2] ** 2,
            (dn * insidef).sum() - 2e-2 * p[5] ** 2 / p[4] ** 3,
            (dn * inside_m).sum() + 2e-2 * p[5] / p[4] ** 2,
            (w2 * (-log_total / g**2 + (cg * log_c + ng * np.log(network)) / (g * total))).sum() + 2e-3 * (g - 1),
        ])  # fmt: skip
        return float(err1 + err2 + reg), grad[free]

    if free.any():
        one_blas_thread()  # thousands of fits a replay, each step a few tiny BLAS calls
        res = minimize(
            objective, x0[free], jac=True, method="L-BFGS-B", bounds=list(zip(lo[free], hi[free], strict=True))
        )
        x0[free] = res.x
    if not np.any(n > 1):  # prior: crossing nodes is at least as slow as staying inside one
        x0[2] = max(x0[2], x0[4] * 1.1)
        x0[3] = max(x0[3], x0[5] * 1.1)
    return PerfParams(*map(float, x0))


class GoodputFunction:
    """Goodput of one job over (nodes, GPUs, per-GPU batch, accumulation steps)."""

    def __init__(self, params: PerfParams, grad_sqr: float, grad_var: float, init_batch_size: int) -> None:
        self.params = params
        self.grad_sqr = float(grad_sqr)
        self.grad_var = float(grad_var)
        self.init_batch_size = int(init_batch_size)

    def efficiency(self, batch_size: np.ndarray) -> np.ndarray:
        scale = np.asarray(batch_size, dtype=np.float64) / self.init_batch_size
        denom = self.grad_var / scale + self.grad_sqr
        gain = np.where(denom > 0, (self.grad_var + self.grad_sqr) / np.where(denom > 0, denom, 1.0), 1.0)
        return gain / scale

    def evaluate(self, nodes, replicas, atomic_bsz, accum_steps) -> np.ndarray:
        batch = np.asarray(replicas) * np.asarray(atomic_bsz) * (np.asarray(accum_steps) + 1)
        throughput = batch / step_time(self.params, nodes, replicas, atomic_bsz, accum_steps)
        return throughput * self.efficiency(batch)

    def optimize(
        self, nodes, replicas, max_batch_size: int, local_bsz_range: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Best (goodput, per-GPU batch, accumulation steps) per (nodes, replicas) over 50 global batch sizes
        spaced geometrically from the smallest allowed to ``max_batch_size``, with gradient accumulation.
        Configurations that allow no batch size get goodput 0."""
        nodes = np.atleast_1d(np.asarray(nodes, dtype=np.float64))
        replicas = np.atleast_1d(np.asarray(replicas, dtype=np.float64))
        lo_local, hi_local = local_bsz_range
        min_batch = np.maximum(self.init_batch_size, lo_local * replicas)
        batch = np.geomspace(min_batch, np.maximum(max_batch_size, min_batch))  # (50, K)
        local = batch / replicas
        eps = 1e-8
        accum = np.ceil(local / hi_local - eps) - 1
        accum = np.where((replicas == 1) & (local > self.init_batch_size + eps), np.maximum(accum, 1), accum)
        atomic = np.ceil(local / (accum + 1) - eps)
        good = self.evaluate(nodes, replicas, atomic, accum)
        valid = (lo_local <= atomic) & (atomic <= hi_local) & (min_batch <= max_batch_size)
        good = np.where(valid, good, 0.0)
        best = np.argmax(good, axis=0)
        cols = np.arange(good.shape[1])
        return good[best, cols], atomic[best, cols].astype(np.int64), accum[best, cols].astype(np.int64)
