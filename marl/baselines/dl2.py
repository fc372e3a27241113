"""DL2 (Peng et al., IEEE TPDS 2021; a preprint in 2019): a policy network sizes elastic jobs in repeated small
steps, warm-started from an existing scheduler's decisions.

Every round (60 s, as the other elastic policies) the allocation starts from nothing and grows one step
at a time, as in the paper's inference loop: at each step the network looks at every active job and
chooses one to grow, or to stop. A step **admits** a job that holds nothing (its smallest GPU count) or
**grows** an admitted job by its next move, the GPU count past its current one that cuts its estimated
remaining time most per added GPU (one GPU, or more where the speed curve rises in steps). The loop ends
when the network stops or no job can take a step; the counts are then placed and carried out as by every
elastic policy (:class:`~cluster_sim.policies.elastic.ElasticPolicy`). The job model has no parameter
servers, so steps add GPUs (the paper's workers).

What the network sees per job (:data:`JOB_FEATURES`) is what a deployed scheduler knows and what the
scheduler it is warm-started from (:class:`~cluster_sim.policies.optimus_elastic.ElasticOptimus`, fitted,
no oracle) computes: the remaining time estimated from finished jobs of its application and tenant and
its own step times, the gain of its next step, the GPUs it holds and is given so far, attained service,
age. No job's own length is read.

The network (:class:`DL2Net`) scores each job with one shared MLP over the job's features and the pooled
features of all jobs, so one network fits any number of jobs (the paper's fixed-size input of J jobs
caps the jobs it can see); a stop score comes from the pooled features. **Optimus' decisions are one
rule over the same state** (:meth:`Allocation.teacher`: admit the fitting job of shortest estimated
remaining time, then grow the job whose next move gains most per GPU, until no move gains), so the warm
start imitates it step by step on the states the network itself visits (DAgger), then RL changes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.export import Dim

from cluster_sim.policies.optimus_elastic import ElasticOptimus
from cluster_sim.protocol import RUNNING, SchedulerView
from marl.deploy.policy_files import (
    load_network,
    read_network_metadata,
    save_network_folder,
    save_program,
)

KIND = "dl2"
JOB_FEATURES = (
    "admitted",
    "can_step",
    "profiled",
    "remaining_at_least",
    "remaining_now",
    "gain_share",
    "gain",
    "step_gpus",
    "given",
    "held",
    "step_within_held",
    "attained",
    "age",
)
GLOBAL_FEATURES = ("free_share", "jobs", "admitted_share")
_H = 3600.0
MAX_JOBS = 1 << 20  # the exported program's bound on the jobs of one decision (a round's queue and running jobs)


class DL2Net(nn.Module):
    """Scores every job's next step and the stop action.

    ``jobs``: (B, N, len(JOB_FEATURES)); ``glob``: (B, len(GLOBAL_FEATURES)); ``mask``: (B, N + 1), true
    where a job can take a step, and (last) where stopping is allowed (not before the round gave any GPU:
    a policy that always stops would run nothing). Returns (B, N + 1) logits, the last one stop's, -1e9
    where not allowed. A job's embedding depends on its own features only, so a step re-embeds only the jobs it
    changed (:class:`NumpyForward`).
    """

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        f, g = len(JOB_FEATURES), len(GLOBAL_FEATURES)
        self.embed = nn.Sequential(nn.Linear(f, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.score = nn.Sequential(nn.Linear(3 * hidden + g, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.stop = nn.Sequential(nn.Linear(2 * hidden + g, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, jobs: torch.Tensor, glob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.embed(jobs)  # (B, N, h)
        stop_ok = mask[:, -1:]
        mask = mask[:, :-1]
        m = mask.unsqueeze(2).to(h.dtype)
        mean = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        top = torch.where(mask.unsqueeze(2), h, torch.zeros_like(h)).max(1).values
        pooled = torch.cat([mean, top, glob], dim=1)  # (B, 2h + g)
        both = torch.cat([h, pooled.unsqueeze(1).expand(-1, h.shape[1], -1)], dim=2)
        logits = self.score(both).squeeze(2)
        logits = torch.cat([logits, self.stop(pooled)], dim=1)
        return torch.where(torch.cat([mask, stop_ok], dim=1), logits, torch.full_like(logits, -1e9))


class NumpyForward:
    """:meth:`DL2Net.forward` for one state in NumPy (float64), re-embedding only the jobs a step changed:
    a step costs tens of microseconds instead of a Torch call's hundreds, at hundreds of steps per round."""

    def __init__(self, net: Any) -> None:
        sd = {k: v.detach().double().numpy() for k, v in net.state_dict().items()}
        self.layers = {
            name: [(sd[f"{name}.0.weight"].T, sd[f"{name}.0.bias"]), (sd[f"{name}.2.weight"].T, sd[f"{name}.2.bias"])]
            for name in ("embed", "score", "stop")
        }
        self.h = np.zeros((0, sd["embed.0.bias"].shape[0]))

    def embed(self, feats: np.ndarray, rows: np.ndarray | None = None) -> None:
        """Embed all jobs (``rows`` None: a new round) or re-embed ``rows``."""
        (w0, b0), (w1, b1) = self.layers["embed"]
        x = feats if rows is None else feats[rows]
        h = np.maximum(np.maximum(x @ w0 + b0, 0.0) @ w1 + b1, 0.0)
        if rows is None:
            self.h = h
        else:
            self.h[rows] = h

    def logits(self, glob: np.ndarray, can: np.ndarray, stop_ok: bool) -> np.ndarray:
        h = self.h
        hm = h[can]
        mean = hm.sum(0) / max(len(hm), 1)
        top = hm.max(0) if len(hm) else np.zeros(h.shape[1])  # h >= 0: as the module's masked max
        pooled = np.concatenate([mean, top, glob])
        (v0, c0), (v1, c1) = self.layers["score"]
        k = h.shape[1]
        hidden = np.maximum(h @ v0[:k] + (pooled @ v0[k:] + c0), 0.0)
        logits = np.where(can, (hidden @ v1 + c1)[:, 0], -1e9)
        (u0, d0), (u1, d1) = self.layers["stop"]
        stop = np.maximum(pooled @ u0 + d0, 0.0) @ u1 + d1 if stop_ok else np.full(1, -1e9)
        return np.concatenate([logits, stop])


class Allocation:
    """One round's step-by-step allocation: every job's next step, the features, Optimus' choice. A step
    changes one job's count and the GPUs left, so only that job and the jobs whose next step no longer
    fits are recomputed (:meth:`apply` returns them)."""

    def __init__(
        self,
        seconds: np.ndarray,
        valid: np.ndarray,
        lo: np.ndarray,
        profiled: np.ndarray,
        *,
        total: int,
        held: np.ndarray,
        attained: np.ndarray,
        age: np.ndarray,
        arrival: np.ndarray,
        cap: np.ndarray | None = None,
    ) -> None:
        n, width = seconds.shape
        cols = np.arange(width)
        if cap is not None:
            valid = valid & (cols[None, :] <= cap[:, None])
        self.valid, self.lo, self.profiled, self.held = valid, lo, profiled, held
        self.seconds = np.where(valid, seconds, np.inf)
        self.counts = np.zeros(n, dtype=np.int64)
        self.free = int(total)
        self.total = int(total)
        self.cols = cols
        # every move's gain per added GPU, from every count (as greedy_counts); growth only for profiled jobs
        step = cols[None, None, :] - cols[None, :, None]
        with np.errstate(invalid="ignore"):
            table = (self.seconds[:, :, None] - self.seconds[:, None, :]) / np.maximum(step, 1)
        ok = valid[:, None, :] & (step > 0) & ~np.isnan(table) & profiled[:, None, None]
        self.table = np.where(ok, table, -np.inf)
        self.key = np.where(profiled, self.seconds[np.arange(n), lo], -1.0)
        known = profiled & np.isfinite(self.key)
        self.order = np.empty(n, dtype=np.int64)
        self.order[np.lexsort((arrival, self.key))] = np.arange(n)  # Optimus' admission order
        self.to = np.zeros(n, dtype=np.int64)
        self.gain = np.zeros(n)
        self.can = np.zeros(n, dtype=bool)
        self.feats = np.zeros((n, len(JOB_FEATURES)))
        self.feats[:, 2] = profiled
        self.feats[:, 3] = np.log1p(np.where(known, self.key, 0.0) / _H) / 5.0
        self.feats[:, 9] = np.log2(1 + held) / 6.0
        self.feats[:, 11] = np.log1p(attained / _H) / 6.0
        self.feats[:, 12] = np.log1p(age / _H) / 5.0
        self._update(np.arange(n))

    def _update(self, rows: np.ndarray) -> None:
        """Next step and features of ``rows`` at the current counts and GPUs left."""
        c = self.counts[rows]
        admit = c == 0
        fits = (self.cols[None, :] - c[:, None]) <= self.free
        row = np.where(fits, self.table[rows, c], -np.inf)
        to = row.argmax(axis=1)
        gain = row[np.arange(len(rows)), to]
        lo = self.lo[rows]
        can = np.where(admit, (lo <= self.free) & self.valid[rows, lo], gain > 0)
        to = np.where(admit, lo, to)
        gain = np.where(admit | ~np.isfinite(gain), 0.0, np.maximum(gain, 0.0))
        self.to[rows], self.gain[rows], self.can[rows] = to, gain, can
        now = self.seconds[rows, np.maximum(c, lo)]
        now = np.where(self.profiled[rows] & np.isfinite(now), now, 0.0)
        f = self.feats
        f[rows, 0] = ~admit
        f[rows, 1] = can
        f[rows, 4] = np.log1p(now / _H) / 5.0
        f[rows, 5] = np.minimum(np.where(now > 0, gain / np.maximum(now, 1e-9), 0.0), 1.0)
        f[rows, 6] = np.log1p(gain / _H) / 3.0
        f[rows, 7] = (to - c) / 8.0
        f[rows, 8] = np.log2(1 + c) / 6.0
        f[rows, 10] = (to <= self.held[rows]) & (self.held[rows] > 0)

    def glob(self) -> np.ndarray:
        n = len(self.counts)
        return np.array([self.free / max(self.total, 1), np.log1p(n) / 5.0, (self.counts > 0).mean() if n else 0.0])

    def teacher(self) -> int:
        """Optimus' next step (the job index; ``len(jobs)``: stop): admissions in order of estimated
        remaining time while any fits, then the largest gain per GPU (ties to the lower index)."""
        admit = self.can & (self.counts == 0)
        if admit.any():
            idx = np.flatnonzero(admit)
            return int(idx[np.argmin(self.order[idx])])
        grow = self.can & (self.counts > 0)
        if grow.any():
            return int(np.argmax(np.where(grow, self.gain, -np.inf)))
        return len(self.counts)

    def apply(self, i: int) -> np.ndarray:
        """Take job ``i``'s next step; the jobs whose step or features changed."""
        self.free -= int(self.to[i]) - int(self.counts[i])
        self.counts[i] = int(self.to[i])
        stale = np.flatnonzero(self.can & (self.to - self.counts > self.free))
        rows = np.union1d(stale, [i]).astype(np.int64)
        self._update(rows)
        return rows


class DL2(ElasticOptimus):
    """The DL2 scheduler around a :class:`DL2Net` (or its TorchScript export), run by :class:`NumpyForward`.

    ``mode``: ``"greedy"`` (the network's best step), ``"sample"`` (steps drawn from its softmax, seeded),
    ``"teacher"`` (Optimus' steps: the warm start's expert). ``record``: keep (features, global features,
    mask, chosen step, Optimus' step, time) of a random ``keep`` share of the steps, and only within
    ``window`` (start, end) of simulated time when given (greedy outside it, so rollouts of one window share
    their state there).
    """

    ordering = "dl2"

    def __init__(
        self,
        net: Any,
        *,
        mode: str = "greedy",
        record: bool = False,
        keep: float = 1.0,
        window: tuple[float, float] | None = None,
        seed: int = 0,
        name: str = KIND,
        **kw: Any,
    ) -> None:
        if mode not in ("greedy", "sample", "teacher"):
            raise ValueError(f"mode must be greedy, sample or teacher, got {mode!r}")
        super().__init__(oracle=False, seed=seed, name=name, **kw)
        self.net, self.mode, self.record, self.keep, self.window = net, mode, bool(record), float(keep), window
        self.seed = int(seed)
        self.steps: list[tuple[np.ndarray, np.ndarray, np.ndarray, int, int, float]] = []
        self.agree = [0, 0]  # steps where the chosen step was Optimus', steps
        self._fast = NumpyForward(net)

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self.rng = np.random.default_rng(self.seed)
        self.keep_rng = np.random.default_rng(self.seed + 7_777)
        self.steps = []
        self.agree = [0, 0]

    def allocate(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, list]:
        seconds, valid, lo, profiled = self.per_round(view, jobs, lambda: self.estimates(view, jobs))
        attained = np.array([view.attained_service(int(j)) for j in jobs])
        held = np.array([len(view.placement(int(j))) if view.job_state(int(j)) == RUNNING else 0 for j in jobs])
        alloc = Allocation(
            seconds, valid, lo, profiled,
            total=int(view.topo.num_gpus), held=held, attained=attained,
            age=view.now - view.jobs.arrival[jobs], arrival=view.jobs.arrival[jobs], cap=self.cap,
        )  # fmt: skip
        inside = self.window is None or self.window[0] <= view.now < self.window[1]
        mode = self.mode if inside else "greedy"
        record = self.record and inside and self.cap is None
        if mode != "teacher":
            self._fast.embed(alloc.feats)
        while alloc.can.any():
            best = alloc.teacher()
            glob = alloc.glob()
            stop_ok = bool(alloc.counts.any())
            pick = best if mode == "teacher" else self._choose(glob, alloc.can, stop_ok, sample=mode == "sample")
            self.agree[0] += int(pick == best)
            self.agree[1] += 1
            if record and self.keep_rng.random() < self.keep:
                self.steps.append(
                    (
                        alloc.feats.astype(np.float32),
                        glob.astype(np.float32),
                        np.append(alloc.can, stop_ok),
                        pick,
                        best,
                        view.now,
                    )
                )
            if pick == len(jobs):
                break
            rows = alloc.apply(pick)
            if mode != "teacher":
                self._fast.embed(alloc.feats, rows)
        return alloc.counts, [None] * len(jobs)

    def _choose(self, glob: np.ndarray, can: np.ndarray, stop_ok: bool, *, sample: bool) -> int:
        logits = self._fast.logits(glob, can, stop_ok)
        if not sample:
            return int(np.argmax(logits))
        p = np.exp(logits - logits.max())
        return int(self.rng.choice(len(p), p=p / p.sum()))


def pad_steps(steps: list[tuple]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(jobs, glob, mask) tensors of recorded steps ``(features, glob, mask, ...)`` with different job
    counts, padded to the largest (padding masked off)."""
    n = max(len(st[0]) for st in steps)
    feats = np.zeros((len(steps), n, len(JOB_FEATURES)), dtype=np.float32)
    mask = np.zeros((len(steps), n + 1), dtype=bool)
    for k, st in enumerate(steps):
        m = len(st[0])
        feats[k, :m] = st[0]
        mask[k, :m] = st[2][:-1]
        mask[k, n] = st[2][-1]
    glob = np.stack([st[1] for st in steps]).astype(np.float32)
    return torch.from_numpy(feats), torch.from_numpy(glob), torch.from_numpy(mask)


def _example(batch: int, jobs: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random inputs of :class:`DL2Net` (each state with its first job allowed a step)."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, jobs + 1, generator=gen) > 0.3
    mask[:, 0] = True
    return (
        torch.rand(batch, jobs, len(JOB_FEATURES), generator=gen),
        torch.rand(batch, len(GLOBAL_FEATURES), generator=gen),
        mask,
    )


def save_program_of(net: DL2Net, path: Path) -> float:
    """``net`` as a ``torch.export`` program at ``path``, free in the batch and the job count; its largest
    difference from ``net`` on inputs of other sizes."""
    # the mask has a column more than the jobs (stop): torch 2.3 derives that column from a bounded count only
    b, n = Dim("batch", min=1), Dim("jobs", min=1, max=MAX_JOBS)
    return save_program(net, _example(2, 6, 0), ({0: b, 1: n}, {0: b}, {0: b, 1: n + 1}), path, _example(3, 11, 1))


def save_dl2_policy(net: DL2Net, folder: str | Path, meta: dict) -> Path:
    """``policy.pt`` (TorchScript), the same network as a ``torch.export`` program (``policy.pt2``) and
    ``metadata.json``, written atomically; each export's largest difference from the module is recorded."""
    doc = {"job_features": list(JOB_FEATURES), "global_features": list(GLOBAL_FEATURES), **meta}
    args = _example(2, 6, 0)
    save_network_folder(net, folder, KIND, doc, args, save_program_of, mask=args[2],
                        extra_files=meta.get("extra_files", []))  # fmt: skip
    return Path(folder)


def load_dl2_policy(policy_dir: str | Path, *, name: str = KIND) -> DL2:
    """The DL2 policy exported in ``policy_dir`` as a cluster_sim scheduler (TorchScript, or its
    ``torch.export`` program where TorchScript cannot be read; no RLlib)."""
    columns = {"job_features": JOB_FEATURES, "global_features": GLOBAL_FEATURES}
    read_network_metadata(policy_dir, KIND, columns, "retrain it with `marlsched train` and a DL2 config")
    return DL2(load_network(policy_dir), name=name)


def network_of(meta: dict[str, Any]) -> tuple[DL2Net, Callable[[DL2Net, Path], float]]:
    """The untrained network a folder's metadata describes and the writer of its program (export-program)."""
    return DL2Net(hidden=int(meta["hidden"])), save_program_of


__all__ = [
    "DL2",
    "KIND",
    "Allocation",
    "DL2Net",
    "NumpyForward",
    "load_dl2_policy",
    "network_of",
    "pad_steps",
    "save_dl2_policy",
    "save_program_of",
]
