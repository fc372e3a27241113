"""Training the round scorer on the average JCT itself: evolution strategies from a warm start, paired.

The scorer (:class:`~marl.models.rounds_scorer.PairScorer`) starts at a heuristic (its ``prior``, e.g. ``gavel-las``)
or at a folder trained by imitation (``--init``). Imitation cannot pass its teacher, and on the ``hetero``
regime no privileged teacher in this frame passes ``gavel-las`` (true remaining work adds nothing to
Gavel's rounds there), so this stage learns from returns instead. What moves: the learned linear term
over the pair features and the last layer of the MLP (``--params``), a few dozen numbers, which is what ES
can search on 2 cores. Each iteration draws one training window; every candidate θ ± σε plays that same
window (antithetic pairs: the workload, which dominates the JCT, cancels). Every ``eval_every``
iterations the current θ plays the validation windows, and the folder keeps the θ that did best there,
the warm start included (iteration 0): a run that learns nothing ships its warm start and says so.

Episodes run every job to completion, although the drain of the longest jobs after the last arrival is most
of the simulation: cut 6 hours after the last arrival (3-5x faster), the mean time in the system ranked
1, 4 and 1 of 4 antithetic pairs of candidates the other way from their average JCT on three 1-day October
windows; cut at 24 hours (2-3x faster), 1 and 3 of 4 on two of them. What candidates change is mostly when
the long jobs end, days later.

Windows are held out by time: training windows start between ``train_first`` and ``train_last``,
validation windows after them, and both end before 2017-11-01 (the report weeks).

    marlsched train --config experiments/configs/rounds_es_small_hetero.yaml --out results/rounds-es
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from cluster_sim.policies.rigid_rounds import ScoredRounds
from cluster_sim.traces.periods import DAY, HELD_OUT_START, TraceTime, refuse_report_period, window_spec
from marl.deploy.policy_files import METADATA, load_network, read_json
from marl.deploy.rounds_policy import KIND, save_rounds_policy
from marl.models.rounds_scorer import FEATURES, NetRoundsScorer, PairScorer
from marl.training.es import Step, evolve
from marl.training.learning_curve import Series, plot_learning_curve
from marl.training.worker_map import worker_map

NOV1 = HELD_OUT_START  # 2017-11-01, seconds from the Philly trace's first arrival
PARAMS = ("linear", "linear+last")


@dataclass
class RoundsESConfig:
    """The cluster and windows, the warm start and what ES moves."""

    cluster: str = "small-hetero"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv,model_rule=gavel"
    load: float = 0.9
    days: float = 1.0  # training window length
    # seconds from the trace's first arrival, or dates (2017-10-01)
    train_first: TraceTime = NOV1 - 31 * DAY  # type: ignore[assignment]  # 2017-10-01
    train_last: TraceTime = NOV1 - 9 * DAY  # type: ignore[assignment]  # the last training window starts 2017-10-23
    validation_first: TraceTime = NOV1 - 7 * DAY  # type: ignore[assignment]  # 2017-10-25: three 2-day windows
    validation_windows: int = 3
    validation_days: float = 2.0
    interference: str = "oracle"  # the simulator's ground truth, here Gavel's measured co-location slowdowns
    interference_data: str = "gavel:../shared/traces/gavel/simulation_throughputs.json"
    init: str = ""  # a rounds policy folder to start from; "" : the untrained network with ``prior``
    prior: str = "gavel-las"
    hidden: int = 16
    params: str = "linear+last"
    stay: float = 0.0
    pairs: int = 4
    sigma: float = 0.05
    lr: float = 0.02
    iterations: int = 200
    minutes: float = 30.0  # time budget of the ES loop
    eval_every: int = 4
    workers: int = 2
    seed: int = 0

    PARAM_CHOICES = PARAMS  # what ``params`` may name (a subclass's trainer moves other parameters)

    def __post_init__(self) -> None:
        if self.params not in self.PARAM_CHOICES:
            raise ValueError(f"params: {self.params!r}; choose one of {', '.join(self.PARAM_CHOICES)}")
        for name in ("days", "validation_days", "sigma", "lr", "minutes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("pairs", "iterations", "eval_every", "workers", "validation_windows"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.train_last + self.days * DAY > self.validation_first:
            raise ValueError("train_last: training windows must end before validation_first (hold out by time)")
        end = self.validation_first + self.validation_windows * self.validation_days * DAY
        refuse_report_period("validation_first", self.validation_first, end, self.trace)

    def window(self, start: float, days: float) -> str:
        return window_spec(self.trace, start, start + days * DAY, self.load)

    def validation(self) -> list[tuple[float, float]]:
        """The validation windows' (start, days)."""
        step = self.validation_days * DAY
        return [(self.validation_first + k * step, self.validation_days) for k in range(self.validation_windows)]


def training_starts(cfg: RoundsESConfig) -> tuple[np.ndarray, int]:
    """Window starts every 6 hours from ``train_first`` to ``train_last`` whose jobs can offer ``load`` of the
    cluster (a quiet day cannot), and how many were left out."""
    from cluster_sim.workload_spec import QuietWorkloadSpecError, parse_workload_spec
    from topology import build_cluster

    gpus = build_cluster(cfg.cluster).view.num_gpus
    starts, dropped = [], 0
    for t0 in np.arange(cfg.train_first, cfg.train_last + 1.0, DAY / 4):
        try:
            parse_workload_spec(cfg.window(float(t0), cfg.days), cluster_gpus=gpus, seed=0)
            starts.append(float(t0))
        except QuietWorkloadSpecError:
            dropped += 1
    if not starts:
        raise ValueError(f"no training window of {cfg.days} days can offer load={cfg.load}; lower the load")
    return np.array(starts), dropped


def initial_network(cfg: RoundsESConfig) -> PairScorer:
    """The warm start: a trained folder's network (``init``) or the untrained one on ``prior``."""
    torch.manual_seed(cfg.seed)
    if cfg.init:
        meta = read_json(Path(cfg.init) / METADATA)
        if meta.get("agent") != KIND or meta.get("features") != list(FEATURES):
            raise ValueError(f"init: {cfg.init} is not a rounds policy of this version's features; retrain it")
        net = PairScorer(hidden=int(meta["hidden"]), drop=tuple(meta.get("dropped_features", ())))
        net.load_state_dict(load_network(cfg.init).state_dict())
        return net
    return PairScorer(hidden=cfg.hidden, prior=cfg.prior)


def moved(net: PairScorer, params: str) -> list[torch.nn.Parameter]:
    """The parameters ES searches over."""
    out = [net.linear.weight]
    if params == "linear+last":
        out += [net.head[-1].weight, net.head[-1].bias]
    return out


def _play(job: tuple) -> float:
    """Average JCT of one window under the network with ``theta`` in its moved parameters."""
    from cluster_sim.build import build_simulator

    state, params, theta, cfg, spec = job
    torch.set_num_threads(1)
    net = PairScorer(hidden=state["hidden"], drop=state["drop"], prior="none")
    net.load_state_dict(state["weights"])
    vector_to_parameters(torch.as_tensor(np.asarray(theta), dtype=torch.float32), moved(net, params))
    net.eval()
    data = cfg.interference_data if cfg.interference == "oracle" and cfg.interference_data else None
    sim = build_simulator(cfg.cluster, spec, seed=0, interference=cfg.interference, interference_data=data)
    rounds = state.get("decision", ScoredRounds)(NetRoundsScorer(net), stay=cfg.stay, name="rounds")
    return float(sim.run(rounds).metrics()["avg_jct"])


def search(
    cfg: RoundsESConfig,
    params: list[torch.nn.Parameter],
    state: dict,
    play_one: Callable[[tuple], float],
    *,
    started: float,
    command: str,
    log: Callable[[str], None],
) -> dict:
    """ES (:func:`~marl.training.es.evolve`) on ``params`` over ``cfg``'s windows, for the trainers of this
    config: every candidate plays one drawn training window (in ``cfg.workers`` processes, ``play_one`` getting
    ``(state, cfg.params, theta, cfg, spec)``) and θ the validation windows every ``eval_every`` iterations.
    Writes the selected θ into ``params``; returns what the policy records of the search."""
    theta0 = parameters_to_vector(params).detach().double().numpy()
    starts, dropped = training_starts(cfg)
    log(f"{len(starts)} training windows ({dropped} too quiet for load {cfg.load} left out)")
    rows: list[dict] = []

    def progress(step: Step) -> None:
        got = step.validation
        row = {"iteration": step.iteration, "window_start": step.about.get("window_start", ""),
               "best_jct": "" if step.jct is None else round(float(step.jct.min()), 1),
               "worst_jct": "" if step.jct is None else round(float(step.jct.max()), 1),
               "validation_jct": "" if got is None else round(float(np.exp(got).mean()), 1),
               "validation_vs_warm": "" if got is None else round(float(np.expm1(step.gain)), 4),
               "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
        rows.append(row)
        if step.iteration == 0:
            log(f"warm start on {len(got)} validation windows: mean avg JCT {np.exp(got).mean():.0f} s")
            return
        val = "" if got is None else f", validation {row['validation_vs_warm']:+.2%} vs warm start"
        log(f"ES iteration {step.iteration}: candidates {row['best_jct']:.0f}..{row['worst_jct']:.0f} s{val}, "
            f"{row['seconds']:.0f} s")  # fmt: skip

    def draw(rng: np.random.Generator) -> tuple[tuple[float, float], dict]:
        t0 = float(rng.choice(starts))
        return (t0, cfg.days), {"window_start": round(t0)}

    with worker_map(cfg.workers) as run:

        def play(thetas: list[np.ndarray], windows: list[tuple[float, float]]) -> np.ndarray:
            jobs = [(state, cfg.params, t.tolist(), cfg, cfg.window(*w)) for t in thetas for w in windows]
            return np.array(list(run(play_one, jobs)), dtype=np.float64).reshape(len(thetas), len(windows))

        best = evolve(theta0, play, draw, cfg.validation(), sigma=cfg.sigma, lr=cfg.lr, pairs=cfg.pairs,
                      rng=np.random.default_rng(cfg.seed), iterations=cfg.iterations, eval_every=cfg.eval_every,
                      minutes=cfg.minutes, started=started, progress=progress, log=log)  # fmt: skip
    vector_to_parameters(torch.as_tensor(best["theta"], dtype=torch.float32), params)
    log(f"selected iteration {best['iteration']}: validation {np.expm1(best['validation']):+.2%} vs the warm start")
    return {
        "selected_iteration": best["iteration"],
        "validation_vs_warm_start": round(float(np.expm1(best["validation"])), 4),
        "config": asdict(cfg),
        "command": command,
        "train_seconds": round(time.perf_counter() - started, 1),
        "progress": rows,
    }


def train(
    cfg: RoundsESConfig,
    out: str | Path,
    *,
    command: str = "",
    log=print,
    decision: type[ScoredRounds] = ScoredRounds,
) -> dict:
    """ES from the warm start, every candidate playing in ``decision``'s rounds (the agent spec's decision layer);
    writes the selected network as a rounds policy folder (``marl:DIR``)."""
    started = time.perf_counter()
    net = initial_network(cfg)
    drop = tuple(f for f, k in zip(FEATURES, net.keep.tolist(), strict=True) if not k)
    state = {"hidden": net.embed[0].out_features, "drop": drop, "weights": net.state_dict(), "decision": decision}
    record = search(cfg, moved(net, cfg.params), state, _play, started=started, command=command, log=log)
    meta = {
        "format": "marlsched-policy",
        "agent": KIND,
        "features": list(FEATURES),
        "hidden": state["hidden"],
        "dropped_features": list(drop),
        "stay": cfg.stay,
        "interval": 360.0,
        "teacher": "",
        "warm_start": cfg.init or f"untrained network, prior {cfg.prior}",
        "training": "evolution strategies on the average JCT (marl.training.rounds_es)",
        **record,
        "torch": torch.__version__,
    }
    save_rounds_policy(net, out, meta, plot=plot_es)
    return meta


def plot_es(rows: list[dict], path: Path, _teacher: str = "") -> None:
    """Validation JCT of each evaluated iteration against the warm start's (PNG)."""
    plot_learning_curve(
        rows, path, [Series("validation_vs_warm", scale=100.0)], xlabel="ES iteration",
        ylabel="validation avg JCT vs warm start (%)", references={"warm start": 0.0},
    )  # fmt: skip


if __name__ == "__main__":  # the command older policy folders record
    from marl.training.retired import retired_command

    retired_command("marl.training.rounds_es", "experiments/configs/rounds_es_small_hetero.yaml")
