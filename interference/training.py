"""Training data and the training loop of the learned interference predictor.

Two sources of samples:

- Gavel's measured pairs: each feasible measurement gives two samples, "A next to B on one GPU" and
  "B next to A". Targets are normalised throughputs.
- Optional samples of the ground truth (``oracle_samples``): random jobs with one to seven neighbours at
  mixed levels (mostly SERVER and UPLINK), drawn from the job types of the training pairs and from
  random synthetic descriptors across GPU generations, labelled by :class:`GroundTruthInterference`.
  They teach the model the server and uplink levels and multi-neighbour composition that no table
  measured.

Every random choice flows from one ``numpy.random.Generator(PCG64(seed))`` and ``torch.manual_seed``, so a
seed fixes the model bit for bit (on the same machine and thread count).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch

from interference.base import CoLocation, JobDescriptor, Sharing
from interference.contention import fit_gpu_share
from interference.features import JobColumns, gpu_features, job_features
from interference.gavel_data import GavelPairs
from interference.gpu_specs import GPU_SPECS
from interference.ground_truth import GroundTruthInterference
from interference.learned import LearnedInterference, NetConfig, SetInterferenceNet, Standardiser
from interference.queries import flatten


@dataclass(frozen=True, eq=False)
class SampleSet:
    """Training samples as flat arrays (see :class:`~interference.queries.FlatQueries`) with targets."""

    job_x: np.ndarray  # (N, J) float32
    gpu_x: np.ndarray  # (N, G) float32
    nbr_x: np.ndarray  # (M, J) float32
    nbr_level: np.ndarray  # (M,) int64
    nbr_query: np.ndarray  # (M,) int64, sorted
    y: np.ndarray  # (N,) float32

    def __len__(self) -> int:
        return len(self.y)

    def subset(self, sel: np.ndarray) -> SampleSet:
        """Samples ``sel`` (indices), renumbered 0..len(sel)-1, with their neighbour rows."""
        sel = np.asarray(sel, dtype=np.int64)
        counts = np.bincount(self.nbr_query, minlength=len(self))
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        c = counts[sel]
        rows = np.repeat(starts[sel] - np.concatenate([[0], np.cumsum(c)[:-1]]), c) + np.arange(c.sum())
        return SampleSet(
            job_x=self.job_x[sel],
            gpu_x=self.gpu_x[sel],
            nbr_x=self.nbr_x[rows],
            nbr_level=self.nbr_level[rows],
            nbr_query=np.repeat(np.arange(len(sel), dtype=np.int64), c),
            y=self.y[sel],
        )

    @staticmethod
    def from_queries(queries: list[CoLocation], y: np.ndarray) -> SampleSet:
        flat = flatten(queries)
        feats = job_features(flat.columns())
        gpu = gpu_features(np.array([d.gpu_type for d in flat.descriptors]))
        order = np.argsort(flat.nbr_query, kind="stable")
        return SampleSet(
            job_x=feats[flat.job],
            gpu_x=gpu[flat.job],
            nbr_x=feats[flat.nbr[order]],
            nbr_level=flat.nbr_level[order],
            nbr_query=flat.nbr_query[order],
            y=np.asarray(y, dtype=np.float32),
        )


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


def synthetic_descriptors(rng: np.random.Generator, n: int) -> list[JobDescriptor]:
    """Random but plausible jobs on every known GPU generation: sizes, costs and speeds spanning the
    model zoo and beyond (0.5M-3B parameters, 1 MFLOP-1 TFLOP per sample, 1-5% to 60% of peak)."""
    gpus = list(GPU_SPECS.values())
    out = []
    for _ in range(n):
        spec = gpus[int(rng.integers(len(gpus)))]
        params = float(np.exp(rng.uniform(np.log(0.5), np.log(3000.0))))
        gflops = float(np.exp(rng.uniform(np.log(1e-3), np.log(1000.0))))
        batch = int(2 ** rng.integers(0, 14))
        amp = bool(rng.random() < 0.3)
        frac = float(np.exp(rng.uniform(np.log(0.01), np.log(0.6))))
        sps = min(frac * spec.fp32_tflops * 1e3 * (2.0 if amp else 1.0) / gflops, 2e5)
        out.append(JobDescriptor(params, gflops, batch, max(sps, 0.1), amp, spec.name, name=""))
    return out


def oracle_queries(
    truth: GroundTruthInterference,
    pool: list[JobDescriptor],
    n: int,
    rng: np.random.Generator,
    gpu_prob: float = 0.1,
) -> tuple[list[CoLocation], np.ndarray]:
    """``n`` random co-locations of jobs from ``pool`` labelled by ``truth``.

    One to seven neighbours; each is on the job's GPU with probability ``gpu_prob`` (at most two such),
    otherwise on another GPU of its server (5/9 of the rest) or behind a shared uplink (4/9). GPU and
    server neighbours run on the job's GPU type; uplink neighbours on any.
    """
    rest = 1.0 - gpu_prob
    level_p = [gpu_prob, rest * 5 / 9, rest * 4 / 9]
    by_gpu: dict[str, list[JobDescriptor]] = {}
    for d in pool:
        by_gpu.setdefault(d.gpu_type, []).append(d)
    queries: list[CoLocation] = []
    for _ in range(n):
        job = pool[int(rng.integers(len(pool)))]
        same = by_gpu[job.gpu_type]
        k = int(rng.integers(1, 8))
        levels = rng.choice(3, size=k, p=level_p)
        if (levels == 0).sum() > 2:
            levels[np.flatnonzero(levels == 0)[2:]] = 1
        nbrs = []
        for lv in levels:
            src = pool if lv == int(Sharing.UPLINK) else same
            nbrs.append((src[int(rng.integers(len(src)))], Sharing(int(lv))))
        queries.append(CoLocation(job, tuple(nbrs)))
    return queries, truth.throughput_factors(queries)


def fold_truth(pairs: GavelPairs) -> GroundTruthInterference:
    """A ground truth that knows only ``pairs`` (measured values and the GPU-sharing fit)."""
    queries, y, _ = gavel_queries(pairs)
    job = JobColumns.from_descriptors([q.job for q in queries])
    other = JobColumns.from_descriptors([q.neighbours[0][0] for q in queries])
    return GroundTruthInterference(pairs, gpu_share_coef=fit_gpu_share(job, other, y))


@dataclass(frozen=True)
class TrainConfig:
    """Defaults chosen by 5-fold random-split MAE on Gavel (members: 3 -> 0.0345, 4 -> 0.0325, 6 -> 0.0324;
    hidden 64, 6000 steps, lr 1e-2, weight decay 1e-3 or ReLU did not help; bootstrap bagging hurt). Oracle
    samples get a small weight and minibatch so that they teach the other levels without taking capacity
    from the measured pairs."""

    hidden: int = 32
    members: int = 4
    activation: str = "silu"
    steps: int = 3000
    lr: float = 3e-3
    weight_decay: float = 1e-4
    oracle_samples: int = 0
    oracle_batch: int = 256
    oracle_weight: float = 0.1
    oracle_gpu_prob: float = 0.1
    synthetic_jobs: int = 400
    min_scale_share: float = 0.5  # see fit_standardiser
    clip_features: bool = True  # clip inputs to the training range (see Standardiser)
    seed: int = 0


def build_training_set(
    pairs: GavelPairs, cfg: TrainConfig, rng: np.random.Generator
) -> tuple[SampleSet, SampleSet | None]:
    """Gavel samples of ``pairs`` plus ``cfg.oracle_samples`` ground-truth samples that know only them."""
    queries, y, _ = gavel_queries(pairs)
    gavel = SampleSet.from_queries(queries, y)
    if cfg.oracle_samples <= 0:
        return gavel, None
    truth = fold_truth(pairs)
    seen = sorted({q.job for q in queries}, key=lambda d: (d.gpu_type, d.name))
    pool = seen + synthetic_descriptors(rng, cfg.synthetic_jobs)
    oq, oy = oracle_queries(truth, pool, cfg.oracle_samples, rng, cfg.oracle_gpu_prob)
    return gavel, SampleSet.from_queries(oq, oy)


def fit_standardiser(gavel: SampleSet, oracle: SampleSet | None, cfg: TrainConfig) -> Standardiser:
    """Centre and scale on the measured samples, the region that needs resolution, but never narrower
    than ``cfg.min_scale_share`` of the spread of everything trained on (Gavel has no mixed-precision job
    and only three GPU types, so its own spread of those features is zero or tiny); clip to everything."""
    gj, gg = np.concatenate([gavel.job_x, gavel.nbr_x]), gavel.gpu_x
    if oracle is None:
        return Standardiser.fit(gj, gg, clip=cfg.clip_features)
    aj, ag = np.concatenate([gj, oracle.job_x, oracle.nbr_x]), np.concatenate([gg, oracle.gpu_x])
    both = Standardiser.fit(aj, ag, clip=cfg.clip_features)
    own = Standardiser.fit(gj, gg)
    k = cfg.min_scale_share
    return replace(
        both,
        job_mean=own.job_mean,
        gpu_mean=own.gpu_mean,
        job_std=tuple(max(a, k * b) for a, b in zip(own.job_std, both.job_std, strict=True)),
        gpu_std=tuple(max(a, k * b) for a, b in zip(own.gpu_std, both.gpu_std, strict=True)),
    )


def _tensors(s: SampleSet, std: Standardiser) -> tuple[torch.Tensor, ...]:
    onehot = torch.nn.functional.one_hot(torch.from_numpy(s.nbr_level), 3).float()
    return (
        std.job(s.job_x),
        std.gpu(s.gpu_x),
        std.job(s.nbr_x),
        onehot,
        torch.from_numpy(s.nbr_query),
        torch.from_numpy(s.y),
    )


def train_model(
    gavel: SampleSet,
    oracle: SampleSet | None,
    cfg: TrainConfig,
    progress: Callable[[int, float], None] | None = None,
    meta: dict | None = None,
) -> LearnedInterference:
    """Fit the set model: full Gavel set plus an oracle minibatch per step, MSE, AdamW, cosine schedule."""
    torch.manual_seed(cfg.seed)
    rng = np.random.Generator(np.random.PCG64(cfg.seed + 1))
    std = fit_standardiser(gavel, oracle, cfg)
    net = SetInterferenceNet(NetConfig(hidden=cfg.hidden, members=cfg.members, activation=cfg.activation))
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.steps)
    g = _tensors(gavel, std)
    t0 = time.perf_counter()
    one_each = len(gavel.nbr_query) == len(gavel) and bool((gavel.nbr_query == np.arange(len(gavel))).all())
    for step in range(cfg.steps):
        pred = torch.sigmoid(net(*g[:5], one_each=one_each))
        loss = ((pred - g[5]) ** 2).mean()
        if oracle is not None and len(oracle):
            sel = rng.integers(len(oracle), size=min(cfg.oracle_batch, len(oracle)))
            o = _tensors(oracle.subset(sel), std)
            loss = loss + cfg.oracle_weight * ((torch.sigmoid(net(*o[:5])) - o[5]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if progress is not None and (step % 250 == 0 or step == cfg.steps - 1):
            progress(step, loss.item())
    info = {
        "train_config": asdict(cfg),
        "train_samples": {"gavel": len(gavel), "oracle": 0 if oracle is None else len(oracle)},
        "train_seconds": round(time.perf_counter() - t0, 2),
        **(meta or {}),
    }
    return LearnedInterference(net.eval(), std, info)


def fit(
    pairs: GavelPairs, cfg: TrainConfig, progress: Callable[[int, float], None] | None = None
) -> LearnedInterference:
    """Build the training set from ``pairs`` (and the ground truth) and train; the CLI's ``train``."""
    rng = np.random.Generator(np.random.PCG64(cfg.seed))
    gavel, oracle = build_training_set(pairs, cfg, rng)
    return train_model(gavel, oracle, cfg, progress, meta={"data": pairs.source})
