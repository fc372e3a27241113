"""Meta-training the meta-RL placement policy, and measuring how it adapts to a shifted workload.

**Meta-training** (evolution strategies, antithetic, rank-based; Salimans et al. 2017): every iteration
draws one *task* from the training distribution: a load (one of ``env.loads``, else ``env.load``), a
cluster of ``env.servers`` servers whose GPU-type mix is drawn (Dirichlet over ``env.gpu_types``, listed in
a random order: a scheduler that knows nothing takes the first type with room, and that must not be the
fastest by construction), a tenant mix (the workload seed, which draws every tenant's mix of models) and
two training windows of the trace (held out by time from everything reported). Every candidate (the
weights ± ``sigma`` times a direction) plays one *trial* on it: the first window with an empty
:class:`~marl.baselines.metaplace.SpeedContext`, the second with the context the first left. Its fitness
is minus the sum of the two episodes' log average JCT; the candidates' centred ranks weight the directions
(Adam step). Every ``eval_every`` iterations the mean weights play fixed trials on the validation windows,
scored against type-blind LAS (the initial policy) on the same trials; the best, the initial one included,
is exported.

**Adaptation** (``adaptation``): on the shifted workloads (by default Sia's Philly sample on each cluster of
``adaptation.clusters``: other models, other GPU types, other mixes), for each workload ``w`` the policy
first plays ``k`` other workloads in turn (cyclic), carrying its context, then ``w``; ``k`` in ``episodes``
(0, 1, 2, 5, 10). Beside it, on the same workloads: the same weights never measuring anything (``no
adaptation``), the same network trained from scratch on the shifted workloads with the same episodes (one
ES direction per pair of episodes, context carried; and with ``scratch_episodes``), and the heuristics:
type-blind LAS and the profiled schedulers (``rounds-las``, ``gavel``) that read every job's speed on every
type.
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

from cluster_sim.results import write_dict_rows
from marl.baselines.metaplace import MetaPlace, MetaPlaceWeights, SpeedContext, save_metaplace_policy
from marl.baselines.training import (
    WindowsConfig,
    check_policies,
    check_positive,
    check_windows,
    start_config,
)
from marl.training.config import ConfigChecker, TrainConfigError, read_yaml_config
from marl.training.es import Step, evolve
from marl.training.learning_curve import Series, plot_learning_curve
from marl.training.worker_map import WorkerPool

Log = Callable[[str], None]
SERVERS = {"V100": "nvswitch-8", "A100": "nvswitch-8"}  # other types: 8 GPUs on PCIe
SIA = "../shared/traces/sia-sosp23"


def _sia_workloads() -> dict[str, str]:
    return {
        f"workload-{k}": f"pollux:{SIA}/workloads/philly/workload-{k}.csv,profiles={SIA}/traces" for k in range(1, 9)
    }


@dataclass(frozen=True)
class MetaEnvConfig:
    """The training distribution: clusters of ``servers`` 8-GPU servers with drawn mixes of ``gpu_types``,
    windows of ``trace`` at ``load`` (every job's model drawn from its tenant's mix, measured on each type)."""

    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv,model_rule=gavel,max_gpus=8"
    load: float = 0.9
    loads: list[float] = field(default_factory=list)  # each task draws one of these (empty: ``load`` always)
    servers: int = 12
    gpu_types: list[str] = field(default_factory=lambda: ["V100", "P100", "K80"])
    mix_concentration: float = 2.0
    tenant_mixes: int = 1000
    restart_cost: float = 30.0
    interval: float = 360.0
    stay: float = 0.1
    train: WindowsConfig = field(default_factory=lambda: WindowsConfig(2208559.0, 26, 0.5, 1.0))
    validation: WindowsConfig = field(default_factory=lambda: WindowsConfig(4440559.0, 6, 0.5, 0.5))


@dataclass(frozen=True)
class MetaModelConfig:
    hidden: int = 8


@dataclass(frozen=True)
class MetaESConfig:
    """Evolution strategies (see the module doc)."""

    iterations: int = 40
    time_budget_min: float | None = None
    pairs: int = 4
    sigma: float = 0.1
    lr: float = 0.05
    workers: int = 2
    eval_every: int = 5


@dataclass(frozen=True)
class AdaptationConfig:
    """The shifted workloads and how adaptation to them is measured (see the module doc)."""

    enabled: bool = True
    clusters: list[str] = field(default_factory=lambda: ["sia-hetero"])
    workloads: dict[str, str] = field(default_factory=_sia_workloads)
    restart_cost: float = 30.0
    start_cost: float = 30.0
    app_restart_costs: bool = True
    calibration: bool = True
    episodes: list[int] = field(default_factory=lambda: [0, 1, 2, 5, 10])
    scratch_episodes: int = 40
    heuristics: list[str] = field(default_factory=lambda: ["rounds-las", "gavel"])


@dataclass(frozen=True)
class MetaPlaceConfig:
    """A meta-RL placement training config (``marlsched train --config`` with ``agent: metaplace``)."""

    agent: str = "metaplace"
    name: str = "metaplace"
    seed: int = 0
    env: MetaEnvConfig = field(default_factory=MetaEnvConfig)
    model: MetaModelConfig = field(default_factory=MetaModelConfig)
    train: MetaESConfig = field(default_factory=MetaESConfig)
    adaptation: AdaptationConfig = field(default_factory=AdaptationConfig)
    source: str = "<dict>"


def parse_metaplace_config(
    data: Any, source: str = "<dict>", lines: dict | None = None, chk: ConfigChecker | None = None
) -> MetaPlaceConfig:
    """Validate plain data (as loaded from YAML); errors name the file, line and key path, and the fix."""
    cfg, chk = start_config(MetaPlaceConfig, data, source, lines, "metaplace", chk)
    check_positive(
        chk,
        [
            (("train", "pairs"), cfg.train.pairs),
            (("train", "sigma"), cfg.train.sigma),
            (("train", "lr"), cfg.train.lr),
            (("train", "workers"), cfg.train.workers),
            (("train", "eval_every"), cfg.train.eval_every),
            (("model", "hidden"), cfg.model.hidden),
            (("env", "servers"), cfg.env.servers),
            (("env", "load"), cfg.env.load),
            (("env", "interval"), cfg.env.interval),
            (("env", "mix_concentration"), cfg.env.mix_concentration),
            (("env", "tenant_mixes"), cfg.env.tenant_mixes),
        ],
    )
    check_positive(chk, [(("train", "iterations"), cfg.train.iterations)], zero=True)
    check_positive(chk, ((("env", "loads", str(i)), x) for i, x in enumerate(cfg.env.loads)))
    if cfg.env.train.count < 2:
        raise chk.fail(("env", "train", "count"), "a trial plays two training windows: give count >= 2")
    if len(cfg.env.gpu_types) < 2:
        raise chk.fail(("env", "gpu_types"), "placement by GPU type needs at least two types")
    from topology.servers import GPU_LINKS

    for i, t in enumerate(cfg.env.gpu_types):
        if t not in GPU_LINKS:
            raise chk.fail(("env", "gpu_types", str(i)), f"unknown GPU type {t!r}; choose from {', '.join(GPU_LINKS)}")
    check_windows(chk, cfg.env, ("train", "validation"))
    ad = cfg.adaptation
    if any(k < 0 for k in ad.episodes) or not ad.episodes:
        raise chk.fail(("adaptation", "episodes"), f"give episode counts >= 0, got {ad.episodes}")
    if ad.enabled and not ad.clusters:
        raise chk.fail(("adaptation", "clusters"), "name at least one cluster (a preset or a cluster YAML file)")
    if ad.enabled and len(ad.workloads) < 2:
        raise chk.fail(("adaptation", "workloads"), "adapting on other workloads needs at least two")
    check_policies(chk, ((("adaptation", "heuristics", str(i)), h) for i, h in enumerate(ad.heuristics)))
    return cfg


def load_metaplace_config(path: str | Path) -> MetaPlaceConfig:
    data, lines = read_yaml_config(path, "training config", TrainConfigError)
    return parse_metaplace_config(data, str(path), lines)


# -- episodes (run in worker processes) -----------------------------------------------------------------------
Episode = tuple[Any, str, int, dict]  # (cluster, workload spec, seed, simulator options)


def mix_cluster(gpu_types: list[str], fractions: np.ndarray, servers: int) -> dict[str, Any]:
    """A cluster of ``servers`` 8-GPU servers, one per rack (the mix is set per rack), with ``fractions`` of
    each GPU type (every type at least one server)."""
    counts = np.maximum(np.floor(np.asarray(fractions) * servers).astype(int), 1)
    while counts.sum() > servers:
        counts[int(np.argmax(counts))] -= 1
    while counts.sum() < servers:
        counts[int(np.argmin(counts))] += 1
    return {
        "name": "mix-" + "-".join(f"{t}x{c}" for t, c in zip(gpu_types, counts.tolist(), strict=True)),
        "pods": 1,
        "racks_per_pod": servers,
        "servers_per_rack": 1,
        "rack_oversubscription": 1,
        "pod_oversubscription": 1,
        "mix": [
            {"gpu_type": t, "fraction": c / servers, "server": SERVERS.get(t, "pcie-8")}
            for t, c in zip(gpu_types, counts.tolist(), strict=True)
        ],
    }


def _simulator(ep: Episode):
    from cluster_sim.build import build_simulator

    cluster, spec, seed, opts = ep
    return build_simulator(cluster, spec, seed=seed, **opts)


def _play(weights: MetaPlaceWeights, ep: Episode, ctx: SpeedContext, sched: dict, adapt: bool = True) -> float:
    pol = MetaPlace(weights, context=ctx, adapt=adapt, interval=sched["interval"], stay=sched["stay"])
    return float(_simulator(ep).run(pol).metrics()["avg_jct"])


def _trial(job: tuple) -> list[float]:
    """Average JCT of each episode of a trial, the context carried from one to the next."""
    flat, hidden, sched, episodes, adapt = job
    weights = MetaPlaceWeights.from_flat(np.asarray(flat), hidden)
    ctx = SpeedContext()
    return [_play(weights, ep, ctx, sched, adapt) for ep in episodes]


def _heuristic(job: tuple) -> float:
    from cluster_sim.policies import get_policy

    ep, name = job
    return float(_simulator(ep).run(get_policy(name, seed=0)).metrics()["avg_jct"])


def _adapt_chain(job: tuple) -> dict[int, float]:
    """The meta-trained weights on ``target`` after each of ``ks`` adaptation episodes of ``sequence``."""
    flat, hidden, sched, sequence, target, ks = job
    weights = MetaPlaceWeights.from_flat(np.asarray(flat), hidden)
    ctx, out = SpeedContext(), {}
    for k in range(max(ks) + 1):
        if k in ks:
            out[k] = _play(weights, target, ctx.copy(), sched)
        if k < max(ks):
            _play(weights, sequence[k], ctx, sched)
    return out


def _scratch_chain(job: tuple) -> dict[int, float]:
    """The same network trained from scratch on ``sequence``: each pair of episodes plays the weights ±
    sigma x one direction on one workload (the context carried through all), then takes an ES step."""
    flat, hidden, sched, sequence, target, ks, sigma, lr, seed = job
    rng = np.random.default_rng(seed)
    theta = np.asarray(flat, dtype=np.float64).copy()
    ctx, out, plus, eps = SpeedContext(), {}, 0.0, np.zeros_like(theta)
    for k in range(max(ks) + 1):
        if k in ks:
            out[k] = _play(MetaPlaceWeights.from_flat(theta, hidden), target, ctx.copy(), sched)
        if k == max(ks):
            break
        if k % 2 == 0:
            eps = rng.standard_normal(theta.shape)
            plus = np.log(_play(MetaPlaceWeights.from_flat(theta + sigma * eps, hidden), sequence[k // 2], ctx, sched))
        else:
            minus = np.log(_play(MetaPlaceWeights.from_flat(theta - sigma * eps, hidden), sequence[k // 2], ctx, sched))
            theta = theta + lr * (minus - plus) / (2 * sigma) * eps
    return out


# -- the trainer ------------------------------------------------------------------------------------------------
class Trainer:
    """Meta-trains by ES (:meth:`run`) and measures adaptation (:meth:`adaptation`)."""

    def __init__(self, cfg: MetaPlaceConfig, log: Log = print) -> None:
        self.cfg, self.log = cfg, log
        self.rng = np.random.default_rng(cfg.seed)
        env = cfg.env
        self.sched = {"interval": env.interval, "stay": env.stay}
        self.loads = list(env.loads) or [env.load]
        self.train_specs = {x: env.train.specs(env.trace, x) for x in self.loads}
        self.val_specs = {x: env.validation.specs(env.trace, x) for x in self.loads}
        self.weights = MetaPlaceWeights.initial(cfg.model.hidden, np.random.default_rng(cfg.seed))
        self.pool = WorkerPool(cfg.train.workers)
        vrng = np.random.default_rng(cfg.seed + 1)
        self.val_trials = [
            [self._episode(self.val_specs[x][i], cluster, seed), self._episode(self.val_specs[x][i + 1], cluster, seed)]
            for i in range(0, env.validation.count - 1, 2)
            for cluster, seed, x in [self._draw(vrng)]
        ]

    def close(self) -> None:
        self.pool.close()

    def _draw(self, rng: np.random.Generator) -> tuple[dict[str, Any], int, float]:
        """A cluster (drawn mix, types in a random order), a tenant mix and a load."""
        env = self.cfg.env
        mix = rng.dirichlet(np.full(len(env.gpu_types), env.mix_concentration))
        order = rng.permutation(len(env.gpu_types))
        cluster = mix_cluster([env.gpu_types[i] for i in order], mix[order], env.servers)
        seed = int(rng.integers(env.tenant_mixes))
        load = self.loads[int(rng.integers(len(self.loads)))] if len(self.loads) > 1 else self.loads[0]
        return cluster, seed, load

    def _episode(self, spec: str, cluster: dict[str, Any], seed: int) -> Episode:
        return (cluster, spec, seed, {"restart_cost": self.cfg.env.restart_cost})

    def trials(self, flats: list[np.ndarray], trials: list[list[Episode]], adapt: bool = True) -> list[list[float]]:
        h = self.cfg.model.hidden
        jobs = [(f.tolist(), h, self.sched, t, adapt) for f in flats for t in trials]
        return list(self.pool.map(_trial, jobs))

    def play(self, flats: list[np.ndarray], trials: list[list[Episode]]) -> np.ndarray:
        """Average JCTs: weights x trials x episodes (:func:`~marl.training.es.evolve`'s ``play``)."""
        return np.array(self.trials(flats, trials), dtype=np.float64).reshape(len(flats), len(trials), -1)

    def draw(self, rng: np.random.Generator) -> tuple[list[Episode], dict[str, Any]]:
        """A training task: a drawn cluster, tenant mix and load, and two of its windows."""
        cluster, seed, load = self._draw(rng)
        a, b = rng.choice(self.cfg.env.train.count, size=2, replace=False)
        trial = [self._episode(self.train_specs[load][int(k)], cluster, seed) for k in (a, b)]
        return trial, {"cluster": cluster["name"], "tenant_mix": seed, "load": load, "windows": f"{a},{b}"}

    def run(self, out: Path, rows: list[dict[str, Any]], started: float) -> dict[str, Any]:
        """ES (:func:`~marl.training.es.evolve`) from the initial weights, scored on the validation trials
        against them (type-blind LAS); one row per iteration in ``rows`` and ``OUT/progress.csv``."""

        def progress(step: Step) -> None:
            if step.iteration == 0:
                n = len(self.val_trials)
                self.log(f"validation trials: {n} x 2 episodes; the initial policy is type-blind LAS")
                return
            row = {"iteration": step.iteration, **step.about, "best_jct": round(float(step.jct.min()), 1),
                   "worst_jct": round(float(step.jct.max()), 1),
                   "validation_vs_blind": "" if step.gain is None else round(float(np.expm1(step.gain)), 4),
                   "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
            rows.append(row)
            val = "" if step.gain is None else f", validation {row['validation_vs_blind']:+.1%}"
            self.log(f"ES iteration {step.iteration}: {row['cluster']} at load {row['load']}, candidates "
                     f"{row['best_jct']:.0f}..{row['worst_jct']:.0f} s{val}, {row['seconds']:.0f} s")  # fmt: skip
            write_dict_rows(rows, out / "progress.csv")

        es = self.cfg.train
        return evolve(self.weights.flat(), self.play, self.draw, self.val_trials, sigma=es.sigma, lr=es.lr,
                      pairs=es.pairs, rng=self.rng, iterations=es.iterations, eval_every=es.eval_every,
                      minutes=es.time_budget_min, started=started, progress=progress, log=self.log)  # fmt: skip

    # -- adaptation to the shifted workloads --------------------------------------------------------------------
    def adaptation(self, flat: np.ndarray, initial: np.ndarray, cluster: str) -> dict[str, Any]:
        """The adaptation measurements on ``cluster`` (see the module doc)."""
        ad = self.cfg.adaptation
        names = list(ad.workloads)
        opts = {
            "restart_cost": ad.restart_cost,
            "start_cost": ad.start_cost,
            "app_restart_costs": ad.app_restart_costs,
            "calibration": ad.calibration,
        }
        eps = {n: (cluster, s, 0, opts) for n, s in ad.workloads.items()}
        ks = sorted(set(ad.episodes))
        longest = max(max(ks), ad.scratch_episodes)
        h = self.cfg.model.hidden

        def sequence(i: int) -> list[Episode]:
            others = names[i + 1 :] + names[:i]
            return [eps[others[k % len(others)]] for k in range(longest)]

        meta_jobs = [(flat.tolist(), h, self.sched, sequence(i), eps[n], ks) for i, n in enumerate(names)]
        sk = sorted(set(ks) | {ad.scratch_episodes})
        es = self.cfg.train
        scratch_jobs = [
            (initial.tolist(), h, self.sched, sequence(i), eps[n], sk, es.sigma, es.lr * 2, self.cfg.seed + i)
            for i, n in enumerate(names)
        ]
        meta = list(self.pool.map(_adapt_chain, meta_jobs))
        scratch = list(self.pool.map(_scratch_chain, scratch_jobs))
        frozen = [r[0] for r in self.trials([flat], [[eps[n]] for n in names], adapt=False)]
        blind = [r[0] for r in self.trials([initial], [[eps[n]] for n in names])]
        heur = {hname: list(self.pool.map(_heuristic, [(eps[n], hname) for n in names])) for hname in ad.heuristics}
        return {
            "cluster": cluster,
            "workloads": dict(ad.workloads),
            "episodes": ks,
            "meta": {str(k): [r[k] for r in meta] for k in ks},
            "scratch": {str(k): [r[k] for r in scratch] for k in sk},
            "no_adaptation": frozen,
            "type_blind": blind,
            "heuristics": heur,
        }


def adaptation_table(doc: dict[str, Any]) -> list[str]:
    """Markdown: mean ± std per episode count, and paired against no adaptation (the unadapted policy)."""
    frozen = np.asarray(doc["no_adaptation"])
    blind = np.asarray(doc["type_blind"])

    def cell(vals: list[float], ref: np.ndarray) -> str:
        v = np.asarray(vals)
        rel = v / ref - 1
        return f"{v.mean():,.0f} ± {v.std():,.0f} ({rel.mean():+.1%} ± {rel.std():.1%})"

    lines = [
        f"| adaptation episodes | meta-trained | from scratch | (paired vs no adaptation, {len(frozen)} workloads) |",
        "|---:|---|---|---|",
    ]
    for k in doc["episodes"]:
        lines.append(f"| {k} | {cell(doc['meta'][str(k)], frozen)} | {cell(doc['scratch'][str(k)], frozen)} | |")
    longest = max(int(k) for k in doc["scratch"])
    if str(longest) not in {str(k) for k in doc["episodes"]}:
        lines.append(f"| {longest} | | {cell(doc['scratch'][str(longest)], frozen)} | |")
    lines += ["", "| reference | avg JCT | vs no adaptation | vs type-blind |", "|---|---|---:|---:|"]
    refs = {"no adaptation (meta-trained, never measures)": frozen, "type-blind LAS (initial network)": blind}
    refs.update({f"{k} (profiled: reads every speed)": np.asarray(v) for k, v in doc["heuristics"].items()})
    for name, v in refs.items():
        rel_frozen, rel_blind = np.mean(v / frozen - 1), np.mean(v / blind - 1)
        lines.append(f"| {name} | {v.mean():,.0f} ± {v.std():,.0f} | {rel_frozen:+.1%} | {rel_blind:+.1%} |")
    return [*lines, ""]


def plot_adaptation(docs: list[dict[str, Any]], path: Path) -> None:
    """Mean average JCT against adaptation episodes, meta-trained and from scratch, beside the references;
    one panel per shifted cluster."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cluster_sim.results import save_figure

    fig, axes = plt.subplots(1, len(docs), figsize=(6.0 * len(docs), 3.9), squeeze=False)
    for ax, doc in zip(axes[0], docs, strict=True):
        ks = [int(k) for k in doc["episodes"]]
        for key, label, marker in (("meta", "meta-trained (context carried)", "o"), ("scratch", "from scratch", "s")):
            xs = sorted(int(k) for k in doc[key])
            ax.plot(xs, [np.mean(doc[key][str(k)]) for k in xs], marker=marker, label=label)
        refs = {"no adaptation": doc["no_adaptation"], "type-blind LAS": doc["type_blind"], **doc["heuristics"]}
        for i, (name, vals) in enumerate(refs.items()):
            ax.axhline(np.mean(vals), ls="--", lw=1, color=f"C{i + 2}", label=name)
        ticks = sorted(set(ks) | {int(k) for k in doc["scratch"]})
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlim(-0.2, max(ticks) * 1.1)
        ax.set_xticks(ticks)
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_title(Path(str(doc["cluster"])).stem, fontsize=9)
        ax.set_xlabel("adaptation episodes on the shifted workloads")
        ax.set_ylabel(f"mean average JCT over {len(doc['no_adaptation'])} workloads (s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path)


def plot_curve(rows: list[dict[str, Any]], path: Path) -> None:
    """Validation average JCT against the type-blind start, per ES iteration."""
    plot_learning_curve(
        rows, path, [Series("validation_vs_blind", scale=100.0)], xlabel="ES iteration",
        ylabel="validation average JCT vs type-blind (%)",
        references={"type-blind LAS (the initial network)": 0.0},
    )  # fmt: skip


def train_metaplace(
    cfg: MetaPlaceConfig,
    out: str | Path,
    *,
    iterations: int | None = None,
    evaluate: bool | None = None,
    command: str = "",
    log: Log = print,
) -> dict[str, Any]:
    """Meta-train, select on the validation trials, export ``OUT/policy`` and (``adaptation.enabled``)
    measure adaptation: ``OUT/evaluation/{adaptation.json,adaptation.md,adaptation.png}``."""
    from marl.deploy.policy_files import atomic_folder

    if iterations is not None:
        cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, iterations=iterations))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(cfg, log)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    try:
        initial = trainer.weights.flat()
        best = trainer.run(out, rows, started)
        seconds = round(time.perf_counter() - started, 1)
        if rows:
            plot_curve(rows, out / "learning_curve.png")
        weights = MetaPlaceWeights.from_flat(best["theta"], cfg.model.hidden)
        meta = {
            "interval": cfg.env.interval,
            "stay": cfg.env.stay,
            "selected_iteration": best["iteration"],
            "validation_vs_type_blind": float(np.expm1(best["validation"])),
            "train_seconds": seconds,
            "command": command,
            "config": _plain(cfg),
            "extra_files": [str(p) for p in (out / "progress.csv", out / "learning_curve.png") if p.is_file()],
        }
        save_metaplace_policy(weights, out / "policy", meta)
        log(
            f"selected iteration {best['iteration']} (validation {np.expm1(best['validation']):+.1%} vs type-blind "
            f"LAS); {seconds:.0f} s; policy in {out / 'policy'}"
        )
        summary: dict[str, Any] = {"out": str(out), "iterations": len(rows), "selected": best["iteration"]}
        if evaluate if evaluate is not None else cfg.adaptation.enabled:
            lines = [
                f"# {cfg.name}: adapting to shifted workloads",
                "",
                "Average JCT (s) on each workload after k adaptation episodes on the other workloads.",
                "",
            ]
            docs = []
            for cluster in cfg.adaptation.clusters:
                t0 = time.perf_counter()
                log(f"adaptation on {len(cfg.adaptation.workloads)} shifted workloads on {cluster} ...")
                doc = trainer.adaptation(best["theta"], initial, cluster)
                doc["seconds"] = round(time.perf_counter() - t0, 1)
                block = [f"## {cluster}", "", *adaptation_table(doc)]
                for line in block:
                    log(line)
                lines += block
                docs.append(doc)
            with atomic_folder(out / "evaluation") as tmp:
                (tmp / "adaptation.json").write_text(json.dumps({"shifts": docs}, indent=2) + "\n")
                (tmp / "adaptation.md").write_text("\n".join(lines))
                plot_adaptation(docs, tmp / "adaptation.png")
            summary["adaptation"] = docs
    finally:
        trainer.close()
    return summary


def _plain(cfg: MetaPlaceConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d.pop("source", None)
    return d


__all__ = [
    "MetaPlaceConfig",
    "adaptation_table",
    "load_metaplace_config",
    "mix_cluster",
    "parse_metaplace_config",
    "train_metaplace",
]
