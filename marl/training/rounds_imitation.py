"""Training the round scorer by imitating a privileged teacher on its own states (DAgger), and its files.

The teacher (``--teacher``) is privileged: ``oracle`` (``rounds-oracle``) ranks (job, type) pairs by the time
to finish there from the true remaining work, ``oracle-area`` by the remaining GPU-time, and ``lookahead``
(``lookahead-oracle``, :mod:`cluster_sim.policies.lookahead`) is ``gavel-las`` whose settings are chosen every
``lookahead_every`` rounds by playing each ahead on a clone of the simulator (true durations and future
arrivals): on the student's own states the teacher clones the student's run, and labels every round with
the assignment of the setting it chose. No deployed scheduler has any of these. The student sees only
:data:`~marl.models.rounds_scorer.FEATURES`.
Iteration 0 rolls the teacher out on the training windows; every later iteration rolls the student out
(so it is labelled on the states its own mistakes lead to), the teacher labels every round it decides, all
rounds so far are kept, and the network is refit on them. Loss per round, pairwise logistic:

- on each type, every pair the teacher runs there scores above every pair of a job the teacher leaves
  waiting that could run there;
- each job the teacher runs scores highest on the type the teacher gives it.

Returns are not used at all: the signal is the teacher's choice in every round, hundreds per window.

    marlsched train --config experiments/configs/rounds_dagger_lookahead.yaml --out results/rounds-lookahead
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from cluster_sim.build import build_simulator
from cluster_sim.policies.gavel import GavelPriorityScore
from cluster_sim.policies.lookahead import LookaheadRounds
from cluster_sim.policies.rigid_rounds import SCORERS, ScoredRounds, type_capacity
from cluster_sim.results import save_figure
from cluster_sim.traces.periods import DAY, HELD_OUT_START, TraceTime, refuse_report_period, window_label, window_spec
from marl.deploy.rounds_policy import KIND, save_rounds_policy
from marl.models.inference import subnormals_flushed
from marl.models.rounds_scorer import FEATURES, PRIORS, PairScorer, pair_features
from marl.training.dagger import Chunk, Round, dagger

# the scorers of cluster_sim.policies.rigid_rounds that see true work, and the look-ahead over gavel-las
TEACHERS = ("oracle", "oracle-area", "lookahead")


@dataclass
class ImitationConfig:
    """What :func:`train` runs: the cluster, the training windows (held out by time: they end before the
    selection weeks begin) and the DAgger schedule."""

    cluster: str = "small-hetero"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv,model_rule=gavel"
    # seconds from the trace's first arrival, or a date: 2017-10-16, eight 2-day windows before 2017-11-01
    first_start: TraceTime = HELD_OUT_START - 8 * 2 * DAY  # type: ignore[assignment]
    windows: int = 8
    days: float = 2.0
    load: float = 0.9
    iterations: int = 4  # DAgger iterations after the teacher's; 0: behaviour cloning only; -1: untrained
    epochs: int = 6
    every: int = 2  # keep every k-th round of a rollout
    hidden: int = 64
    lr: float = 3e-3
    stay: float = 0.1
    seed: int = 0
    interference: str = "none"
    interference_data: str | None = None  # oracle: gavel:PATH of measured pairs (None: the parametric model alone)
    drop: str = ""  # comma-separated features zeroed (an ablation), e.g. rel_speed,advantage
    teacher: str = (
        "oracle"  # oracle | oracle-area (privileged scorers of cluster_sim.policies.rigid_rounds) | lookahead
    )
    lookahead_every: int = 10  # lookahead: rounds between the teacher's choices (each plays every setting ahead)
    horizon: float = 4 * 3600.0  # lookahead: seconds each setting is played ahead
    terminal: float = 1.0  # lookahead: weight of the true work left at the horizon in a setting's cost
    workers: int = 1  # processes playing the windows of an iteration side by side (the same result)
    prior: str = "none"  # the network's fixed heuristic part (marl.models.rounds_scorer.PRIORS): none | gavel-las

    def __post_init__(self) -> None:
        if self.teacher not in TEACHERS:
            raise ValueError(
                f"teacher: {self.teacher!r} is not a privileged round scorer; use one of {', '.join(TEACHERS)}"
            )
        if self.prior not in PRIORS:
            raise ValueError(f"prior: {self.prior!r}; use one of {', '.join(PRIORS)}")
        unknown = [f for f in self.drop.split(",") if f and f not in FEATURES]
        if unknown:
            raise ValueError(f"drop: unknown feature(s) {', '.join(unknown)}; the features are {', '.join(FEATURES)}")
        end = self.first_start + self.windows * self.days * DAY
        refuse_report_period("first_start", self.first_start, end, self.trace)

    def specs(self) -> list[str]:
        t0, length = self.first_start, self.days * DAY
        return [window_spec(self.trace, t0 + k * length, t0 + (k + 1) * length, self.load) for k in range(self.windows)]


def teacher_assignment(view, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray, teacher: np.ndarray,
                       stay: float) -> np.ndarray | None:  # fmt: skip
    """The type each job gets from the teacher's pair scores this round (-1: none), as ``ScoredRounds``
    assigns them; None for a round without a choice (every job runs, all on one type)."""
    s = teacher.copy()
    on = current >= 0
    s[np.flatnonzero(on), current[on]] += stay
    i_idx, t_idx = np.nonzero(rates > 0)
    order = np.lexsort((i_idx, -s[i_idx, t_idx]))
    asked = np.asarray(view.jobs.num_gpus[jobs], dtype=np.int64)
    types, _ = ScoredRounds.assign(order, i_idx, t_idx, asked, type_capacity(view.topo))
    return types if (types < 0).any() or len(np.unique(types)) > 1 else None


def _student_scores(student: PairScorer, x: np.ndarray, rates: np.ndarray) -> np.ndarray:
    with torch.no_grad(), subnormals_flushed():
        return student(torch.from_numpy(x), torch.from_numpy(rates > 0)).double().numpy()


class _Labelled:
    """A ``ScoredRounds`` scorer that records each round's features and the teacher's assignment, and acts
    as the teacher (``act='teacher'``) or as the student."""

    def __init__(self, student: PairScorer, act: str, stay: float, every: int, teacher: str = "oracle") -> None:
        self.student, self.act, self.stay, self.every = student, act, stay, every
        self.teacher = SCORERS[teacher]
        self.samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.rounds = 0
        self.gavel = GavelPriorityScore.gavel_las()

    def reset(self, view) -> None:
        self.gavel.reset(view)

    def ran(self, jobs, types) -> None:
        self.gavel.ran(jobs, types)

    def __call__(self, view, jobs, rates, current):
        teacher = self.teacher(view, jobs, rates, current)
        self.rounds += 1
        x = pair_features(view, jobs, rates, current, self.gavel)  # every round: Gavel's LP state moves on
        if self.rounds % self.every == 0:
            types = teacher_assignment(view, jobs, rates, current, teacher, self.stay)
            if types is not None:  # a round with a choice to learn from
                self.samples.append((x, rates > 0, types))
        if self.act == "teacher":
            return teacher
        return _student_scores(self.student, x, rates)


class _LookaheadLabels:
    """The acting scorer of a :class:`~cluster_sim.policies.lookahead.LookaheadRounds` whose look-ahead is the
    teacher: each kept round records the features (from a ``gavel-las`` of its own, which never sees the
    teacher's settings, some of which read true durations) and the assignment of the teacher's current
    setting; the teacher or the student acts."""

    def __init__(self, gavel: GavelPriorityScore, student: PairScorer, act: str, stay: float, every: int) -> None:
        self.gavel, self.student, self.act, self.stay, self.every = gavel, student, act, stay, every
        self.features = GavelPriorityScore.gavel_las()
        self.samples: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.rounds = 0

    def reset(self, view) -> None:
        self.gavel.reset(view)
        self.features.reset(view)

    def ran(self, jobs, types) -> None:
        self.gavel.ran(jobs, types)
        self.features.ran(jobs, types)

    def __call__(self, view, jobs, rates, current):
        teacher = self.gavel(view, jobs, rates, current)
        x = pair_features(view, jobs, rates, current, self.features)
        self.rounds += 1
        if self.rounds % self.every == 0:
            types = teacher_assignment(view, jobs, rates, current, teacher, self.stay)
            if types is not None:
                self.samples.append((x, rates > 0, types))
        return teacher if self.act == "teacher" else _student_scores(self.student, x, rates)


def play_window(task: tuple) -> Chunk:
    """One training window ``(cfg, spec, decision, state)`` with the teacher (``state`` None) or the student
    (``state``: its weights) acting in ``decision``'s rounds: the labelled rounds and the average JCT, as
    :func:`~marl.training.dagger.dagger` aggregates them. A function of its arguments only, so windows run in any
    process."""
    cfg, spec, decision, state = task
    act = "teacher" if state is None else "student"
    torch.set_num_threads(1)
    net = PairScorer(hidden=cfg.hidden, drop=tuple(f for f in cfg.drop.split(",") if f), prior=cfg.prior)
    if state is not None:
        net.load_state_dict(state)
    net.eval()
    data = cfg.interference_data if cfg.interference != "none" else None
    sim = build_simulator(cfg.cluster, spec, seed=cfg.seed, interference=cfg.interference, interference_data=data)
    if cfg.teacher == "lookahead":
        policy = LookaheadRounds(
            every=cfg.lookahead_every, horizon=cfg.horizon, terminal=cfg.terminal, stay=cfg.stay, name="rounds"
        )
        scorer = _LookaheadLabels(policy.gavel, net, act, cfg.stay, cfg.every)
        policy.scorer = scorer
    else:
        scorer = _Labelled(net, act, cfg.stay, cfg.every, cfg.teacher)
        policy = decision(scorer, stay=cfg.stay, name="rounds")
    jct = float(sim.run(policy).metrics()["avg_jct"])
    return {"rounds": scorer.samples, "avg_jct": [jct]}


def round_loss(scores: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
    """Pairwise logistic loss of one round's scores against the teacher's assignment (module doc)."""
    losses = []
    waiting = types < 0
    for t in range(scores.shape[1]):
        chosen = scores[types == t, t]
        passed = scores[waiting & mask[:, t], t]
        if len(chosen) and len(passed):
            losses.append(F.softplus(passed[None, :] - chosen[:, None]).mean())
    run = torch.nonzero(types >= 0).squeeze(-1)
    if len(run):
        mine = scores[run, types[run]]
        other = mask[run].clone()
        other[torch.arange(len(run)), types[run]] = False
        if other.any():
            gap = scores[run] - mine[:, None]
            losses.append(F.softplus(gap[other]).mean())
    return torch.stack(losses).mean() if losses else scores.sum() * 0.0


def fit(net: PairScorer, data: list, cfg: ImitationConfig, rng: np.random.Generator) -> float:
    """``cfg.epochs`` passes over every recorded round, in a seeded order; the mean loss of the last."""
    opt = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    tensors = [(torch.from_numpy(x), torch.from_numpy(m), torch.from_numpy(t)) for x, m, t in data]
    last = 0.0
    net.train()
    for _ in range(cfg.epochs):
        total = 0.0
        for k in rng.permutation(len(tensors)).tolist():
            x, m, t = tensors[k]
            loss = round_loss(net(x, m), m, t)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        last = total / max(len(tensors), 1)
    net.eval()
    return last


def train(
    cfg: ImitationConfig,
    out: str | Path,
    *,
    command: str = "",
    log=print,
    decision: type[ScoredRounds] = ScoredRounds,
) -> dict:
    """DAgger (:func:`~marl.training.dagger.dagger`) on ``cfg``'s windows, the student acting in ``decision``'s
    rounds (the agent spec's decision layer); writes the policy folder ``out`` (TorchScript + metadata,
    atomically) and ``progress.csv``; returns the metadata."""
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(cfg.seed)
    drop = tuple(f for f in cfg.drop.split(",") if f)
    net = PairScorer(hidden=cfg.hidden, drop=drop, prior=cfg.prior)
    teacher = "lookahead-oracle" if cfg.teacher == "lookahead" else f"rounds-{cfg.teacher}"
    started = time.perf_counter()

    def refit(_rnd: int, data: Chunk) -> tuple[PairScorer, dict]:
        return net, {"loss": fit(net, data["rounds"], cfg, rng)}

    def report(rnd: Round) -> tuple[dict, str]:
        jcts = [jct for c in rnd.chunks for jct in c["avg_jct"]]
        act = "teacher" if rnd.index == 0 else "student"
        row = {"iteration": rnd.index, "acted": act, "avg_jct": float(np.mean(jcts)), "rounds": rnd.rows,
               "loss": rnd.figures["loss"], "seconds": rnd.seconds}  # fmt: skip
        return row, (f"iteration {rnd.index} ({act} acted): mean avg JCT {row['avg_jct']:.0f} s over {len(jcts)} "
                     f"windows, {rnd.rows} rounds, loss {row['loss']:.4f}, {row['seconds']:.0f} s")  # fmt: skip

    _, rows, _ = dagger(
        cfg.iterations, lambda _rnd: [(cfg, spec, decision) for spec in cfg.specs()], play_window, refit,
        describe=lambda task: window_label(task[1]), teacher=teacher, workers=cfg.workers,
        log=log, started=started, report=report,
    )  # fmt: skip
    meta = {
        "format": "marlsched-policy",
        "agent": KIND,
        "features": list(FEATURES),
        "hidden": cfg.hidden,
        "dropped_features": list(drop),
        "stay": cfg.stay,
        "interval": 360.0,
        "teacher": teacher,
        "config": asdict(cfg),
        "command": command,
        "train_seconds": round(time.perf_counter() - started, 1),
        "progress": rows,
        "torch": torch.__version__,
    }
    save_rounds_policy(net, out, meta, plot=plot_progress)
    return meta


def plot_progress(rows: list[dict], path: Path, teacher_name: str = "rounds-oracle") -> None:
    """Mean average JCT of each iteration's rollouts on the training windows (PNG): the teacher's at
    iteration 0, the student's after; a student that imitates well ends near the teacher's line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 3.6))
    student = [r for r in rows if r["acted"] == "student"]
    teachers = [r for r in rows if r["acted"] == "teacher"]
    if student:
        ax.plot([r["iteration"] for r in student], [r["avg_jct"] for r in student], marker="o", label="student acting")
    for r in teachers:
        ax.axhline(r["avg_jct"], color="grey", ls="--", lw=1, label=f"teacher ({teacher_name})")
    ax.set_xlabel("DAgger iteration (the student of the previous iteration acts)")
    ax.set_ylabel("mean average JCT on the training windows (s)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
