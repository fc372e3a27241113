"""Learned interference predictor: a permutation-invariant set model over a job's neighbours.

For a job ``j`` on GPU type ``g`` with neighbours ``(n_k, level_k)``:

    factor = sigmoid(rho([x_j, x_g, Σ_k phi([x_j, x_{n_k}, x_g, onehot(level_k)])]))

(DeepSets, Zaheer et al., NeurIPS'17). The sum makes the prediction independent of neighbour order and
defined for any number of neighbours; conditioning ``phi`` on the job lets a neighbour's effect depend on
who suffers it. A job without neighbours has factor 1 by definition and never reaches the network.

The model is a small ensemble whose members are evaluated together as batched matrix products, so
inference over thousands of queries is a handful of BLAS calls. Inputs are the numeric features of
:mod:`interference.features`, standardised with statistics stored alongside the weights.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch import nn

from interference.base import CoLocation
from interference.features import (
    GPU_FEATURES,
    JOB_FEATURES,
    NUM_LEVELS,
    JobColumns,
    gpu_features,
    gpu_table,
    job_features,
    level_onehot,
)
from interference.queries import FactorCache, flatten

FORMAT = "marlsched-interference-set-model/1"

# Below this many neighbour rows a call runs on one thread: the simulator asks a few queries per event, and
# several intra-op threads then cost more in wake-ups than they save (7x slower on a busy 2-core machine).
SMALL_BATCH = 2048


@contextlib.contextmanager
def _one_thread_if(small: bool) -> Iterator[None]:
    before = torch.get_num_threads()
    if not small or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class NetConfig:
    hidden: int = 32
    members: int = 4
    activation: str = "silu"


class _EnsembleLinear(nn.Module):
    """``members`` independent linear layers, weight (members, in, out)."""

    def __init__(self, members: int, fan_in: int, fan_out: int):
        super().__init__()
        bound = 1.0 / np.sqrt(fan_in)
        self.weight = nn.Parameter(torch.empty(members, fan_in, fan_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(members, 1, fan_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (K, N, in) -> (K, N, out)
        return torch.baddbmm(self.bias, x, self.weight)

    def shared(self, x: torch.Tensor, rows: slice = slice(None), bias: bool = True) -> torch.Tensor:
        """All members on one input (N, in'), using weight rows ``rows``: one wide GEMM -> (K, N, out)."""
        k, _, out = self.weight.shape
        w = self.weight[:, rows, :].permute(1, 0, 2).reshape(-1, k * out)
        y = torch.addmm(self.bias.reshape(1, k * out), x, w) if bias else x @ w
        return y.view(x.shape[0], k, out).transpose(0, 1)


_ACTIVATIONS = {"silu": nn.functional.silu, "relu": torch.relu}
_ACTIVATIONS_INPLACE = {"silu": lambda x: nn.functional.silu(x, inplace=True), "relu": torch.relu_}


class SetInterferenceNet(nn.Module):
    """Ensemble of DeepSets members; returns per-member logits of shape (members, queries)."""

    def __init__(self, cfg: NetConfig):
        super().__init__()
        j, g, h, k = len(JOB_FEATURES), len(GPU_FEATURES), cfg.hidden, cfg.members
        if cfg.activation not in _ACTIVATIONS:
            raise ValueError(f"unknown activation {cfg.activation!r}; choose one of {', '.join(_ACTIVATIONS)}")
        self.cfg = cfg
        self.ctx_dim = j + g
        self.phi1 = _EnsembleLinear(k, 2 * j + g + NUM_LEVELS, h)
        self.phi2 = _EnsembleLinear(k, h, h)
        self.rho1 = _EnsembleLinear(k, j + g + h, h)  # rows: [job, gpu] context, then pooled neighbours
        self.rho2 = _EnsembleLinear(k, h, 1)
        self._act = _ACTIVATIONS[cfg.activation]
        self._act_inplace = _ACTIVATIONS_INPLACE[cfg.activation]

    def act(self, x: torch.Tensor) -> torch.Tensor:
        """The activation; in place when no gradient is needed (inference is memory-bound at 10k pairs)."""
        return self._act(x) if torch.is_grad_enabled() else self._act_inplace(x)

    def forward(
        self,
        job_x: torch.Tensor,  # (Q, J) standardised
        gpu_x: torch.Tensor,  # (Q, G) standardised
        nbr_x: torch.Tensor,  # (M, J) standardised
        nbr_level: torch.Tensor,  # (M, L) one-hot
        nbr_query: torch.Tensor,  # (M,) int64 in [0, Q)
        one_each: bool = False,  # every query has exactly one neighbour and nbr_query == arange(Q)
    ) -> torch.Tensor:
        q = job_x.shape[0]
        if one_each:
            pair_in = torch.cat([job_x, nbr_x, gpu_x, nbr_level], dim=1)
        else:
            pair_in = torch.cat([job_x[nbr_query], nbr_x, gpu_x[nbr_query], nbr_level], dim=1)
        h = self.act(self.phi2(self.act(self.phi1.shared(pair_in))))  # (K, M, H)
        pooled = h if one_each else h.new_zeros(h.shape[0], q, h.shape[2]).index_add_(1, nbr_query, h)
        ctx = torch.cat([job_x, gpu_x], dim=1)
        z = self.rho1.shared(ctx, slice(0, self.ctx_dim))
        z = torch.baddbmm(z, pooled, self.rho1.weight[:, self.ctx_dim :, :])
        return self.rho2(self.act(z))[..., 0]


@dataclass(frozen=True)
class Standardiser:
    """Feature standardisation, with inputs first clipped to the range seen in training.

    Clipping keeps a job type far outside the training data (a new family) from being extrapolated by
    the network's linear tails: it is treated like the most extreme job the model has seen.
    """

    job_mean: tuple[float, ...]
    job_std: tuple[float, ...]
    gpu_mean: tuple[float, ...]
    gpu_std: tuple[float, ...]
    job_lo: tuple[float, ...] | None = None
    job_hi: tuple[float, ...] | None = None

    @staticmethod
    def fit(job_x: np.ndarray, gpu_x: np.ndarray, clip: bool = True) -> Standardiser:
        return Standardiser(
            job_mean=tuple(job_x.mean(0).tolist()),
            job_std=tuple(np.maximum(job_x.std(0), 1e-3).tolist()),
            gpu_mean=tuple(gpu_x.mean(0).tolist()),
            gpu_std=tuple(np.maximum(gpu_x.std(0), 1e-3).tolist()),
            job_lo=tuple(job_x.min(0).tolist()) if clip else None,
            job_hi=tuple(job_x.max(0).tolist()) if clip else None,
        )

    @cached_property
    def _job(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        lo = None if self.job_lo is None else np.asarray(self.job_lo, np.float32)
        hi = None if self.job_hi is None else np.asarray(self.job_hi, np.float32)
        return np.asarray(self.job_mean, np.float32), np.asarray(self.job_std, np.float32), lo, hi

    @cached_property
    def _gpu(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.gpu_mean, np.float32), np.asarray(self.gpu_std, np.float32)

    def job(self, x: np.ndarray) -> torch.Tensor:
        m, s, lo, hi = self._job
        if lo is not None:
            x = np.clip(x, lo, hi)
        return torch.from_numpy(((x - m) / s).astype(np.float32, copy=False))

    def gpu(self, x: np.ndarray) -> torch.Tensor:
        m, s = self._gpu
        return torch.from_numpy(((x - m) / s).astype(np.float32, copy=False))


class LearnedInterference:
    """:class:`~interference.base.InterferenceModel` backed by :class:`SetInterferenceNet`."""

    name = "learned"

    def __init__(self, net: SetInterferenceNet, standardiser: Standardiser, meta: dict | None = None):
        self.net = net.eval()
        self.standardiser = standardiser
        self.meta = dict(meta or {})
        self._cache = FactorCache(self._compute)

    # -- inference ---------------------------------------------------------------------------------
    def predict_flat(
        self,
        job_feats: np.ndarray,
        gpu_feats: np.ndarray,
        nbr_feats: np.ndarray,
        nbr_level: np.ndarray,
        nbr_query: np.ndarray,
    ) -> np.ndarray:
        """Factors for Q queries from raw (unstandardised) features; queries without neighbours get 1."""
        out = np.ones(len(job_feats), dtype=np.float64)
        if len(nbr_feats) == 0:
            return out
        s = self.standardiser
        nbr_query = np.asarray(nbr_query, dtype=np.int64)
        one_each = len(nbr_query) == len(out) and bool((nbr_query == np.arange(len(out))).all())
        with torch.inference_mode(), _one_thread_if(len(nbr_feats) < SMALL_BATCH):
            z = self.net(
                s.job(job_feats),
                s.gpu(gpu_feats),
                s.job(nbr_feats),
                torch.from_numpy(level_onehot(nbr_level)),
                torch.from_numpy(nbr_query),
                one_each=one_each,
            )
            pred = torch.sigmoid(z).mean(0).numpy().astype(np.float64)
        if one_each:
            return pred
        has = np.bincount(nbr_query, minlength=len(out)) > 0
        out[has] = pred[has]
        return out

    def predict_pairs(self, job: JobColumns, other: JobColumns, level: np.ndarray) -> np.ndarray:
        """Factor of each ``job[i]`` with the single neighbour ``other[i]`` at ``level[i]`` (vectorised)."""
        n = len(job)
        gpu = gpu_table(job.gpu_type)
        same_gpu = other.gpu_type is job.gpu_type or np.array_equal(other.gpu_type, job.gpu_type)
        return self.predict_flat(
            job_features(job, gpu),
            gpu_features(job.gpu_type, gpu),
            job_features(other, gpu if same_gpu else None),
            np.asarray(level),
            np.arange(n, dtype=np.int64),
        )

    def throughput_factors(self, queries: Sequence[CoLocation]) -> np.ndarray:
        return self._cache(queries)

    def _compute(self, queries: list[CoLocation]) -> np.ndarray:
        flat = flatten(queries)
        feats = job_features(flat.columns())
        gpu = gpu_features(np.array([d.gpu_type for d in flat.descriptors]))
        return self.predict_flat(feats[flat.job], gpu[flat.job], feats[flat.nbr], flat.nbr_level, flat.nbr_query)

    # -- persistence -------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """One file: state dict plus JSON metadata (features, standardisation, architecture, training)."""
        path = Path(path)
        meta = {
            **self.meta,
            "format": FORMAT,
            "net": asdict(self.net.cfg),
            "standardiser": asdict(self.standardiser),
            "job_features": list(JOB_FEATURES),
            "gpu_features": list(GPU_FEATURES),
        }
        payload = {"meta_json": json.dumps(meta, sort_keys=True), "state_dict": self.net.state_dict()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(payload, tmp)
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
            payload = torch.load(path, map_location="cpu", weights_only=True)
            meta = json.loads(payload["meta_json"])
            state = payload["state_dict"]
        except Exception as e:  # torch raises several types for files that are not its own
            raise ValueError(f"{path}: not a marlsched interference model ({type(e).__name__}: {e})") from None
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: model format {meta.get('format')!r}, expected {FORMAT!r}")
        if meta.get("job_features") != list(JOB_FEATURES) or meta.get("gpu_features") != list(GPU_FEATURES):
            raise ValueError(f"{path}: trained on different features than this version computes; retrain it")
        net = SetInterferenceNet(NetConfig(**meta["net"]))
        net.load_state_dict(state)
        std = Standardiser(**{k: None if v is None else tuple(v) for k, v in meta["standardiser"].items()})
        return LearnedInterference(net, std, meta)
