"""A learned estimate of each active job's remaining run time, from what a deployed scheduler knows.

Sia's integer program treats every job alike; weighing each job's terms by how soon it would finish
(``sia-oracle``: (median remaining / own remaining) ** 0.5) is worth about 5% of average JCT on Philly-length
jobs, but it reads true remaining work. This network estimates that remaining time from legitimate inputs
only, per active job (:func:`job_features`):

- the log of QSSF's history estimate (:class:`~cluster_sim.policies.run_history.TenantHistory`: finished
  runs of the same tenant and GPU count, starting from the logs of jobs finished before the window);
- log executed seconds, log attained GPU-seconds, log GPUs asked, log age (seconds since arrival);
- a bias column and the application one-hot (the model a job trains is known at submission).

Nothing is derived from a job's own duration. The network is an MLP on standardised features (the mean and
spread of the training rows are buffers, so the TorchScript file holds all it needs); it outputs the log of
the estimated remaining seconds, trained against the log of the true remaining time of recorded states.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.protocol import SchedulerView

APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3", "gpt_pmp")  # Sia's applications
FEATURES = (
    "log_history_remaining",
    "log_executed",
    "log_attained",
    "log_gpus",
    "log_age",
    "bias",
    *(f"app_{a}" for a in APPS),
)


def job_features(view: SchedulerView, history: TenantHistory, jobs: np.ndarray) -> np.ndarray:
    """(len(jobs), len(FEATURES)) float32 features of the active ``jobs``; ``history`` must have learned
    this round's completions (:meth:`TenantHistory.learn`)."""
    jobs = np.asarray(jobs, dtype=np.int64)
    out = np.zeros((len(jobs), len(FEATURES)), dtype=np.float64)
    out[:, 0] = np.log(np.maximum(history.expected_remaining(view, jobs), 1.0))
    out[:, 1] = np.log1p(np.maximum(view.executed_times(jobs), 0.0))
    out[:, 2] = np.log1p(np.maximum(view.attained_services(jobs), 0.0))
    out[:, 3] = np.log(np.maximum(view.jobs.num_gpus[jobs].astype(np.float64), 1.0))
    out[:, 4] = np.log1p(np.maximum(view.now - view.jobs.arrival[jobs], 0.0))
    out[:, 5] = 1.0
    column = {a: 6 + i for i, a in enumerate(APPS)}
    for i, j in enumerate(jobs.tolist()):
        app = view.application(j)
        if app is not None and app.name in column:
            out[i, column[app.name]] = 1.0
    return out.astype(np.float32)


class RemainingWorkNet(nn.Module):
    """``forward(x (N, F)) -> (N,)``: the log of each job's estimated remaining seconds.

    ``mean`` and ``std`` standardise the inputs (set by :meth:`fit_scaling` from the training rows; a
    constant column keeps std 1). Features named in ``drop`` are zeroed after standardising (the ablations:
    the network never sees them)."""

    def __init__(self, num_features: int = len(FEATURES), hidden: int = 64, drop: tuple[str, ...] = ()) -> None:
        super().__init__()
        if unknown := sorted(set(drop) - set(FEATURES)):
            raise ValueError(f"drop: unknown features {unknown}; choose from {list(FEATURES)}")
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("std", torch.ones(num_features))
        self.register_buffer("keep", torch.tensor([float(f not in drop) for f in FEATURES[:num_features]]))
        self.mlp = nn.Sequential(
            nn.Linear(num_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def fit_scaling(self, x: torch.Tensor) -> None:
        std = x.std(dim=0, unbiased=False)
        self.mean.copy_(x.mean(dim=0))
        self.std.copy_(torch.where(std < 1e-6, torch.ones_like(std), std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp((x - self.mean) / self.std * self.keep).squeeze(-1)


def fit_remaining(
    x: np.ndarray,
    y: np.ndarray,
    *,
    hidden: int = 64,
    epochs: int = 400,
    lr: float = 3e-3,
    weight_decay: float = 1e-4,
    drop: tuple[str, ...] = (),
    seed: int = 0,
) -> RemainingWorkNet:
    """A network fitted by full-batch Adam on the squared error in log space. One thread, so that the same
    seed and rows give the same weights bit for bit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        net = RemainingWorkNet(x.shape[1], hidden, drop)
        xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
        net.fit_scaling(xt)
        opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
        for _ in range(epochs):
            opt.zero_grad()
            loss = ((net(xt) - yt) ** 2).mean()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    return net.eval()


__all__ = ["APPS", "FEATURES", "RemainingWorkNet", "fit_remaining", "job_features"]
