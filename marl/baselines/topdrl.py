"""TopDRL (Ayadi et al., JPDC 2025): a learned job picker plus a closest-GPUs placement.

At every scheduling point the network looks at two images, each through its own convolutional branch
(the paper's multi-branch CNN, after DeepRM's image state):

- the **cluster image**: servers x GPU slots, with channels for a GPU being busy, present (servers with
  fewer than ``SLOTS`` GPUs are padded), the expected remaining time of the job holding it and its GPU
  type. Servers are rows in topology order (a rack's servers are adjacent), so a convolution along them
  sees fragmentation inside racks; an adaptive pooling makes one network fit any number of servers;
- the **queue image**: one row per visible waiting job (the ``slots`` oldest that fit in the free GPUs),
  with its GPU request, wait, expected run time, whether its tenant's history is known, and how close
  together its GPUs can be placed now (one server, one rack, or more).

It scores each visible job; the best (or, in training, a sample) starts on the free GPUs closest to each
other (:func:`cluster_sim.placement.closest_gpus`), and the pick repeats until no waiting job fits. Jobs
are rigid and never preempted, as in the paper.

No observation is derived from a job's own duration: expected times come from the run times of jobs that
already finished (:class:`~cluster_sim.policies.run_history.TenantHistory`, per tenant and GPU count), waits
and elapsed times from the clock. The paper states job run times in its image; a deployed scheduler does
not know them, so the history estimate takes their place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.export import Dim

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.protocol import Decision, SchedulerView, Start
from marl.deploy.policy_files import (
    load_network,
    read_network_metadata,
    save_network_folder,
    save_program,
)

KIND = "topdrl"
SLOTS = 8  # GPU slots per server row of the cluster image (servers with fewer are padded)
CLUSTER_CHANNELS = ("busy", "present", "occupant_remaining", "gpu_type")
JOB_FEATURES = (
    "log2_gpus",
    "share_of_free",
    "wait",
    "expected_run",
    "expected_gpu_time",
    "history_known",
    "span",
    "position",
)
GLOBAL_FEATURES = ("queue_length", "free_share", "fitting")
_H = 3600.0


class TopDRLNet(nn.Module):
    """Scores the visible waiting jobs from the cluster image and the queue image (two branches).

    ``cluster``: (B, channels x SLOTS, servers); ``glob``: (B, len(GLOBAL_FEATURES)); ``queue``:
    (B, K, len(JOB_FEATURES)); ``mask``: (B, K) true where a slot holds a job. Returns (B, K) logits,
    -1e9 on empty slots.
    """

    def __init__(self, hidden: int = 32, pooled: int = 8) -> None:
        super().__init__()
        c = len(CLUSTER_CHANNELS) * SLOTS
        self.cluster_branch = nn.Sequential(
            nn.Conv1d(c, hidden, 3, padding=1), nn.ReLU(), nn.Conv1d(hidden, hidden, 3, padding=1), nn.ReLU()
        )
        self.pool = nn.AdaptiveAvgPool1d(pooled)
        self.cluster_fc = nn.Sequential(nn.Linear(hidden * pooled + len(GLOBAL_FEATURES), 2 * hidden), nn.ReLU())
        self.queue_branch = nn.Sequential(
            nn.Conv1d(len(JOB_FEATURES), hidden, 1), nn.ReLU(), nn.Conv1d(hidden, hidden, 1), nn.ReLU()
        )
        self.head = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(
        self, cluster: torch.Tensor, glob: torch.Tensor, queue: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        c = self.pool(self.cluster_branch(cluster)).flatten(1)
        c = self.cluster_fc(torch.cat([c, glob], dim=1))  # (B, 2h)
        q = self.queue_branch(queue.transpose(1, 2)).transpose(1, 2)  # (B, K, h)
        both = torch.cat([q, c.unsqueeze(1).expand(-1, q.shape[1], -1)], dim=2)
        logits = self.head(both).squeeze(2)
        return torch.where(mask, logits, torch.full_like(logits, -1e9))


class Observer:
    """Builds TopDRL's two images from the view: what a deployed scheduler knows, nothing more."""

    def __init__(self, slots: int, min_history: int = 3) -> None:
        self.slots = int(slots)
        self.history = TenantHistory(min_history)
        self.min_history = int(min_history)

    def reset(self, view: SchedulerView) -> None:
        topo = view.topo
        self.history.reset(view)
        s = topo.num_servers
        cols = np.arange(SLOTS)
        idx = topo.server_first_gpu[:, None] + cols[None, :]
        self.present = cols[None, :] < np.minimum(topo.server_num_gpus, SLOTS)[:, None]
        self.gpu_index = np.where(self.present, idx, 0).astype(np.int64)
        ntypes = max(len(topo.gpu_types) - 1, 1)
        self.type_plane = np.repeat((np.asarray(topo.server_gpu_type, dtype=np.float32) / ntypes)[:, None], SLOTS, 1)
        self.server_rack = np.asarray(topo.server_rack)
        self.num_racks = topo.num_racks
        self.expected = np.zeros(len(view.jobs), dtype=np.float64)  # expected remaining s of running jobs
        self.num_servers = s

    def round_start(self, view: SchedulerView) -> None:
        """Learn from the jobs finished since the last round; estimate the running jobs' remaining time."""
        self.history.learn(view)
        running = np.asarray(view.running, dtype=np.int64)
        if len(running):
            self.expected[running] = self.history.expected_remaining(view, running)

    def started(self, job: int) -> None:
        self.expected[job] = float(self.history.residual(np.array([job]), np.zeros(1))[0])

    def observe(
        self, view: SchedulerView, pool: FreePool, jobs: np.ndarray, queue_length: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(cluster (C*SLOTS, servers), glob, queue (K, F), mask (K,)) float32/bool arrays for ``jobs``
        (at most ``slots``, oldest first)."""
        occupant = pool.gpu_job[self.gpu_index]
        busy = (occupant >= 0) & self.present
        remaining = np.where(busy, np.log1p(self.expected[np.maximum(occupant, 0)] / _H) / 5.0, 0.0)
        cluster = np.stack([busy, self.present, remaining, self.type_plane * self.present]).astype(np.float32)
        cluster = cluster.transpose(0, 2, 1).reshape(len(CLUSTER_CHANNELS) * SLOTS, self.num_servers)
        free = max(pool.num_free, 1)
        jw = view.jobs
        n = np.asarray(jw.num_gpus[jobs], dtype=np.float64)
        est = self.history.residual(jobs, np.zeros(len(jobs)))
        known = self.history.group_size(jobs) >= self.min_history
        server_max = int(pool.server_free[: self.num_servers].max(initial=0))
        rack_max = int(pool.rack_free[: self.num_racks].max(initial=0))
        span = np.where(n <= server_max, 0.0, np.where(n <= rack_max, 0.5, 1.0))
        k = self.slots
        queue = np.zeros((k, len(JOB_FEATURES)), dtype=np.float32)
        m = len(jobs)
        queue[:m] = np.stack(
            [
                np.log2(n) / 7.0,
                n / free,
                np.log1p(np.maximum(view.now - jw.arrival[jobs], 0.0) / _H) / 5.0,
                np.log1p(est / _H) / 5.0,
                np.log1p(est * n / _H) / 8.0,
                known.astype(np.float64),
                span,
                np.arange(m) / k,
            ],
            axis=1,
        )
        mask = np.zeros(k, dtype=bool)
        mask[:m] = True
        total = self.num_servers * SLOTS
        glob = np.array([np.log1p(queue_length) / 7.0, pool.num_free / total, np.log1p(m) / 3.0], dtype=np.float32)
        return cluster, glob, queue, mask


class TopDRL(PolicyScheduler):
    """The TopDRL scheduler around a scoring network (a :class:`TopDRLNet` or its TorchScript export).

    ``sample``: draw each pick from the softmax of the scores with ``seed`` (training rollouts) instead
    of taking the best; ``record``: keep every observation, pick and its time in :attr:`steps` (a pick
    among one fitting job is not a decision and is not kept). ``gpu_type`` as for the heuristics: on mixed
    GPUs each job gets one type, tried in that order.
    """

    ordering = KIND
    default_backfill = True

    def __init__(
        self,
        net: Any,
        *,
        slots: int = 10,
        placement: str = "closest-gpus",
        gpu_type: str = "any",
        sample: bool = False,
        record: bool = False,
        seed: int = 0,
        name: str = KIND,
    ) -> None:
        super().__init__(placement, seed=seed, name=name, gpu_type=gpu_type)
        if slots < 1:
            raise ValueError(f"TopDRL needs slots >= 1 (visible waiting jobs), got {slots}")
        self.net = net
        self.slots = int(slots)
        self.sample = bool(sample)
        self.record = bool(record)
        self.observer = Observer(self.slots)
        self.steps: list[tuple] = []

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self.observer.reset(view)
        self.steps = []

    def schedule(self, view: SchedulerView) -> list[Decision]:
        self.observer.round_start(view)
        return super().schedule(view)

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        num_gpus = view.jobs.num_gpus
        waiting = np.sort(queue)  # arrival order (job ids are arrival order)
        unplaceable = np.zeros(len(waiting), dtype=bool)  # does not fit one GPU type this round
        started = np.zeros(len(waiting), dtype=bool)
        starts: list[Decision] = []
        while True:
            fits = np.flatnonzero(~started & ~unplaceable & (num_gpus[waiting] <= pool.num_free))
            if not len(fits):
                return starts
            shown = fits[: self.slots]
            jobs = waiting[shown]
            pick = 0
            if len(jobs) > 1:
                obs = self.observer.observe(view, pool, jobs, len(waiting) - int(started.sum()))
                pick = self._choose(obs)
                if self.record:
                    self.steps.append((*obs, pick, view.now))
            j = int(jobs[pick])
            gpus = self.place(view, j, int(num_gpus[j]), pool)
            if gpus is None:
                unplaceable[shown[pick]] = True
                continue
            pool.take(gpus, j)
            started[shown[pick]] = True
            self.observer.started(j)
            starts.append(Start(j, gpus))

    def _choose(self, obs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> int:
        cluster, glob, queue, mask = obs
        with torch.no_grad():
            logits = self.net(
                torch.from_numpy(cluster)[None],
                torch.from_numpy(glob)[None],
                torch.from_numpy(queue)[None],
                torch.from_numpy(mask)[None],
            )[0]
        if not self.sample:
            return int(torch.argmax(logits))
        p = torch.softmax(logits.double(), 0).numpy()
        return int(self.rng.choice(len(p), p=p / p.sum()))


def _example(batch: int, servers: int, jobs: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Random inputs of :class:`TopDRLNet` (each queue with its first slot holding a job)."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, jobs, generator=gen) > 0.3
    mask[:, 0] = True
    return (
        torch.rand(batch, len(CLUSTER_CHANNELS) * SLOTS, servers, generator=gen),
        torch.rand(batch, len(GLOBAL_FEATURES), generator=gen),
        torch.rand(batch, jobs, len(JOB_FEATURES), generator=gen),
        mask,
    )


def save_program_of(net: TopDRLNet, path: Path) -> float:
    """``net`` as a ``torch.export`` program at ``path``, free in the batch, the servers and the visible jobs;
    its largest difference from ``net`` on inputs of other sizes."""
    b, s, k = Dim("batch", min=1), Dim("servers", min=1), Dim("jobs", min=1)
    dynamic = ({0: b, 2: s}, {0: b}, {0: b, 1: k}, {0: b, 1: k})
    return save_program(net, _example(2, 12, 5, 0), dynamic, path, _example(3, 40, 10, 1))


def save_topdrl_policy(net: TopDRLNet, folder: str | Path, meta: dict) -> Path:
    """``policy.pt`` (TorchScript, any cluster size), the same network as a ``torch.export`` program
    (``policy.pt2``) and ``metadata.json``, written atomically; each export's largest difference from the
    module is recorded."""
    doc = {
        "cluster_channels": list(CLUSTER_CHANNELS),
        "job_features": list(JOB_FEATURES),
        "global_features": list(GLOBAL_FEATURES),
        **meta,
    }
    args = _example(2, 12, 5, 0)
    extra = meta.get("extra_files", [])  # the files written beside the policy (progress, learning curve)
    save_network_folder(net, folder, KIND, doc, args, save_program_of, mask=args[3], extra_files=extra)
    return Path(folder)


def load_topdrl_policy(policy_dir: str | Path, *, name: str = KIND, gpu_type: str | None = None) -> TopDRL:
    """The TopDRL policy exported in ``policy_dir`` as a cluster_sim scheduler (TorchScript, or its
    ``torch.export`` program where TorchScript cannot be read; no RLlib)."""
    columns = {"cluster_channels": CLUSTER_CHANNELS, "job_features": JOB_FEATURES, "global_features": GLOBAL_FEATURES}
    meta = read_network_metadata(policy_dir, KIND, columns, "retrain it with `marlsched train` and a TopDRL config")
    net = load_network(policy_dir)
    return TopDRL(net, slots=int(meta["slots"]), gpu_type=gpu_type or meta.get("gpu_type", "any"), name=name)


def network_of(meta: dict[str, Any]) -> tuple[TopDRLNet, Callable[[TopDRLNet, Path], float]]:
    """The untrained network a folder's metadata describes and the writer of its program (export-program)."""
    return TopDRLNet(hidden=int(meta["hidden"]), pooled=int(meta["pooled"])), save_program_of


__all__ = [
    "KIND",
    "TopDRL",
    "TopDRLNet",
    "load_topdrl_policy",
    "network_of",
    "save_program_of",
    "save_topdrl_policy",
]
