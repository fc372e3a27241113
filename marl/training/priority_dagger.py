"""Training the priority agents by imitation of the true remaining time (privileged label, DAgger).

The priority agents (:mod:`marl.env.priority_agents`) rank each partition's jobs by a score on a log-time
scale; the untrained network's score is QSSF's ``-ln E[remaining s]`` from the tenants' history. With the
true remaining time in that place (``-ln remaining``, the agents and everything else unchanged) the agents
average 5.8% ± 3.6% less JCT on the held-out Philly weeks (five 7-day windows of 2017-11-01..14, ``small``,
load 0.9; ``experiments/benchmarks/priority_room.py``): that is the room of the score. PPO, rewarded by the
window's JCT, took a sixth of it in 50 iterations. Here the network learns the score directly, as a
regression on a label only training has:

1. **Round 0**: run the untrained agents (QSSF's scores) on 7-day windows of the training period and
   record, every ``record_every``-th round, every agent's observation (exactly what it sees when deployed)
   and, per job slot, the log of the job's true remaining time (read only here). Fit the network so that
   its score is ``-ln remaining``: the residual learns where the history estimate is wrong. The loss is
   the squared error plus ``rank_weight`` times its spread within each agent's job set: an agent only
   orders its own jobs, so an error shared by all of them costs nothing.
2. **DAgger rounds**: run the fitted agents themselves on windows shifted by half a stride, record the
   states *they* visit, fit again on all rows so far.
3. **Margin** (optional, ``tune_factors``): select the preemption margin on the training windows
   (:func:`marl.training.priority_tune.tune_hysteresis`), as for the PPO-trained policy. By default the
   policy keeps ``factor`` (ln 8, the margin of the shipped PPO policy and of its untrained comparison).

A random ``holdout`` share of the last round's observations is fitted apart first to report how well the
network ranks unseen states: the correlation of its estimate with the truth beside that of the history
estimate. The policy ships the fit on all rows, in the format of every priority policy folder (``marl:DIR``), with a
plot of the held-out estimates (``estimates.png``).

    marlsched train --config experiments/configs/priority_dagger_small.yaml --out results/philly_small_dagger
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from cluster_sim.traces.periods import HELD_OUT_START, TraceTime, refuse_report_period, window_label
from cluster_sim.workload_spec import QuietWorkloadSpecError
from marl.deploy.priority_export import agents_as_trained, save_priority_policy
from marl.env.priority_agents import PriorityAgents
from marl.env.priority_env import PriorityEnvConfig, slot_labels
from marl.env.priority_features import JobSetLayout
from marl.models.inference import subnormals_flushed
from marl.models.priority_net import NetScorer, PriorityNet, score_regression_loss
from marl.training.dagger import dagger
from marl.training.priority_tune import training_windows, tune_hysteresis
from marl.training.remaining_work import plot_holdout

_KEY = JobSetLayout.column("log_expected_remaining")


@dataclass
class PriorityDaggerConfig:
    """The environment (``PriorityEnvConfig`` keys), the windows, the DAgger schedule and the fit."""

    cluster: str = "small"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv"
    train_start: TraceTime = 1_728_000.0  # type: ignore[assignment]  # day 20 of the trace (seconds, or a date)
    train_end: TraceTime = HELD_OUT_START  # type: ignore[assignment]  # 2017-11-01: the report weeks start here
    num_agents: int = 4
    # the training simulations' contention: "oracle" (Gavel's measured pairs, interference_data) or "learned"
    # (interference_data: a predictor file of `marlsched interference train`); evaluation uses the oracle
    interference: str = "oracle"
    interference_data: str = "gavel:../shared/traces/gavel/simulation_throughputs.json"
    restart_cost: float = 30.0
    days: float = 7.0  # window length
    stride: float = 3.5  # windows start this many days apart; DAgger rounds shift them by half of it
    load: float = 0.9
    factor: float = 8.0  # preemption margin (hysteresis ln factor) while recording
    dagger_rounds: int = 1
    record_every: int = 40  # record every n-th round in which an agent has a choice
    hidden: int = 64
    epochs: int = 10
    batch: int = 128
    lr: float = 1e-3
    weight_decay: float = 1e-4
    rank_weight: float = 3.0  # weight of the error's spread within each agent's job set (its ranking)
    holdout: float = 0.2
    tune_factors: str = ""  # margins to select from after the fit, e.g. 4,8,16 ("": keep ``factor``)
    workers: int = 2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("days", "stride", "load", "lr", "restart_cost"):
            if not getattr(self, name) >= (0 if name == "restart_cost" else 1e-12):
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("num_agents", "record_every", "hidden", "epochs", "batch", "workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.interference not in ("oracle", "learned"):
            raise ValueError(f"interference: oracle or learned (a predictor file in interference_data), got "
                             f"{self.interference!r}")  # fmt: skip
        if self.factor < 1.0:
            raise ValueError(f"factor: a preemption margin >= 1 (1: none), got {self.factor}")
        if self.dagger_rounds < 0:
            raise ValueError(f"dagger_rounds: must be >= 0, got {self.dagger_rounds}")
        if not 0.0 <= self.holdout < 1.0:
            raise ValueError(f"holdout: a share of the rows in [0, 1), got {self.holdout}")
        refuse_report_period("train_end", self.train_start, self.train_end, self.trace)
        self.factors()
        self.windows(0)  # a training period too short for one window fails here, by name

    def factors(self) -> tuple[float, ...]:
        try:
            out = tuple(float(f) for f in self.tune_factors.split(",") if f.strip())
        except ValueError as err:
            raise ValueError(
                f"tune_factors: comma-separated numbers >= 1, e.g. 4,8,16; got {self.tune_factors!r}"
            ) from err
        if any(f < 1.0 for f in out):
            raise ValueError(f"tune_factors: every margin factor must be >= 1, got {self.tune_factors!r}")
        return out

    def env(self) -> dict:
        """The ``PriorityEnvConfig`` of these settings (margin tuning reads it)."""
        return {
            "cluster": self.cluster,
            "trace": self.trace,
            "train_start": self.train_start,
            "train_end": self.train_end,
            "window_days": self.days,
            "num_agents": self.num_agents,
            "interference": self.interference,
            "interference_data": self.interference_data,
            "restart_cost": self.restart_cost,
        }

    def windows(self, rnd: int) -> list[str]:
        """Round 0's windows, or those of DAgger round ``rnd`` (shifted by half a stride, alternating)."""
        shift = self.stride * 86_400.0 / 2 if rnd % 2 == 1 else 0.0
        env = PriorityEnvConfig.from_dict({**self.env(), "train_start": self.train_start + shift})
        return training_windows(env, self.days, self.stride, self.load)


class Recorder(PriorityAgents):
    """The agents (QSSF's scores without a network) that also record observations and the label."""

    def __init__(self, net: PriorityNet | None, *, num_agents: int, hysteresis: float, every: int) -> None:
        super().__init__(NetScorer(net, num_threads=None) if net is not None else None,
                         num_agents=num_agents, hysteresis=hysteresis)  # fmt: skip
        self.every = every
        self.calls = 0
        self.rows: dict[str, list[np.ndarray]] = {"jobs": [], "parts": [], "label": []}

    def observe(self, view):
        obs = super().observe(view)
        if obs is None:
            return obs
        self.calls += 1
        if self.calls % self.every == 0:
            label = slot_labels(view, obs.job_ids)  # privileged: training only
            keep = (obs.job_ids >= 0).any(axis=1)
            self.rows["jobs"].append(obs.arrays["jobs"][keep].copy())
            self.rows["parts"].append(obs.arrays["parts"][keep].copy())
            self.rows["label"].append(label[keep])
        return obs


def _collect(task: tuple) -> dict[str, np.ndarray] | None:
    """The rows recorded on one window (None when it is too quiet or nothing was recorded)."""
    from cluster_sim.build import build_simulator

    cfg, spec, state = task
    torch.set_num_threads(1)
    net = None
    if state is not None:
        net = PriorityNet(cfg.hidden)
        net.load_state_dict(state)
        net.eval()
    try:
        sim = build_simulator(cfg.cluster, spec, seed=0, interference=cfg.interference,
                              interference_data=cfg.interference_data, restart_cost=cfg.restart_cost)  # fmt: skip
    except QuietWorkloadSpecError:
        return None
    rec = Recorder(net, num_agents=cfg.num_agents, hysteresis=float(np.log(cfg.factor)), every=cfg.record_every)
    sim.run(rec)
    if not rec.rows["label"]:
        return None
    return {k: np.concatenate(v) for k, v in rec.rows.items()}


def fit_priority(
    data: dict[str, np.ndarray],
    *,
    hidden: int = 64,
    epochs: int = 30,
    batch: int = 256,
    lr: float = 1e-3,
    weight_decay: float = 1e-4,
    rank_weight: float = 0.0,
    seed: int = 0,
) -> PriorityNet:
    """A :class:`PriorityNet` whose scores fit ``-label`` on the valid slots (squared error, minibatch
    Adam, one thread: the same rows and seed give the same weights bit for bit). Starts from QSSF's scores.
    Subnormal floats are flushed to zero while it runs: the hidden activations reach them, and x86
    arithmetic on them is ~20x slower (half the training time)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with subnormals_flushed():
            torch.manual_seed(seed)
            net = PriorityNet(hidden)
            jobs, parts = torch.from_numpy(data["jobs"]), torch.from_numpy(data["parts"])
            label = torch.from_numpy(data["label"])
            opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=weight_decay)
            gen = torch.Generator().manual_seed(seed)
            # batches of observations with similar job counts, so that cutting the padded tail (valid slots come
            # first) saves most of the work; the batches' order and members are drawn anew every epoch
            count = jobs[..., 0].sum(dim=1)
            for _ in range(epochs):
                shuffled = torch.randperm(len(label), generator=gen)
                by_count = shuffled[torch.sort(count[shuffled], stable=True).indices]
                chunks = by_count.split(batch)
                for c in torch.randperm(len(chunks), generator=gen).tolist():
                    idx = chunks[c]
                    j = jobs[idx]
                    n = int(count[idx].max())
                    j = j[:, :n]
                    valid = j[..., 0]
                    scores, _ = net.encode(j, parts[idx])
                    loss = score_regression_loss(scores, label[idx, :n], valid, rank_weight)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
    finally:
        torch.set_num_threads(threads)
    return net.eval()


def estimates(net: PriorityNet, data: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(network's ln estimate, history's ln estimate, true ln remaining) over the valid slots of ``data``."""
    with torch.no_grad():
        scores, _ = net.encode(torch.from_numpy(data["jobs"]), torch.from_numpy(data["parts"]))
    valid = data["jobs"][..., 0] > 0
    history = data["jobs"][..., _KEY] * JobSetLayout.LOG_SCALE
    return -scores.numpy()[valid], history[valid], data["label"][valid]


def holdout_scores(cfg: PriorityDaggerConfig, data: dict[str, np.ndarray]) -> dict:
    """Fit on a random (1 − holdout) of the observations; correlations with the truth on the rest."""
    n = len(data["label"])
    idx = np.random.default_rng(cfg.seed).permutation(n)
    cut = round((1.0 - cfg.holdout) * n)
    part = {k: v[idx[:cut]] for k, v in data.items()}
    test = {k: v[idx[cut:]] for k, v in data.items()}
    net = fit_priority(part, hidden=cfg.hidden, epochs=cfg.epochs, batch=cfg.batch, lr=cfg.lr,
                       weight_decay=cfg.weight_decay, rank_weight=cfg.rank_weight, seed=cfg.seed)  # fmt: skip
    pred, hist, true = estimates(net, test)
    return {
        "holdout_slots": len(true),
        "holdout_corr": round(float(np.corrcoef(pred, true)[0, 1]), 4),
        "holdout_corr_history": round(float(np.corrcoef(hist, true)[0, 1]), 4),
        "holdout_rmse_log": round(float(np.sqrt(np.mean((pred - true) ** 2))), 4),
        "holdout_rmse_log_history": round(float(np.sqrt(np.mean((hist - true) ** 2))), 4),
        "pred": pred,
        "true": true,
    }


def train(cfg: PriorityDaggerConfig, out: str | Path, *, command: str = "", log=None) -> dict:
    """Round 0 on QSSF's states, ``dagger_rounds`` on the policy's own, then the margin; writes ``out``."""
    log = log or partial(print, flush=True)
    started = time.perf_counter()

    def fit(rnd: int, data: dict[str, np.ndarray]) -> tuple[PriorityNet, dict]:
        last = rnd == cfg.dagger_rounds
        scores = holdout_scores(cfg, data) if cfg.holdout > 0 and last else {}  # the last round's rows
        net = fit_priority(data, hidden=cfg.hidden, epochs=cfg.epochs, batch=cfg.batch, lr=cfg.lr,
                           weight_decay=cfg.weight_decay, rank_weight=cfg.rank_weight, seed=cfg.seed)  # fmt: skip
        return net, scores

    net, progress, scores = dagger(
        cfg.dagger_rounds, lambda rnd: [(cfg, s) for s in cfg.windows(rnd)], _collect, fit,
        describe=lambda task: window_label(task[1]), teacher="qssf", workers=cfg.workers, log=log, started=started,
    )  # fmt: skip
    meta = {
        "agents": {"hysteresis": float(np.log(cfg.factor))} | agents_as_trained(cfg.cluster, cfg.num_agents),
        "warm_start": "QSSF's scores (the untrained network)",
        "teacher": "the true remaining time of each recorded job (privileged label, training only)",
        "training": "regression on QSSF's states, then DAgger on the policy's own (marl.training.priority_dagger)",
        "config": asdict(cfg),
        "command": command,
        "progress": progress,
        "train_seconds": round(time.perf_counter() - started, 1),
    }
    save_priority_policy(net, out, meta)
    if scores:
        plot_holdout(scores["pred"], scores["true"], progress[-1], Path(out) / "estimates.png")
    if cfg.factors():
        tune_hysteresis(out, cfg.env(), factors=cfg.factors(), days=cfg.days, stride=cfg.stride, load=cfg.load,
                        workers=cfg.workers, command=command, log=log)  # fmt: skip
    log(f"{time.perf_counter() - started:.0f} s in all")
    return meta


if __name__ == "__main__":  # the command older policy folders record
    from marl.training.retired import retired_command

    retired_command("marl.training.priority_dagger", "experiments/configs/priority_dagger_small.yaml")
