"""Training Sia's learned job weights: regression on privileged labels, on the states the policy visits.

The scheduler is :class:`~marl.deploy.remaining_policy.LearnedWeightSia`: Sia whose integer program favours the
jobs a network expects to finish soonest. The room it can take is measured by ``sia-oracle`` (the true
remaining time in the same weights; ``experiments/benchmarks/sia_room.py --philly``). Training is
imitation of that privileged signal rather than RL, because the label is available at every state:

1. **Round 0**: run Sia (the warm start, no network) on training windows and record, every
   ``record_every``-th round, each active job's legitimate features
   (:func:`~marl.models.remaining_work.job_features`) and, as the label, the log of its true remaining time
   (read only here, as a cluster's logs give it once the job has ended). Fit the network.
2. **DAgger rounds**: run the learned policy itself on the (more) training windows, record the states *it*
   visits, fit again on all rows so far.

A random ``holdout`` share of the rows is fitted apart first, to report how well the network ranks unseen
states (its correlation with the truth, beside that of the history estimate alone); the policy ships the
fit on all rows. Windows are held out by time: they are ``hours`` long, one a day, starting 1 to
``windows`` days before 2017-11-01 (the report weeks start there). Windows too quiet for ``load`` are
left out.

    marlsched train --config experiments/configs/sia_remaining_philly.yaml --out results/sia-philly   # ~11 min
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from cluster_sim.results import save_figure
from cluster_sim.sim_presets import SIM_PRESETS
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from cluster_sim.workload_spec import QuietWorkloadSpecError
from marl.deploy.remaining_policy import KIND, LearnedWeightSia, save_remaining_policy
from marl.models.remaining_work import FEATURES, RemainingWorkNet, fit_remaining
from marl.training.dagger import dagger

NOV1 = HELD_OUT_START  # 2017-11-01, seconds from the Philly trace's first arrival


@dataclass
class RemainingWorkConfig:
    """Cluster and windows, the DAgger schedule and the fit."""

    cluster: str = "sia-hetero"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv,apps=../shared/traces/sia-sosp23/traces"
    load: float = 0.9
    hours: float = 6.0  # window length
    windows: int = 10  # round 0: windows starting 1..windows days before 2017-11-01
    dagger_windows: int = 14  # each DAgger round: 1..dagger_windows days before
    dagger_rounds: int = 1
    record_every: int = 5  # record the active jobs of every n-th scheduling round
    power: float = 0.5  # weight = (median estimate / own estimate) ** power
    hidden: int = 64
    epochs: int = 400
    lr: float = 3e-3
    weight_decay: float = 1e-4
    holdout: float = 0.2
    drop: str = ""  # comma-separated features the network does not see (ablations), e.g. log_history_remaining
    workers: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("load", "hours", "power", "lr"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("windows", "record_every", "hidden", "epochs", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.dagger_rounds < 0 or (self.dagger_rounds and self.dagger_windows < 1):
            raise ValueError("dagger_rounds: must be >= 0, with dagger_windows >= 1")
        if not 0.0 <= self.holdout < 1.0:
            raise ValueError(f"holdout: a share of the rows in [0, 1), got {self.holdout}")
        RemainingWorkNet(drop=self.dropped())  # names the unknown ones
        if self.hours > 24.0:
            raise ValueError(f"hours: windows start a day apart and must end by 2017-11-01, so <= 24; got {self.hours}")

    def dropped(self) -> tuple[str, ...]:
        return tuple(f.strip() for f in self.drop.split(",") if f.strip())

    def window(self, days_before: int) -> str:
        start = NOV1 - days_before * DAY
        return window_spec(self.trace, start, start + self.hours * 3600.0, self.load)


class Recorder(LearnedWeightSia):
    """The policy (or Sia, without a network) that also records features and the privileged label."""

    def __init__(self, net, *, every: int, power: float) -> None:
        super().__init__(net, power=power)
        self.every = every
        self.rounds = 0
        self.x: list[np.ndarray] = []
        self.y: list[np.ndarray] = []

    def features(self, view, jobs):
        x = super().features(view, jobs)
        self.rounds += 1
        if self.rounds % self.every == 0 and len(jobs):
            self.x.append(x)
            self.y.append(np.log(np.maximum(view.remaining_times(jobs), 1.0)).astype(np.float32))
        return x


def _collect(job: tuple) -> dict[str, np.ndarray] | None:
    """Rows recorded on one window: features ``x``, log remaining time ``y`` (None when it is too quiet)."""
    from cluster_sim.build import build_simulator

    cfg, days_before, state = job
    torch.set_num_threads(1)
    net = None
    if state is not None:
        net = RemainingWorkNet(len(FEATURES), cfg.hidden, cfg.dropped())
        net.load_state_dict(state)
        net.eval()
    try:
        sim = build_simulator(cfg.cluster, cfg.window(days_before), seed=0, **SIM_PRESETS["sia"].settings)
    except QuietWorkloadSpecError:
        return None
    rec = Recorder(net, every=cfg.record_every, power=cfg.power)
    sim.run(rec)
    if not rec.x:
        return None
    return {"x": np.concatenate(rec.x), "y": np.concatenate(rec.y)}


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a, b)[0, 1])


def holdout_scores(cfg: RemainingWorkConfig, x: np.ndarray, y: np.ndarray) -> dict:
    """Fit on a random (1 − holdout) of the rows; correlations with the truth on the rest."""
    rng = np.random.default_rng(cfg.seed)
    idx = rng.permutation(len(y))
    cut = round((1.0 - cfg.holdout) * len(y))
    train, test = idx[:cut], idx[cut:]
    net = fit_remaining(x[train], y[train], hidden=cfg.hidden, epochs=cfg.epochs, lr=cfg.lr,
                        weight_decay=cfg.weight_decay, drop=cfg.dropped(), seed=cfg.seed)  # fmt: skip
    with torch.no_grad():
        pred = net(torch.from_numpy(x[test])).numpy()
    return {
        "holdout_rows": len(test),
        "holdout_corr": round(correlation(pred, y[test]), 4),
        "holdout_corr_history": round(correlation(x[test, 0], y[test]), 4),
        "holdout_rmse_log": round(float(np.sqrt(np.mean((pred - y[test]) ** 2))), 4),
        "pred": pred,
        "true": y[test],
    }


def train(cfg: RemainingWorkConfig, out: str | Path, *, command: str = "", log=None) -> dict:
    """Round 0 on Sia's states, then ``dagger_rounds`` on the policy's own; writes the policy folder."""
    log = log or partial(print, flush=True)
    started = time.perf_counter()

    def fit(rnd: int, data: dict[str, np.ndarray]) -> tuple[RemainingWorkNet, dict]:
        x_all, y_all = data["x"], data["y"]
        scores = holdout_scores(cfg, x_all, y_all) if cfg.holdout > 0 else {}
        net = fit_remaining(x_all, y_all, hidden=cfg.hidden, epochs=cfg.epochs, lr=cfg.lr,
                            weight_decay=cfg.weight_decay, drop=cfg.dropped(), seed=cfg.seed)  # fmt: skip
        return net, scores

    def tasks(rnd: int) -> list[tuple]:
        return [(cfg, d) for d in range(1, (cfg.windows if rnd == 0 else cfg.dagger_windows) + 1)]

    net, rows, scores = dagger(
        cfg.dagger_rounds, tasks, _collect, fit, describe=lambda task: f"window {task[1]} days before 2017-11-01",
        teacher="sia", workers=cfg.workers, log=log, started=started,
    )  # fmt: skip
    meta = {
        "format": "marlsched-policy",
        "agent": KIND,
        "features": list(FEATURES),
        "hidden": cfg.hidden,
        "dropped_features": list(cfg.dropped()),
        "power": cfg.power,
        "sia": {},
        "warm_start": "Sia itself (no network: every job weight 1)",
        "teacher": "the true remaining time of each recorded job (privileged label, training only)",
        "training": "regression on Sia's states, then DAgger rounds on the policy's own (marl.training.remaining_work)",
        "config": asdict(cfg),
        "command": command,
        "train_seconds": round(time.perf_counter() - started, 1),
        "progress": rows,
        "torch": torch.__version__,
    }

    def plot(full: dict, path: Path) -> None:
        if scores:
            plot_holdout(scores["pred"], scores["true"], full["progress"][-1], path)

    save_remaining_policy(net, out, meta, plot=plot)
    return meta


def plot_holdout(pred: np.ndarray, true: np.ndarray, last: dict, path: Path) -> None:
    """Held-out estimates against the true remaining time (log scale), titled with the correlations."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.2))
    ax.hexbin(true / np.log(10), pred / np.log(10), gridsize=40, bins="log", cmap="viridis", mincnt=1)
    lo, hi = float(min(true.min(), pred.min())) / np.log(10), float(max(true.max(), pred.max())) / np.log(10)
    ax.plot([lo, hi], [lo, hi], color="grey", ls="--", lw=1)
    ax.set_xlabel("true remaining time (log10 s)")
    ax.set_ylabel("estimate (log10 s)")
    ax.set_title(f"held-out rows: corr {last['holdout_corr']:.2f} (history alone {last['holdout_corr_history']:.2f})",
                 fontsize=9)  # fmt: skip
    fig.tight_layout()
    save_figure(fig, path)


if __name__ == "__main__":  # the command older policy folders record
    from marl.training.retired import retired_command

    retired_command("marl.training.remaining_work", "experiments/configs/sia_remaining_philly.yaml")
