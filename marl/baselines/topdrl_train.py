"""Training TopDRL: policy gradient on trace windows with DeepRM's per-workload baseline.

Each iteration draws one training window and runs ``rollouts`` episodes on it, each picking jobs by
sampling the network's softmax with its own seed. The return of a pick made at time ``t`` is the reward
from ``t`` on, discounted in time (constant ``horizon_h``):

- ``throughput`` (the paper's throughput-based reward): every job completion after ``t`` counts
  ``exp(-(c - t) / horizon)``, so finishing more jobs sooner is worth more;
- ``jct``: minus the discounted job-seconds spent in the system after ``t`` (the average JCT's integrand).

The baseline of a pick is the mean return of the *other* rollouts of the same window at the same time
(DeepRM), so the workload's own difficulty, which dominates any return, cancels; the advantage is what
the pick did better than the policy's average on that very workload. The update is a clipped policy
gradient (PPO's surrogate, a few epochs over the iteration's picks, no value network).

Selection is held out by time: every ``eval_every`` iterations the greedy policy runs the validation
windows (the last of the training period, never trained on), and the best is exported. The report windows
(2017-11-01..14) are only evaluated at the end.
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
from marl.baselines.topdrl import TopDRL, TopDRLNet, save_topdrl_policy
from marl.baselines.training import (
    WindowsConfig,
    check_policies,
    check_positive,
    check_windows,
    paired_table,
    start_config,
)
from marl.training.config import ConfigChecker, TrainConfigError, read_yaml_config
from marl.training.learning_curve import Series, plot_learning_curve
from marl.training.policy_gradient import REWARDS, clipped_step, leave_one_out_advantages, returns_at
from marl.training.worker_map import WorkerPool

Log = Callable[[str], None]


@dataclass(frozen=True)
class TopDRLEnvConfig:
    """The cluster and the trace windows: trained on, selected on, reported on (held out by time)."""

    cluster: str = "small"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv"
    load: float = 0.9
    gpu_type: str = "any"  # on mixed GPUs: the order in which a job's one GPU type is tried
    train: WindowsConfig = field(default_factory=WindowsConfig)
    validation: WindowsConfig = field(default_factory=WindowsConfig)
    report: WindowsConfig = field(default_factory=WindowsConfig)


@dataclass(frozen=True)
class TopDRLModelConfig:
    """Width of the CNN branches (:class:`~marl.baselines.topdrl.TopDRLNet`) and the visible jobs."""

    hidden: int = 32
    pooled: int = 8  # server rows after the adaptive pooling of the cluster branch
    slots: int = 10  # visible waiting jobs (the oldest that fit)


@dataclass(frozen=True)
class PGConfig:
    """The policy-gradient iterations (see the module doc)."""

    iterations: int = 100
    time_budget_min: float | None = None  # stop after the iteration that passes this wall time
    rollouts: int = 4  # episodes per window per iteration (the baseline needs >= 2)
    workers: int = 2  # processes running the rollouts
    reward: str = "throughput"
    horizon_h: float = 6.0
    lr: float = 1e-3
    epochs: int = 4
    minibatch: int = 1024
    clip: float = 0.2
    entropy: float = 0.01
    grad_clip: float = 1.0
    eval_every: int = 10
    # episodes of segment_h hours from a random state of the window: the scheduler `around` runs before and
    # after, so all rollouts of an iteration start from the same state (null: whole-window episodes)
    segment_h: float | None = None
    around: str = "closest-gpus-backfill"


@dataclass(frozen=True)
class TopDRLEvalConfig:
    """The heuristics run beside the trained and the untrained network on the report windows (the
    first is the reference of the paired table)."""

    enabled: bool = True
    heuristics: list[str] = field(default_factory=lambda: ["closest-gpus", "qssf-np", "sjf"])


@dataclass(frozen=True)
class TopDRLConfig:
    """A TopDRL training config (``marlsched train --config`` with ``agent: topdrl``)."""

    agent: str = "topdrl"
    name: str = "topdrl"
    seed: int = 0
    env: TopDRLEnvConfig = field(default_factory=TopDRLEnvConfig)
    model: TopDRLModelConfig = field(default_factory=TopDRLModelConfig)
    train: PGConfig = field(default_factory=PGConfig)
    evaluation: TopDRLEvalConfig = field(default_factory=TopDRLEvalConfig)
    source: str = "<dict>"


def parse_topdrl_config(
    data: Any, source: str = "<dict>", lines: dict | None = None, chk: ConfigChecker | None = None
) -> TopDRLConfig:
    """Validate plain data (as loaded from YAML); errors name the file, line and key path, and the fix."""
    from cluster_sim.typed_placement import GPU_TYPE_ORDERS

    cfg, chk = start_config(TopDRLConfig, data, source, lines, "topdrl", chk)
    if cfg.train.reward not in REWARDS:
        raise chk.fail(("train", "reward"), f"unknown reward {cfg.train.reward!r}; choose one of {', '.join(REWARDS)}")
    if cfg.env.gpu_type not in GPU_TYPE_ORDERS:
        raise chk.fail(("env", "gpu_type"), f"choose one of {', '.join(GPU_TYPE_ORDERS)}, got {cfg.env.gpu_type!r}")
    check_policies(
        chk,
        [
            (("train", "around"), cfg.train.around),
            *((("evaluation", "heuristics", str(i)), h) for i, h in enumerate(cfg.evaluation.heuristics)),
        ],
    )
    if cfg.train.segment_h is not None and cfg.train.segment_h <= 0:
        raise chk.fail(("train", "segment_h"), f"must be > 0 hours (or null: whole windows), got {cfg.train.segment_h}")
    if cfg.train.rollouts < 2:
        raise chk.fail(("train", "rollouts"), "the per-window baseline needs at least 2 rollouts per window")
    check_positive(
        chk,
        [
            (("train", "iterations"), cfg.train.iterations),
            (("train", "workers"), cfg.train.workers),
            (("train", "epochs"), cfg.train.epochs),
            (("train", "minibatch"), cfg.train.minibatch),
            (("train", "eval_every"), cfg.train.eval_every),
            (("model", "hidden"), cfg.model.hidden),
            (("model", "pooled"), cfg.model.pooled),
            (("model", "slots"), cfg.model.slots),
            (("env", "train", "count"), cfg.env.train.count),
            (("train", "lr"), cfg.train.lr),
            (("train", "horizon_h"), cfg.train.horizon_h),
            (("env", "load"), cfg.env.load),
        ],
    )
    check_windows(chk, cfg.env, ("train", "validation", "report"))
    return cfg


def load_topdrl_config(path: str | Path) -> TopDRLConfig:
    data, lines = read_yaml_config(path, "training config", TrainConfigError)
    return parse_topdrl_config(data, str(path), lines)


class Segment:
    """TopDRL in ``[start, end)`` of simulated time, the heuristic ``around`` before and after: every
    rollout of a window reaches ``start`` in the same state, so their returns differ only by the picks
    made inside the segment. TopDRL's history of finished jobs keeps learning throughout."""

    def __init__(self, topdrl: TopDRL, around: Any, start: float, end: float) -> None:
        self.topdrl, self.around, self.start, self.end = topdrl, around, start, end
        self.name = f"{topdrl.name}-segment"
        self.one_gpu_type = True
        self.steps = topdrl.steps

    def reset(self, view: Any) -> None:
        self.topdrl.reset(view)
        self.around.reset(view)
        self.steps = self.topdrl.steps

    def schedule(self, view: Any) -> list:
        if self.start <= view.now < self.end:
            return self.topdrl.schedule(view)
        self.topdrl.observer.round_start(view)
        return self.around.schedule(view)


def _rollout(job: tuple) -> dict[str, Any]:
    """One sampled episode (runs in a worker process); ``segment`` = (around, start, end) or None."""
    state, model, cluster, spec, gpu_type, seed, sample, segment = job
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    torch.set_num_threads(1)
    net = TopDRLNet(hidden=model["hidden"], pooled=model["pooled"])
    net.load_state_dict(state)
    net.eval()
    sim = build_simulator(cluster, spec, seed=0, interference="none")
    sched: Any = TopDRL(net, slots=model["slots"], gpu_type=gpu_type, sample=sample, record=sample, seed=seed)
    if segment is not None:
        around, start, end = segment
        sched = Segment(sched, get_policy(around, 0), start, end)
    started = time.perf_counter()
    result = sim.run(sched)
    out: dict[str, Any] = {
        "avg_jct": float(result.metrics()["avg_jct"]),
        "seconds": time.perf_counter() - started,
        "decisions": len(sched.steps),
        "jobs": len(sim.jobs),
    }
    if sample:
        steps = sched.steps
        out.update(
            cluster=np.stack([s[0] for s in steps]) if steps else np.zeros(0),
            glob=np.stack([s[1] for s in steps]) if steps else np.zeros(0),
            queue=np.stack([s[2] for s in steps]) if steps else np.zeros(0),
            mask=np.stack([s[3] for s in steps]) if steps else np.zeros(0),
            action=np.array([s[4] for s in steps], dtype=np.int64),
            time=np.array([s[5] for s in steps], dtype=np.float64),
            arrival=np.asarray(sim.jobs.arrival, dtype=np.float64),
            end=np.asarray(result.end, dtype=np.float64),
        )
    return out


def _arrival_span(cluster: str, spec: str) -> tuple[float, float]:
    """(first, last) arrival time of a window's jobs in the simulator's clock."""
    from cluster_sim.build import build_simulator

    arrival = build_simulator(cluster, spec, seed=0, interference="none").jobs.arrival
    return float(arrival[0]), float(arrival[-1])


def _worker_init() -> None:
    torch.set_num_threads(1)


class Trainer:
    """Runs the iterations (see the module doc); :meth:`run` returns the progress rows."""

    def __init__(self, cfg: TopDRLConfig, log: Log = print) -> None:
        self.cfg = cfg
        self.log = log
        torch.manual_seed(cfg.seed)
        self.net = TopDRLNet(hidden=cfg.model.hidden, pooled=cfg.model.pooled)
        self.initial = {k: v.clone() for k, v in self.net.state_dict().items()}
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.train.lr)
        self.rng = np.random.default_rng(cfg.seed)
        env = cfg.env
        self.train_specs = env.train.specs(env.trace, env.load)
        self.val_specs = env.validation.specs(env.trace, env.load)
        self.model = asdict(cfg.model)
        self.spans = [_arrival_span(cfg.env.cluster, spec) for spec in self.train_specs]
        self.pool = WorkerPool(cfg.train.workers, _worker_init)

    def close(self) -> None:
        self.pool.close()

    def _jobs(
        self, state: dict, specs: list[str], seeds: list[int], sample: bool, segment: tuple | None = None
    ) -> list[dict[str, Any]]:
        env = self.cfg.env
        jobs = [
            (state, self.model, env.cluster, s, env.gpu_type, seed, sample, segment)
            for s, seed in zip(specs, seeds, strict=True)
        ]
        return list(self.pool.map(_rollout, jobs))

    def evaluate(self, state: dict, specs: list[str]) -> list[float]:
        return [r["avg_jct"] for r in self._jobs(state, specs, [0] * len(specs), sample=False)]

    def run(self, out: Path) -> tuple[list[dict[str, Any]], dict]:
        pg = self.cfg.train
        rows: list[dict[str, Any]] = []
        started = time.perf_counter()
        best_state = {k: v.clone() for k, v in self.net.state_dict().items()}
        best_val = float(np.mean(self.evaluate(best_state, self.val_specs))) if self.val_specs else float("inf")
        best_iter = 0
        self.log(f"iteration 0 (untrained): validation avg JCT {best_val:.0f} s over {len(self.val_specs)} windows")
        rows.append(
            {
                "iteration": 0,
                "window": "",
                "sampled_avg_jct": "",
                "validation_avg_jct": round(best_val, 1),
                "decisions": 0,
                "loss": "",
                "entropy": "",
                "decisions_per_s": "",
                "seconds": round(time.perf_counter() - started, 1),
            }
        )
        for it in range(1, pg.iterations + 1):
            w = int(self.rng.integers(len(self.train_specs)))
            state = {k: v.clone() for k, v in self.net.state_dict().items()}
            seeds = [self.cfg.seed * 1_000_003 + it * 101 + r for r in range(pg.rollouts)]
            segment = None
            if pg.segment_h is not None:
                first, last = self.spans[w]
                t0 = float(self.rng.uniform(first, max(first, last - pg.segment_h * 3600.0)))
                segment = (pg.around, t0, t0 + pg.segment_h * 3600.0)
            episodes = self._jobs(state, [self.train_specs[w]] * pg.rollouts, seeds, sample=True, segment=segment)
            loss, entropy, n = self._update(episodes)
            sim_s = sum(e["seconds"] for e in episodes)
            row = {
                "iteration": it,
                "window": w,
                "sampled_avg_jct": round(float(np.mean([e["avg_jct"] for e in episodes])), 1),
                "validation_avg_jct": "",
                "decisions": n,
                "loss": round(loss, 5),
                "entropy": round(entropy, 4),
                "decisions_per_s": round(sum(e["decisions"] for e in episodes) / max(sim_s, 1e-9), 1),
                "seconds": 0.0,
            }
            if self.val_specs and (it % pg.eval_every == 0 or it == pg.iterations):
                state = {k: v.clone() for k, v in self.net.state_dict().items()}
                val = float(np.mean(self.evaluate(state, self.val_specs)))
                row["validation_avg_jct"] = round(val, 1)
                if val < best_val:
                    best_val, best_state, best_iter = val, state, it
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            self.log(
                f"iteration {it}: window {w}, sampled avg JCT {row['sampled_avg_jct']:.0f} s, "
                f"{n} picks, loss {loss:+.4f}, entropy {entropy:.3f}"
                + (f", validation {row['validation_avg_jct']:.0f} s" if row["validation_avg_jct"] != "" else "")
                + f", {row['seconds']:.0f} s"
            )
            write_dict_rows(rows, out / "progress.csv")
            if pg.time_budget_min is not None and time.perf_counter() - started > 60 * pg.time_budget_min:
                self.log(f"time budget of {pg.time_budget_min} min reached after iteration {it}")
                break
        if not self.val_specs:
            best_state, best_iter = {k: v.clone() for k, v in self.net.state_dict().items()}, rows[-1]["iteration"]
        return rows, {
            "state": best_state,
            "iteration": best_iter,
            "validation_avg_jct": best_val,
            "seconds": round(time.perf_counter() - started, 1),
        }

    def _update(self, episodes: list[dict[str, Any]]) -> tuple[float, float, int]:
        pg = self.cfg.train
        tau = pg.horizon_h * 3600.0
        parts = [ep for ep in episodes if len(ep["action"])]
        if not parts:
            return 0.0, 0.0, 0
        times = [ep["time"] if len(ep["action"]) else ep["time"][:0] for ep in episodes]
        cluster = torch.from_numpy(np.concatenate([p["cluster"] for p in parts]))
        glob = torch.from_numpy(np.concatenate([p["glob"] for p in parts]))
        queue = torch.from_numpy(np.concatenate([p["queue"] for p in parts]))
        mask = torch.from_numpy(np.concatenate([p["mask"] for p in parts]))
        action = torch.from_numpy(np.concatenate([p["action"] for p in parts]))
        adv = torch.from_numpy(leave_one_out_advantages(episodes, times, pg.reward, tau)).float()
        n = len(action)
        with torch.no_grad():
            old = torch.log_softmax(self.net(cluster, glob, queue, mask), 1).gather(1, action[:, None])[:, 0]
        losses, entropies = [], []
        for _ in range(pg.epochs):
            order = torch.from_numpy(self.rng.permutation(n))
            for lo in range(0, n, pg.minibatch):
                b = order[lo : lo + pg.minibatch]
                logp_all = torch.log_softmax(self.net(cluster[b], glob[b], queue[b], mask[b]), 1)
                loss, entropy = clipped_step(logp_all, mask[b], action[b], old[b], adv[b], self.opt,
                                             self.net.parameters(), clip=pg.clip, entropy=pg.entropy,
                                             grad_clip=pg.grad_clip)  # fmt: skip
                losses.append(loss)
                entropies.append(entropy)
        return float(np.mean(losses)), float(np.mean(entropies)), n


def plot_curve(rows: list[dict[str, Any]], path: Path, references: dict[str, float]) -> None:
    """The greedy policy on the validation windows per iteration, beside the heuristics' validation figures."""
    plot_learning_curve(
        rows, path, [Series("validation_avg_jct", "TopDRL, greedy, validation windows")], xlabel="iteration",
        ylabel="mean average JCT (s)", references={f"{k}, validation windows": v for k, v in references.items()},
    )  # fmt: skip


def evaluate_on(
    cfg: TopDRLConfig, state: dict | None, specs: list[str], heuristics: list[str]
) -> dict[str, list[float]]:
    """Average JCT per window of the greedy policy (``state``), the same network untrained, and the
    heuristics, all on the same windows (one process)."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    torch.manual_seed(cfg.seed)
    untrained = TopDRLNet(hidden=cfg.model.hidden, pooled=cfg.model.pooled).eval()
    nets = {"topdrl-untrained": untrained}
    if state is not None:
        trained = TopDRLNet(hidden=cfg.model.hidden, pooled=cfg.model.pooled)
        trained.load_state_dict(state)
        nets = {"topdrl": trained.eval(), **nets}
    out: dict[str, list[float]] = {}
    for spec in specs:
        for name, net in nets.items():
            sim = build_simulator(cfg.env.cluster, spec, seed=0, interference="none")
            sched = TopDRL(net, slots=cfg.model.slots, gpu_type=cfg.env.gpu_type, name=name)
            out.setdefault(name, []).append(float(sim.run(sched).metrics()["avg_jct"]))
        for h in heuristics:
            sim = build_simulator(cfg.env.cluster, spec, seed=0, interference="none")
            out.setdefault(h, []).append(float(sim.run(get_policy(h, 0)).metrics()["avg_jct"]))
    return out


def train_topdrl(
    cfg: TopDRLConfig,
    out: str | Path,
    *,
    iterations: int | None = None,
    evaluate: bool | None = None,
    command: str = "",
    log: Log = print,
) -> dict[str, Any]:
    """Train, select on the validation windows, export ``OUT/policy`` and (``evaluation.enabled``) compare
    with the heuristics on the report windows: ``OUT/eval.json``, ``OUT/comparison.md``."""
    from marl.deploy.policy_files import atomic_folder

    if iterations is not None:
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, iterations=iterations))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    trainer = Trainer(cfg, log)
    try:
        rows, best = trainer.run(out)
        references = {}
        if trainer.val_specs:
            for h in cfg.evaluation.heuristics[:2]:
                references[h] = float(np.mean(evaluate_on(cfg, None, trainer.val_specs, [h])[h]))
    finally:
        trainer.close()
    plot_curve(rows, out / "learning_curve.png", references)
    meta = {
        "slots": cfg.model.slots,
        "hidden": cfg.model.hidden,
        "pooled": cfg.model.pooled,
        "gpu_type": cfg.env.gpu_type,
        "selected_iteration": best["iteration"],
        "validation_avg_jct": best["validation_avg_jct"],
        "validation_references": references,
        "train_seconds": best["seconds"],
        "command": command,
        "config": _plain(cfg),
        "torch": torch.__version__,
        "extra_files": [str(out / "progress.csv"), str(out / "learning_curve.png")],
    }
    net = TopDRLNet(hidden=cfg.model.hidden, pooled=cfg.model.pooled)
    net.load_state_dict(best["state"])
    save_topdrl_policy(net, out / "policy", meta)
    log(
        f"selected iteration {best['iteration']} (validation avg JCT {round(best['validation_avg_jct'], 1):.0f} s); "
        f"policy in {out / 'policy'}"
    )
    summary: dict[str, Any] = {"out": str(out), "iterations": rows[-1]["iteration"], "selected": best["iteration"]}
    if evaluate if evaluate is not None else cfg.evaluation.enabled:
        specs = cfg.env.report.specs(cfg.env.trace, cfg.env.load)
        results = evaluate_on(cfg, best["state"], specs, list(cfg.evaluation.heuristics))
        reference = cfg.evaluation.heuristics[0] if cfg.evaluation.heuristics else "topdrl-untrained"
        table = paired_table(results, reference)
        doc = {"windows": specs, "avg_jct": results, "reference": reference, "table": table}
        with atomic_folder(out / "evaluation") as tmp:
            (tmp / "eval.json").write_text(json.dumps(doc, indent=2) + "\n")
            lines = [
                f"# {cfg.name}: report windows ({len(specs)}, {cfg.env.cluster}, load {cfg.env.load})",
                "",
                f"| scheduler | mean avg JCT (s) | std | vs {reference} (paired) |",
                "|---|---:|---:|---:|",
            ]
            for r in table:
                lines.append(
                    f"| {r['scheduler']} | {r['mean_avg_jct']:,.0f} | {r['std']:,.0f} | "
                    f"{r['vs_reference']:+.1%} ± {r['vs_reference_std']:.1%} |"
                )
            (tmp / "comparison.md").write_text("\n".join(lines) + "\n")
        for r in table:
            rel = f"{r['vs_reference']:+.1%} ± {r['vs_reference_std']:.1%}"
            log(f"  {r['scheduler']:>24}: {r['mean_avg_jct']:>9,.0f} s  {rel} vs {reference}")
        summary["evaluation"] = table
    return summary


def _plain(cfg: TopDRLConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d.pop("source", None)
    return d


__all__ = ["TopDRLConfig", "load_topdrl_config", "parse_topdrl_config", "returns_at", "train_topdrl"]
