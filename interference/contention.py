"""Parametric contention models for co-locations that no table measured.

Three mechanisms, one per :class:`~interference.base.Sharing` level. Each is a function of descriptor
facts only, vectorised over columns, and returns a throughput factor in (0, 1].

GPU (space sharing, two jobs on one GPU)
    Used only for pairs absent from Gavel's table. A logistic model in the log of each job's achieved
    fraction of peak FLOP/s and steps per second, ``logit f = θ·[1, log u_i, log u_j, log r_i, log r_j]``,
    least-squares fitted to Gavel's 1,952 feasible single-GPU measurements (all three GPU types; see
    :func:`fit_gpu_share`). It explains little (MAE 0.123 against 0.144 for the mean): how two jobs share
    a GPU depends on kernel-level behaviour that descriptors do not show. That is why measured pairs always
    take precedence.

SERVER (different GPUs of one server: PCIe root complex, host memory bandwidth, CPU)
    A job's host pressure is ``p = x² / (x² + h²)`` with ``x`` its gradient traffic (2 x fp32 parameters
    per step, :func:`~interference.features.param_traffic_gbs`) as a fraction of the GPU's PCIe link and
    ``h = SERVER_HALF_PRESSURE``. Job ``i`` next to neighbours ``k`` keeps
    ``1 - SERVER_MAX_SLOWDOWN · p_i · min(1, Σ_k p_k)``: a data-hungry job suffers from data-hungry
    neighbours, and the host's capacity bounds the total. Calibration: Gandiva (Xiao et al., OSDI'18, §3)
    reports that two language-model jobs on separate GPUs of one server each slow down by 19%, while
    ResNet-50 next to a language model does not slow down. With Gavel's LM (batch 20) on V100 the
    constants give 19% for LM+LM and about 1% for ResNet-50 (batch 64) next to LM; jobs that move little
    data lose well under 5%, and no job loses more than ``SERVER_MAX_SLOWDOWN`` (22%).

UPLINK (different servers whose traffic crosses one oversubscribed uplink)
    A job's communication share is ``c = t_comm / (t_comm + t_step)`` with ``t_comm`` its all-reduce time
    at ``INTER_SERVER_GBS`` (2 x fp32 gradients per step over a 100 Gb/s NIC) and ``t_step`` its solo step
    time. While another job communicates, two flows fair-share the link and job ``i``'s communication
    runs at half speed; with random phase alignment a neighbour communicates a fraction ``c_k`` of the time,
    so the expected step time grows by ``c_i · Σ_k c_k`` and ``f = 1 / (1 + UPLINK_SHARE_LOSS · c_i ·
    min(UPLINK_MAX_SHARERS, Σ_k c_k))``. CASSINI (Rajasekaran et al., NSDI'24) measured that interleaving
    the communication phases of jobs sharing links improves average completion time by up to 1.6x, the
    same order as this model's worst case for two communication-bound jobs (1 / (1 + 1) at c = 1).
    Compute-bound jobs (ResNet-50: c ≈ 0.04) are barely affected; an LSTM LM at 65 steps/s (c ≈ 0.5)
    loses about 22% next to another.
"""

from __future__ import annotations

import numpy as np

from interference.features import JobColumns, frac_peak_flops, gpu_table, param_traffic_gbs, steps_per_s

# GPU level: logistic coefficients on [1, log u_i, log u_j, log r_i, log r_j], fitted by fit_gpu_share on
# Gavel's simulation_throughputs.json (scale factor 1, feasible pairs, K80+P100+V100).
GPU_SHARE_COEF = np.array([-0.0751, 0.0176, -0.0133, -0.0542, 0.2751])

SERVER_HALF_PRESSURE = 0.25  # gradient traffic (fraction of PCIe bandwidth) at which host pressure is 1/2
SERVER_MAX_SLOWDOWN = 0.22  # slowdown of a saturating job among saturating neighbours

INTER_SERVER_GBS = 12.5  # 100 Gb/s NIC
UPLINK_SHARE_LOSS = 1.0  # two flows fair-share the bottleneck: communication at half speed while both talk
UPLINK_MAX_SHARERS = 3.0  # cap on Σ c_k: beyond a few concurrent flows the NIC, not the uplink, limits

_EPS = 1e-6


def gpu_share_design(job: JobColumns, other: JobColumns) -> np.ndarray:
    """(N, 5) regressors of the GPU-sharing model."""
    gi, go = gpu_table(job.gpu_type), gpu_table(other.gpu_type)
    return np.stack(
        [
            np.ones(len(job)),
            np.log(frac_peak_flops(job, gi) + _EPS),
            np.log(frac_peak_flops(other, go) + _EPS),
            np.log(steps_per_s(job) + _EPS),
            np.log(steps_per_s(other) + _EPS),
        ],
        axis=1,
    )


def gpu_share_factor(job: JobColumns, other: JobColumns, coef: np.ndarray = GPU_SHARE_COEF) -> np.ndarray:
    """Throughput factor of ``job`` sharing its GPU with ``other`` (parametric, for unmeasured pairs)."""
    z = gpu_share_design(job, other) @ coef
    return 1.0 / (1.0 + np.exp(-z))


def fit_gpu_share(job: JobColumns, other: JobColumns, target: np.ndarray, iters: int = 200) -> np.ndarray:
    """Least-squares fit of the logistic GPU-sharing coefficients (Gauss-Newton with damping)."""
    x = gpu_share_design(job, other)
    coef = np.zeros(x.shape[1])
    lam = 1e-3
    for _ in range(iters):
        f = 1.0 / (1.0 + np.exp(-(x @ coef)))
        r = f - target
        jac = x * (f * (1.0 - f))[:, None]
        step = np.linalg.solve(jac.T @ jac + lam * np.eye(x.shape[1]), jac.T @ r)
        coef = coef - step
        if np.abs(step).max() < 1e-10:
            break
    return coef


def host_pressure(cols: JobColumns) -> np.ndarray:
    """Share of a server's host resources (PCIe, host memory) a job keeps busy, in [0, 1)."""
    x = param_traffic_gbs(cols) / gpu_table(cols.gpu_type)["pcie_gbs"]
    return x**2 / (x**2 + SERVER_HALF_PRESSURE**2)


def server_factor(pressure: np.ndarray, neighbour_pressure_sum: np.ndarray) -> np.ndarray:
    """Throughput factor from host contention given the summed pressure of server neighbours."""
    return 1.0 - SERVER_MAX_SLOWDOWN * pressure * np.minimum(1.0, neighbour_pressure_sum)


def comm_share(cols: JobColumns) -> np.ndarray:
    """Fraction of a step a data-parallel job spends in inter-server all-reduce, in [0, 1)."""
    t_comm = 8.0 * cols.params_m * 1e6 / (INTER_SERVER_GBS * 1e9)
    t_step = 1.0 / np.maximum(steps_per_s(cols), _EPS)
    return t_comm / (t_comm + t_step)


def uplink_factor(share: np.ndarray, neighbour_share_sum: np.ndarray) -> np.ndarray:
    """Throughput factor from fair-sharing an uplink with neighbours communicating ``Σ c_k`` of the time."""
    return 1.0 / (1.0 + UPLINK_SHARE_LOSS * share * np.minimum(UPLINK_MAX_SHARERS, neighbour_share_sum))
