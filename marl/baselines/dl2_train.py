"""Training DL2: a supervised warm start on Optimus' decisions, then policy gradient.

1. **Warm start** (the paper's supervised stage on an existing scheduler's decisions). Round 0 runs
   Optimus (fitted, no oracle: :class:`~cluster_sim.policies.optimus_elastic.ElasticOptimus`) on training
   windows and records its steps; each later round runs the network itself (greedy) and records, at the
   states *it* visits, the step Optimus would take there (DAgger: the states a cloned policy reaches drift
   from the teacher's, and a teacher's labels there are what corrects the drift). After each round the
   network is fitted (cross-entropy) to every label so far. Accuracy is reported on the validation windows,
   held out by time: on Optimus' own states, and on the network's.
2. **Policy gradient** (as TopDRL's trainer, :mod:`marl.baselines.topdrl_train`): each iteration runs
   ``rollouts`` episodes on one training window, the network sampling its steps inside a ``segment_h``
   segment from a random time (greedy before and after, so every rollout reaches the segment in the same
   state; the episode ends 3 horizons after it). A step's advantage is its discounted return
   (:func:`~marl.training.policy_gradient.returns_at`; ``jct``: minus the job-hours in the system) minus the
   mean of the other rollouts' at the same time, and a clipped surrogate updates the network. The greedy
   network is scored on the validation windows every ``eval_every`` iterations; the best, the warm start
   included, is exported.

The report compares the trained policy, its warm start and the heuristics on the report windows (later,
never trained or selected on) and on any fixed workloads named in ``env.report_workloads`` (e.g. Pollux's).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cluster_sim.results import write_dict_rows
from marl.baselines.dl2 import DL2, DL2Net, pad_steps, save_dl2_policy
from marl.baselines.training import (
    WindowsConfig,
    check_policies,
    check_positive,
    check_windows,
    paired_table,
    start_config,
)
from marl.training.config import ConfigChecker, TrainConfigError, read_yaml_config
from marl.training.dagger import Chunk, Round, dagger
from marl.training.learning_curve import Series, plot_learning_curve
from marl.training.policy_gradient import REWARDS, clipped_step, leave_one_out_advantages, returns_at
from marl.training.worker_map import WorkerPool

Log = Callable[[str], None]
TEACHER = "optimus"


@dataclass(frozen=True)
class DL2EnvConfig:
    """The cluster, the trace windows (trained on, selected on, reported on: held out by time) and the
    fixed workloads reported beside them."""

    cluster: str = "pollux-testbed"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv,apps=../shared/traces/pollux-osdi21/traces"
    load: float = 1.0
    restart_cost: float = 30.0
    start_cost: float = 30.0
    train: WindowsConfig = field(default_factory=WindowsConfig)
    validation: WindowsConfig = field(default_factory=WindowsConfig)
    report: WindowsConfig = field(default_factory=WindowsConfig)
    report_workloads: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DL2ModelConfig:
    hidden: int = 32


@dataclass(frozen=True)
class WarmStartConfig:
    """The supervised stage (see the module doc)."""

    rounds: int = 3  # DAgger rounds after the teacher's own (0: behaviour cloning only)
    windows: int = 6  # training windows per round
    keep: float = 0.05  # share of steps recorded
    epochs: int = 6
    lr: float = 3e-3
    minibatch: int = 512


@dataclass(frozen=True)
class DL2PGConfig:
    """The policy-gradient iterations (see the module doc)."""

    iterations: int = 30
    time_budget_min: float | None = None
    rollouts: int = 4
    workers: int = 2
    reward: str = "jct"
    horizon_h: float = 2.0
    segment_h: float = 2.0
    keep: float = 0.25
    lr: float = 3e-4
    epochs: int = 3
    minibatch: int = 512
    clip: float = 0.2
    entropy: float = 0.001
    grad_clip: float = 1.0
    eval_every: int = 5


@dataclass(frozen=True)
class DL2EvalConfig:
    enabled: bool = True
    heuristics: list[str] = field(default_factory=lambda: ["optimus", "pollux", "drf", "tiresias-pollux"])


@dataclass(frozen=True)
class DL2Config:
    """A DL2 training config (``marlsched train --config`` with ``agent: dl2``)."""

    agent: str = "dl2"
    name: str = "dl2"
    seed: int = 0
    env: DL2EnvConfig = field(default_factory=DL2EnvConfig)
    model: DL2ModelConfig = field(default_factory=DL2ModelConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    train: DL2PGConfig = field(default_factory=DL2PGConfig)
    evaluation: DL2EvalConfig = field(default_factory=DL2EvalConfig)
    source: str = "<dict>"


def parse_dl2_config(
    data: Any, source: str = "<dict>", lines: dict | None = None, chk: ConfigChecker | None = None
) -> DL2Config:
    """Validate plain data (as loaded from YAML); errors name the file, line and key path, and the fix."""
    cfg, chk = start_config(DL2Config, data, source, lines, "dl2", chk)
    if cfg.train.reward not in REWARDS:
        raise chk.fail(("train", "reward"), f"unknown reward {cfg.train.reward!r}; choose one of {', '.join(REWARDS)}")
    check_policies(chk, ((("evaluation", "heuristics", str(i)), h) for i, h in enumerate(cfg.evaluation.heuristics)))
    if cfg.train.rollouts < 2:
        raise chk.fail(("train", "rollouts"), "the per-window baseline needs at least 2 rollouts per window")
    check_positive(
        chk,
        [
            (("train", "workers"), cfg.train.workers),
            (("train", "epochs"), cfg.train.epochs),
            (("train", "minibatch"), cfg.train.minibatch),
            (("train", "eval_every"), cfg.train.eval_every),
            (("train", "lr"), cfg.train.lr),
            (("train", "horizon_h"), cfg.train.horizon_h),
            (("train", "segment_h"), cfg.train.segment_h),
            (("train", "keep"), cfg.train.keep),
            (("warm_start", "windows"), cfg.warm_start.windows),
            (("warm_start", "keep"), cfg.warm_start.keep),
            (("warm_start", "epochs"), cfg.warm_start.epochs),
            (("warm_start", "lr"), cfg.warm_start.lr),
            (("warm_start", "minibatch"), cfg.warm_start.minibatch),
            (("model", "hidden"), cfg.model.hidden),
            (("env", "train", "count"), cfg.env.train.count),
            (("env", "load"), cfg.env.load),
        ],
    )
    check_positive(
        chk,
        [(("train", "iterations"), cfg.train.iterations), (("warm_start", "rounds"), cfg.warm_start.rounds)],
        zero=True,
    )
    for path, value in ((("train", "keep"), cfg.train.keep), (("warm_start", "keep"), cfg.warm_start.keep)):
        if value > 1:
            raise chk.fail(path, f"is a share of the steps: give a value in (0, 1], got {value}")
    check_windows(chk, cfg.env, ("train", "validation", "report"))
    return cfg


def load_dl2_config(path: str | Path) -> DL2Config:
    data, lines = read_yaml_config(path, "training config", TrainConfigError)
    return parse_dl2_config(data, str(path), lines)


def _simulator(env: dict, spec: str) -> Any:
    from cluster_sim.build import build_simulator

    return build_simulator(
        env["cluster"], spec, seed=0, interference="none",
        restart_cost=env["restart_cost"], start_cost=env["start_cost"],
    )  # fmt: skip


def _episode(job: tuple) -> dict[str, Any]:
    """One episode in a worker process: ``mode`` greedy, sample or teacher (Optimus), recording a ``keep``
    share of the steps (inside ``window`` when given, the episode ending ``until``); or a named heuristic."""
    state, hidden, env, spec, mode, seed, keep, window, until, heuristic = job
    from cluster_sim.policies import get_policy

    torch.set_num_threads(1)
    sim = _simulator(env, spec)
    if heuristic is not None:
        sched: Any = get_policy(heuristic, 0)
    else:
        net = DL2Net(hidden=hidden)
        if state is not None:
            net.load_state_dict(state)
        sched = DL2(net.eval(), mode=mode, record=keep > 0, keep=keep, window=window, seed=seed)
    started = time.perf_counter()
    result = sim.run(sched, until=until)
    end = np.asarray(result.end, dtype=np.float64)
    avg = float(result.metrics()["avg_jct"]) if until is None else float("nan")
    out: dict[str, Any] = {"avg_jct": avg, "seconds": time.perf_counter() - started}
    if heuristic is None:
        out.update(steps=sched.steps, agree=list(sched.agree))
        out.update(arrival=np.asarray(sim.jobs.arrival, dtype=np.float64), end=np.where(np.isnan(end), np.inf, end))
    return out


def _warm_episode(task: tuple) -> Chunk:
    """The warm start's steps on one training window: Optimus acting (``state`` None) or the network (greedy),
    each step labelled with Optimus' (a function of its arguments, for :func:`~marl.training.dagger.dagger`)."""
    _, hidden, env, spec, keep, state = task
    mode = "teacher" if state is None else "greedy"
    return {"steps": _episode((state, hidden, env, spec, mode, 0, keep, None, None, None))["steps"]}


def _span(env: dict, spec: str) -> tuple[float, float]:
    arrival = _simulator(env, spec).jobs.arrival
    return float(arrival[0]), float(arrival[-1])


def _worker_init() -> None:
    torch.set_num_threads(1)


class Trainer:
    """Runs the warm start (:meth:`warm_start`) and the policy gradient (:meth:`run`)."""

    def __init__(self, cfg: DL2Config, log: Log = print) -> None:
        self.cfg, self.log = cfg, log
        torch.manual_seed(cfg.seed)
        self.net = DL2Net(hidden=cfg.model.hidden)
        self.rng = np.random.default_rng(cfg.seed)
        env = cfg.env
        self.env = {"cluster": env.cluster, "restart_cost": env.restart_cost, "start_cost": env.start_cost}
        self.train_specs = env.train.specs(env.trace, env.load)
        self.val_specs = env.validation.specs(env.trace, env.load)
        self.pool = WorkerPool(cfg.train.workers, _worker_init)
        self.spans = list(self.pool.map(_span, [self.env] * len(self.train_specs), self.train_specs))

    def close(self) -> None:
        self.pool.close()

    def state(self) -> dict:
        return {k: v.clone() for k, v in self.net.state_dict().items()}

    def episodes(
        self,
        state: dict | None,
        specs: list[str],
        mode: str = "greedy",
        *,
        seeds: list[int] | None = None,
        keep: float = 0.0,
        window: tuple[float, float] | None = None,
        until: float | None = None,
        heuristic: str | None = None,
    ) -> list[dict[str, Any]]:
        seeds = seeds or [0] * len(specs)
        h = self.cfg.model.hidden
        jobs = [
            (state, h, self.env, s, mode, seed, keep, window, until, heuristic)
            for s, seed in zip(specs, seeds, strict=True)
        ]
        return list(self.pool.map(_episode, jobs))

    # -- the warm start ---------------------------------------------------------------------------------------
    def warm_start(self, rows: list[dict[str, Any]], started: float) -> dict[str, Any]:
        """DAgger (:func:`~marl.training.dagger.dagger`) on Optimus' steps, in this trainer's pool: each round
        draws its training windows; after each fit, accuracy on Optimus' validation states and the network's
        own validation episodes. Appends a progress row per round to ``rows``; returns the report."""
        ws = self.cfg.warm_start
        opt = torch.optim.Adam(self.net.parameters(), lr=ws.lr)
        teacher_val = self.episodes(None, self.val_specs, "teacher", keep=ws.keep) if self.val_specs else []
        self.teacher_val = float(np.mean([e["avg_jct"] for e in teacher_val])) if teacher_val else float("nan")
        held_out = [st for e in teacher_val for st in e["steps"]]
        report: dict[str, Any] = {"teacher": TEACHER, "teacher_validation_avg_jct": self.teacher_val, "rounds": []}

        def tasks(_rnd: int) -> list[tuple]:
            picks = self.rng.choice(len(self.train_specs), size=min(ws.windows, len(self.train_specs)), replace=False)
            return [(int(i), self.cfg.model.hidden, self.env, self.train_specs[int(i)], ws.keep) for i in picks]

        def fit(_rnd: int, data: Chunk) -> tuple[DL2Net, dict[str, float]]:
            loss = self._fit(data["steps"], opt, ws.epochs, ws.minibatch)
            on_teacher = self.accuracy(held_out)
            val = self.episodes(self.state(), self.val_specs, "greedy") if self.val_specs else []
            agree = np.sum([e["agree"] for e in val], axis=0) if val else np.zeros(2)
            val_jct = float(np.mean([e["avg_jct"] for e in val])) if val else float("nan")
            own = float(agree[0] / max(agree[1], 1))
            return self.net, {"loss": loss, "on_teacher": on_teacher, "own": own, "validation": val_jct}

        def progress(rnd: Round) -> tuple[dict[str, Any], str]:
            f = rnd.figures
            entry = {"round": rnd.index, "visited_by": TEACHER if rnd.index == 0 else "network", "labels": rnd.rows,
                     "loss": round(f["loss"], 4), "accuracy_on_teacher_states": round(f["on_teacher"], 4),
                     "accuracy_on_own_states": round(f["own"], 4),
                     "validation_avg_jct": round(f["validation"], 1)}  # fmt: skip
            report["rounds"].append(entry)
            row = {"stage": "warm_start", "iteration": rnd.index, "window": "", "sampled_return": "",
                   "validation_avg_jct": entry["validation_avg_jct"], "steps": rnd.rows, "loss": round(f["loss"], 5),
                   "entropy": "", "accuracy": entry["accuracy_on_own_states"], "seconds": rnd.seconds}  # fmt: skip
            return row, (
                f"warm start round {rnd.index} ({entry['visited_by']}'s states): {rnd.rows} labels, loss "
                f"{f['loss']:.4f}, accuracy {f['on_teacher']:.1%} on {TEACHER}'s validation states, "
                f"{entry['accuracy_on_own_states']:.1%} on its own; validation avg JCT {f['validation']:.0f} s "
                f"({TEACHER} {self.teacher_val:.0f} s), {rnd.seconds:.0f} s"
            )

        _, done, _ = dagger(ws.rounds, tasks, _warm_episode, fit, describe=lambda task: f"training window {task[0]}",
                            teacher=TEACHER, workers=self.pool.map, log=self.log, started=started,
                            report=progress)  # fmt: skip
        rows += done
        return report

    def _fit(self, data: list[tuple], opt: torch.optim.Optimizer, epochs: int, minibatch: int) -> float:
        losses = []
        batches = []
        for idx in _buckets(data, minibatch):
            part = [data[i] for i in idx]
            jobs, glob, mask = pad_steps(part)
            batches.append((jobs, glob, mask, _targets(part, 4, jobs.shape[1])))
        self.net.train()
        with _threads(self.cfg.train.workers):  # the workers are idle while the network fits
            for _ in range(epochs):
                for k in self.rng.permutation(len(batches)).tolist():
                    jobs, glob, mask, y = batches[k]
                    loss = torch.nn.functional.cross_entropy(self.net(jobs, glob, mask), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(float(loss.detach()))
        self.net.eval()
        return float(np.mean(losses)) if losses else 0.0

    def accuracy(self, steps: list[tuple]) -> float:
        """Share of recorded steps where the network's best step is Optimus'."""
        if not steps:
            return float("nan")
        hits = 0
        with torch.no_grad():
            for lo in range(0, len(steps), 1024):
                part = steps[lo : lo + 1024]
                jobs, glob, mask = pad_steps(part)
                pick = self.net(jobs, glob, mask).argmax(1)
                want = _targets(part, 4, jobs.shape[1])
                hits += int((pick == want).sum())
        return hits / len(steps)

    # -- the policy gradient -----------------------------------------------------------------------------------
    def run(self, out: Path, rows: list[dict[str, Any]], started: float) -> dict[str, Any]:
        pg = self.cfg.train
        opt = torch.optim.Adam(self.net.parameters(), lr=pg.lr)
        best_state = self.state()
        val = [e["avg_jct"] for e in self.episodes(best_state, self.val_specs)] if self.val_specs else []
        best_val = float(np.mean(val)) if val else float("inf")
        warm_val, best_iter = best_val, 0
        for it in range(1, pg.iterations + 1):
            w = int(self.rng.integers(len(self.train_specs)))
            first, last = self.spans[w]
            t0 = float(self.rng.uniform(first, max(first, last - pg.segment_h * 3600.0)))
            t1 = t0 + pg.segment_h * 3600.0
            seeds = [self.cfg.seed * 1_000_003 + it * 101 + r for r in range(pg.rollouts)]
            eps = self.episodes(
                self.state(), [self.train_specs[w]] * pg.rollouts, "sample",
                seeds=seeds, keep=pg.keep, window=(t0, t1), until=t1 + 3 * pg.horizon_h * 3600.0,
            )  # fmt: skip
            tau = pg.horizon_h * 3600.0
            ret0 = [float(returns_at(np.array([t0]), e["arrival"], e["end"], pg.reward, tau)[0]) for e in eps]
            loss, entropy, n = self._update(eps, opt)
            row = {
                "stage": "rl",
                "iteration": it,
                "window": w,
                "sampled_return": round(float(np.mean(ret0)), 3),
                "validation_avg_jct": "",
                "steps": n,
                "loss": round(loss, 5),
                "entropy": round(entropy, 4),
                "accuracy": "",
                "seconds": 0.0,
            }
            if self.val_specs and (it % pg.eval_every == 0 or it == pg.iterations):
                state = self.state()
                v = float(np.mean([e["avg_jct"] for e in self.episodes(state, self.val_specs)]))
                row["validation_avg_jct"] = round(v, 1)
                if v < best_val:
                    best_val, best_state, best_iter = v, state, it
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            self.log(
                f"RL iteration {it}: window {w}, sampled return {row['sampled_return']:+.2f} "
                f"(spread {max(ret0) - min(ret0):.2f}), {n} steps, "
                f"loss {loss:+.4f}, entropy {entropy:.3f}"
                + (f", validation {row['validation_avg_jct']:.0f} s" if row["validation_avg_jct"] != "" else "")
                + f", {row['seconds']:.0f} s"
            )
            write_dict_rows(rows, out / "progress.csv")
            if pg.time_budget_min is not None and time.perf_counter() - started > 60 * pg.time_budget_min:
                self.log(f"time budget of {pg.time_budget_min} min reached after RL iteration {it}")
                break
        if not self.val_specs:
            best_state, best_iter = self.state(), rows[-1]["iteration"]
        return {
            "state": best_state,
            "iteration": best_iter,
            "validation_avg_jct": best_val,
            "warm_validation": warm_val,
        }

    def _update(self, eps: list[dict[str, Any]], opt: torch.optim.Optimizer) -> tuple[float, float, int]:
        pg = self.cfg.train
        tau = pg.horizon_h * 3600.0
        steps = [st for ep in eps for st in ep["steps"]]
        if not steps:
            return 0.0, 0.0, 0
        times = [np.array([st[5] for st in ep["steps"]]) for ep in eps]
        adv = torch.from_numpy(leave_one_out_advantages(eps, times, pg.reward, tau)).float()
        n = len(steps)
        batches = []
        for idx in _buckets(steps, pg.minibatch):
            jobs, glob, mask = pad_steps([steps[i] for i in idx])
            act = _targets([steps[i] for i in idx], 3, jobs.shape[1])
            with torch.no_grad():
                old = torch.log_softmax(self.net(jobs, glob, mask), 1).gather(1, act[:, None])[:, 0]
            batches.append((jobs, glob, mask, act, old, adv[idx]))
        losses, entropies = [], []
        self.net.train()
        with _threads(pg.workers):
            self._epochs(batches, opt, losses, entropies)
        self.net.eval()
        return float(np.mean(losses)), float(np.mean(entropies)), n

    def _epochs(self, batches: list[tuple], opt: torch.optim.Optimizer, losses: list, entropies: list) -> None:
        pg = self.cfg.train
        for _ in range(pg.epochs):
            for k in self.rng.permutation(len(batches)).tolist():
                jobs, glob, mask, act, old, a = batches[k]
                logp_all = torch.log_softmax(self.net(jobs, glob, mask), 1)
                loss, entropy = clipped_step(logp_all, mask, act, old, a, opt, self.net.parameters(), clip=pg.clip,
                                             entropy=pg.entropy, grad_clip=pg.grad_clip)  # fmt: skip
                losses.append(loss)
                entropies.append(entropy)


def _buckets(steps: list[tuple], minibatch: int) -> list[np.ndarray]:
    """Minibatches of steps with similar job counts (sorted by count, stable), so that little is padded:
    most rounds have few jobs, a busy one hundreds."""
    order = np.argsort([len(st[0]) for st in steps], kind="stable")
    return [order[lo : lo + minibatch] for lo in range(0, len(order), minibatch)]


class _threads:
    """Torch threads for the duration of a block (the fit runs while the rollout workers wait)."""

    def __init__(self, n: int) -> None:
        self.n = max(int(n), 1)

    def __enter__(self) -> None:
        self.before = torch.get_num_threads()
        torch.set_num_threads(self.n)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.before)


def _targets(steps: list[tuple], column: int, width: int) -> torch.Tensor:
    """The step index in ``column`` (3: the one taken, 4: Optimus') of recorded steps, as logit indices of
    a batch padded to ``width`` jobs (stop, recorded as the step's job count, is the last logit)."""
    return torch.tensor([width if st[column] == len(st[0]) else st[column] for st in steps], dtype=torch.int64)


def plot_curve(rows: list[dict[str, Any]], path: Path, teacher: float) -> None:
    """Validation average JCT through the warm start's rounds and the RL iterations, beside the teacher's."""

    def after_warm_start(rl: list[dict[str, Any]]) -> list[float]:  # RL evaluations spread after the rounds
        x0 = sum(1 for r in rows if r["stage"] == "warm_start" and r["validation_avg_jct"] != "")
        return [x0 - 1 + r["iteration"] / max(rl[-1]["iteration"], 1) * len(rl) for r in rl]

    plot_learning_curve(
        rows, path,
        [Series("validation_avg_jct", "warm start (DAgger rounds)", marker="s",
                where=lambda r: r["stage"] == "warm_start", x_of=lambda kept: list(range(len(kept)))),
         Series("validation_avg_jct", "RL (greedy, every eval_every)", where=lambda r: r["stage"] == "rl",
                x_of=after_warm_start)],
        xlabel="warm-start round, then RL evaluations", ylabel="validation mean average JCT (s)",
        references={f"{TEACHER} (teacher)": teacher},
    )  # fmt: skip


def evaluate_on(trainer: Trainer, states: dict[str, dict], specs: dict[str, str], heuristics: list[str]):
    """Average JCT per workload of each network (greedy) and heuristic, on the same workloads."""
    out: dict[str, list[float]] = {}
    names = list(specs)
    for name, state in states.items():
        out[name] = [e["avg_jct"] for e in trainer.episodes(state, [specs[k] for k in names])]
    for h in heuristics:
        out[h] = [e["avg_jct"] for e in trainer.episodes(None, [specs[k] for k in names], heuristic=h)]
    return out


def _write_table(lines: list[str], title: str, results: dict[str, list[float]], reference: str) -> list[dict]:
    table = paired_table(results, reference)
    lines += [title, "", f"| scheduler | mean avg JCT (s) | std | vs {reference} (paired) |", "|---|---:|---:|---:|"]
    for r in table:
        lines.append(
            f"| {r['scheduler']} | {r['mean_avg_jct']:,.0f} | {r['std']:,.0f} | "
            f"{r['vs_reference']:+.1%} ± {r['vs_reference_std']:.1%} |"
        )
    lines.append("")
    return table


def train_dl2(
    cfg: DL2Config,
    out: str | Path,
    *,
    iterations: int | None = None,
    evaluate: bool | None = None,
    command: str = "",
    log: Log = print,
) -> dict[str, Any]:
    """Warm-start, train, select on the validation windows, export ``OUT/policy`` and (``evaluation``)
    compare with the heuristics: ``OUT/evaluation/{eval.json,comparison.md}``."""
    from marl.deploy.policy_files import atomic_folder

    if iterations is not None:
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, iterations=iterations))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    trainer = Trainer(cfg, log)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        warm = trainer.warm_start(rows, started)
        warm_state = trainer.state()
        write_dict_rows(rows, out / "progress.csv")
        best = trainer.run(out, rows, started)
        seconds = round(time.perf_counter() - started, 1)
        write_dict_rows(rows, out / "progress.csv")
        plot_curve(rows, out / "learning_curve.png", trainer.teacher_val)
        meta = {
            "hidden": cfg.model.hidden,
            "selected_iteration": best["iteration"],
            "validation_avg_jct": best["validation_avg_jct"],
            "warm_start": warm,
            "train_seconds": seconds,
            "command": command,
            "config": _plain(cfg),
            "torch": torch.__version__,
            "extra_files": [str(out / "progress.csv"), str(out / "learning_curve.png")],
        }
        net = DL2Net(hidden=cfg.model.hidden)
        net.load_state_dict(best["state"])
        save_dl2_policy(net, out / "policy", meta)
        log(
            f"selected RL iteration {best['iteration']} (0: the warm start; validation avg JCT "
            f"{best['validation_avg_jct']:.0f} s, warm start {best['warm_validation']:.0f} s, "
            f"{TEACHER} {trainer.teacher_val:.0f} s); {seconds:.0f} s; policy in {out / 'policy'}"
        )
        summary: dict[str, Any] = {"out": str(out), "iterations": len(rows), "selected": best["iteration"]}
        if evaluate if evaluate is not None else cfg.evaluation.enabled:
            states = {"dl2": best["state"], "dl2-warm-start": warm_state}
            heur = list(cfg.evaluation.heuristics)
            reference = heur[0] if heur else "dl2-warm-start"
            env = cfg.env
            doc: dict[str, Any] = {"reference": reference, "sets": {}}
            lines = [f"# {cfg.name}: DL2 against its warm start and the heuristics", ""]
            sets = {"report windows": dict(enumerate(env.report.specs(env.trace, env.load)))}
            if env.report_workloads:
                sets["report workloads"] = dict(env.report_workloads)
            for title, specs in sets.items():
                if not specs:
                    continue
                results = evaluate_on(trainer, states, {str(k): v for k, v in specs.items()}, heur)
                table = _write_table(lines, f"## {title} ({len(specs)}, {env.cluster})", results, reference)
                doc["sets"][title] = {
                    "workloads": {str(k): v for k, v in specs.items()},
                    "avg_jct": results,
                    "table": table,
                }
                log(f"{title}:")
                for r in table:
                    rel = f"{r['vs_reference']:+.1%} ± {r['vs_reference_std']:.1%}"
                    log(f"  {r['scheduler']:>18}: {r['mean_avg_jct']:>9,.0f} s  {rel} vs {reference}")
            with atomic_folder(out / "evaluation") as tmp:
                (tmp / "eval.json").write_text(json.dumps(doc, indent=2) + "\n")
                (tmp / "comparison.md").write_text("\n".join(lines))
            summary["evaluation"] = doc["sets"]
    finally:
        trainer.close()
    return summary


def _plain(cfg: DL2Config) -> dict[str, Any]:
    d = asdict(cfg)
    d.pop("source", None)
    return d


__all__ = ["DL2Config", "load_dl2_config", "parse_dl2_config", "train_dl2"]
