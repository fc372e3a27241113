"""Meta-RL placement (after Yang et al.): which GPU type each rigid job runs on, learned to adapt to a new
workload from what the scheduler measures, not from a profile of every job on every type.

Gavel and ``rounds-las`` read each job's speed on every GPU type (a profile). This scheduler starts a new
cluster knowing none of them. Its **context** (:class:`SpeedContext`) is what it has measured so far: per
(model, GPU type), the mean log steps per second per GPU of the jobs that ran there, and how many did. The
context carries over from one episode of a workload to the next (adaptation), and grows inside an episode
as jobs run; nothing else about the workload is known to it.

Each round (:class:`~cluster_sim.policies.rigid_rounds.ScoredRounds`: rigid jobs, one (job, type) pair per
job, a running job keeps its GPUs unless a pair beats it by ``stay``) a (job, type) pair scores

    - log1p(attained GPU-hours)  +  w · f  +  v · tanh(W f + b)

Tiresias' least-attained-service order plus a small network over the pair's features :data:`FEATURES`:
the context's estimate of the job's model on the type relative to its best known type and relative to the
other jobs' (Gavel's comparative advantage), how uncertain that estimate is (measurements on the type, the
model's types not yet measured: where exploring pays), whether the job runs there now, the type's share of
the cluster, the load and the job's size and service. With ``w = v = 0`` it is type-blind LAS.

The weights are **meta-trained** (:mod:`marl.baselines.metaplace_train`) by evolution strategies over a
distribution of workloads (trace windows, GPU mixes, tenant mixes), each trial two consecutive episodes of
one workload that share a context (the first starts empty): the score rewards a policy that explores while
it knows little and exploits what it measured, i.e. that adapts (a context-conditioned policy, RL²-style,
rather than MAML: adaptation needs no gradient step, only the measurements a scheduler makes anyway).

No job's length is read: the speeds in the context are the running jobs' own measured rates.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.policies.rigid_rounds import ScoredRounds
from cluster_sim.protocol import SchedulerView
from marl.deploy.policy_files import atomic_folder, read_json, read_network_metadata, write_metadata

KIND = "metaplace"
FEATURES = (
    "known",
    "relative_speed",
    "advantage",
    "uncertainty",
    "types_unknown",
    "runs_here",
    "type_share",
    "load",
    "gpus",
    "attained",
)
WEIGHTS, CONTEXT = "weights.json", "context.json"
_H = 3600.0


class SpeedContext:
    """Measured speeds per (model, GPU type): the sum of log(steps/s per GPU) and the number of jobs measured.

    One measurement per job and type per episode (a job's rate on a type does not change while it runs)."""

    def __init__(self, table: dict[tuple[str, str], tuple[float, int]] | None = None) -> None:
        self.table: dict[tuple[str, str], list[float]] = {k: [float(s), int(c)] for k, (s, c) in (table or {}).items()}

    def observe(self, model: str, gpu_type: str, log_rate: float) -> None:
        cell = self.table.setdefault((model, gpu_type), [0.0, 0])
        cell[0] += float(log_rate)
        cell[1] += 1

    def estimate(self, model: str, gpu_type: str) -> tuple[float, int]:
        """(mean log rate per GPU, measurements); (0, 0) when never measured."""
        s, c = self.table.get((model, gpu_type), (0.0, 0))
        return (s / c if c else 0.0), int(c)

    def copy(self) -> SpeedContext:
        return SpeedContext({k: (s, c) for k, (s, c) in self.table.items()})

    def __len__(self) -> int:
        return len(self.table)

    def to_json(self) -> list[list[Any]]:
        return [[m, t, s, c] for (m, t), (s, c) in sorted(self.table.items())]

    @classmethod
    def from_json(cls, rows: list[list[Any]]) -> SpeedContext:
        return cls({(str(m), str(t)): (float(s), int(c)) for m, t, s, c in rows})


class MetaPlaceWeights:
    """The scoring network: ``linear`` (F,), ``w1`` (H, F), ``b1`` (H,), ``w2`` (H,), as one flat vector for
    evolution strategies (:meth:`flat` / :meth:`from_flat`)."""

    def __init__(self, linear: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray) -> None:
        self.linear, self.w1, self.b1, self.w2 = (np.asarray(a, dtype=np.float64) for a in (linear, w1, b1, w2))

    @classmethod
    def initial(cls, hidden: int, rng: np.random.Generator) -> MetaPlaceWeights:
        """Type-blind LAS (the output weights are zero), with random hidden features for the search to use."""
        f = len(FEATURES)
        return cls(np.zeros(f), rng.normal(0.0, 1.0 / np.sqrt(f), (hidden, f)), np.zeros(hidden), np.zeros(hidden))

    @property
    def hidden(self) -> int:
        return len(self.b1)

    def flat(self) -> np.ndarray:
        return np.concatenate([self.linear, self.w1.ravel(), self.b1, self.w2])

    @classmethod
    def from_flat(cls, x: np.ndarray, hidden: int) -> MetaPlaceWeights:
        f = len(FEATURES)
        a, b, c = f, f + hidden * f, f + hidden * f + hidden
        return cls(x[:a], x[a:b].reshape(hidden, f), x[b:c], x[c : c + hidden])

    def __call__(self, feats: np.ndarray) -> np.ndarray:
        """Scores of (..., F) features."""
        return feats @ self.linear + np.tanh(feats @ self.w1.T + self.b1) @ self.w2

    def to_json(self) -> dict[str, Any]:
        return {k: np.asarray(getattr(self, k)).tolist() for k in ("linear", "w1", "b1", "w2")}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> MetaPlaceWeights:
        return cls(*(np.asarray(doc[k], dtype=np.float64) for k in ("linear", "w1", "b1", "w2")))


def job_models(view: SchedulerView) -> list[str]:
    """What a job trains, as the context names it: its application, else its model."""
    names = view.jobs.models
    out = []
    for j in range(len(view.jobs)):
        app = view.application(j)
        out.append(app.name if app is not None else str(names[int(view.jobs.model[j])]))
    return out


class MetaPlaceScore:
    """The learned (job, GPU type) score over measured speeds (see the module doc), the ordering stage of
    :class:`MetaPlace`'s rounds. ``context``: the measurements it starts from (default: none), updated in
    place while ``adapt`` (False: frozen, the unadapted policy)."""

    def __init__(self, weights: MetaPlaceWeights, context: SpeedContext | None = None, adapt: bool = True) -> None:
        self.weights = weights
        self.context = context if context is not None else SpeedContext()
        self.adapt = adapt

    def reset(self, view: SchedulerView) -> None:
        self._models = job_models(view)
        self._measured: set[tuple[int, int]] = set()

    def features(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
        """(jobs, types, F) features of each pair; measures the running jobs first (``adapt``).

        Of ``rates`` (every job's speed on every type) only a running job's on its own type is read: what
        the scheduler measures. Which types a job fits on comes from their sizes (``rates > 0``)."""
        types = list(view.topo.gpu_types)
        asked = np.asarray(view.jobs.num_gpus[jobs], dtype=np.float64)
        if self.adapt:
            for i in np.flatnonzero(current >= 0).tolist():
                j, t = int(jobs[i]), int(current[i])
                if (j, t) not in self._measured and rates[i, t] > 0:
                    self._measured.add((j, t))
                    self.context.observe(self._models[j], types[t], float(np.log(rates[i, t] / asked[i])))
        n, nt = len(jobs), len(types)
        mu, cnt = np.zeros((n, nt)), np.zeros((n, nt))
        cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for i, j in enumerate(jobs.tolist()):
            m = self._models[j]
            if m not in cache:
                est = [self.context.estimate(m, t) for t in types]
                cache[m] = (np.array([e[0] for e in est]), np.array([e[1] for e in est], dtype=np.float64))
            mu[i], cnt[i] = cache[m]
        known = cnt > 0
        best = np.where(known, mu, -np.inf).max(axis=1, keepdims=True)
        rel = np.where(known, mu - np.where(np.isfinite(best), best, 0.0), 0.0)
        col_mean = np.where(known, rel, 0.0).sum(axis=0) / np.maximum(known.sum(axis=0), 1)
        adv = np.where(known, rel - col_mean[None, :], 0.0)
        topo = view.topo
        stype = np.asarray(topo.server_gpu_type)
        cap = np.array([topo.server_num_gpus[stype == t].sum() for t in range(nt)], dtype=np.float64)
        att = np.array([view.attained_service(int(j)) for j in jobs.tolist()]) / _H
        f = np.empty((n, nt, len(FEATURES)))
        f[..., 0] = known
        f[..., 1] = rel
        f[..., 2] = adv
        f[..., 3] = 1.0 / (1.0 + cnt)
        f[..., 4] = (~known).mean(axis=1, keepdims=True)
        f[..., 5] = current[:, None] == np.arange(nt)[None, :]
        f[..., 6] = (cap / max(cap.sum(), 1.0))[None, :]
        f[..., 7] = np.log(max(asked.sum(), 1.0) / max(cap.sum(), 1.0))
        f[..., 8] = (np.log2(np.maximum(asked, 1.0)) / 3.0)[:, None]
        f[..., 9] = np.log1p(att)[:, None]
        return f

    def __call__(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
        f = self.features(view, jobs, rates, current)
        return -f[..., 9] + self.weights(f)


class MetaPlace(ScoredRounds):
    """Rigid jobs on GPU types by :class:`MetaPlaceScore` in the scored rounds. Pass the same ``context`` to
    consecutive episodes to adapt across them."""

    ordering = "metaplace"

    def __init__(
        self,
        weights: MetaPlaceWeights,
        *,
        context: SpeedContext | None = None,
        adapt: bool = True,
        interval: float = 360.0,
        stay: float = 0.1,
        max_nodes: int = 16,
        seed: int = 0,
        name: str = KIND,
    ) -> None:
        score = MetaPlaceScore(weights, context, adapt)
        super().__init__(score, interval=interval, stay=stay, max_nodes=max_nodes, seed=seed, name=name)

    @property
    def context(self) -> SpeedContext:
        """The measurements so far (the scorer's)."""
        return self.scorer.context


def save_metaplace_policy(weights: MetaPlaceWeights, folder: str | Path, meta: dict[str, Any]) -> Path:
    """``weights.json`` and ``metadata.json`` (and ``context.json`` when ``meta['context']`` is a
    :class:`SpeedContext`), written atomically."""
    meta = dict(meta)
    context = meta.pop("context", None)
    extra = meta.pop("extra_files", [])
    with atomic_folder(folder) as tmp:
        (tmp / WEIGHTS).write_text(json.dumps(weights.to_json()) + "\n")
        write_metadata(tmp, KIND, {"features": list(FEATURES), "hidden": weights.hidden, **meta}, extra)
        if context is not None:
            (tmp / CONTEXT).write_text(json.dumps(context.to_json()) + "\n")
    return Path(folder)


def load_metaplace_weights(policy_dir: str | Path) -> tuple[MetaPlaceWeights, dict[str, Any]]:
    retrain = "retrain it with `marlsched train` and a metaplace config"
    meta = read_network_metadata(policy_dir, KIND, {"features": FEATURES}, retrain)
    return MetaPlaceWeights.from_json(read_json(Path(policy_dir) / WEIGHTS)), meta


def load_metaplace_policy(policy_dir: str | Path, *, name: str = KIND) -> MetaPlace:
    """The meta-trained placement policy in ``policy_dir`` as a cluster_sim scheduler (NumPy, no RLlib),
    starting from the folder's ``context.json`` when it has one (measurements of an earlier adaptation),
    else from nothing; it goes on measuring while it runs."""
    weights, meta = load_metaplace_weights(policy_dir)
    ctx_path = Path(policy_dir) / CONTEXT
    context = SpeedContext.from_json(read_json(ctx_path)) if ctx_path.is_file() else None
    interval, stay = float(meta.get("interval", 360.0)), float(meta.get("stay", 0.1))
    return MetaPlace(weights, context=context, interval=interval, stay=stay, name=name)


__all__ = [
    "FEATURES",
    "KIND",
    "MetaPlace",
    "MetaPlaceScore",
    "MetaPlaceWeights",
    "SpeedContext",
    "load_metaplace_policy",
    "load_metaplace_weights",
    "save_metaplace_policy",
]
