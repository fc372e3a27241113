"""`marlsched train`: imitation warm start, then PPO on RLlib's new API stack, then evaluation.

A run folder holds everything a run produces, so that a killed run can be resumed from it:

- ``config.yaml``: the validated config; ``state.json``: last checkpointed iteration and its path;
- ``warm_start/``: the imitated module (``module/``) and ``metrics.json`` (loss and accuracy per epoch);
- ``checkpoints/iter_NNNNNN/``: ``Algorithm.save_to_path`` plus ``marl_meta.json`` (what export needs);
- ``progress.csv`` (one row per PPO iteration), ``tb/`` (TensorBoard, when a writer is installed),
  ``learning_curve.png``;
- ``policy/``: the exported policy (see :mod:`marl.export`); ``eval.json`` and ``comparison.md``: the
  trained policy against the heuristics on workload seeds that training never draws.

Training draws episode workloads from the env's seed stream; :class:`DisjointSeedWorkload` moves any draw
that hits an evaluation seed elsewhere, so evaluation is on unseen workloads by construction.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from cluster_sim.results import save_figure, write_atomic
from cluster_sim.workload import Workload
from cluster_sim.workload_spec import parse_workload_spec
from marl.config import TrainConfig, load_train_config, parse_train_config
from marl.env_config import ENV_DEFAULTS, EnvConfig

STATE_FILE = "state.json"
CONFIG_FILE = "config.yaml"
PROGRESS_FILE = "progress.csv"
CKPT_META = "marl_meta.json"
POLICY_ID = "shared"
KEEP_CHECKPOINTS = 3
CSV_COLUMNS = (
    "iteration", "env_steps", "episodes", "episode_return_mean", "avg_jct", "entropy", "policy_loss", "vf_loss",
    "vf_explained_var", "iter_s", "wall_s",
)  # fmt: skip

Log = Callable[[str], None]


@dataclass(frozen=True)
class DisjointSeedWorkload:
    """Workload factory for training envs: the spec string with the env's seed, except that a seed in
    ``banned`` (the evaluation seeds) is shifted out of the 31-bit range the env draws from."""

    spec: str
    banned: frozenset[int]

    def __call__(self, seed: int, cluster_gpus: int) -> Workload:
        while seed in self.banned:
            seed += 2**31
        return parse_workload_spec(self.spec, cluster_gpus=cluster_gpus, seed=seed)


def shared_policy(agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
    """Every agent maps to the one shared module."""
    return POLICY_ID


def _episode_metrics_callback() -> type:
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class EpisodeMetrics(RLlibCallback):
        """Logs the average JCT of each finished episode (from the env's final info) as ``avg_jct``."""

        def on_episode_end(self, *, episode, metrics_logger=None, **kwargs) -> None:
            infos = episode.get_infos(-1)
            info = next((i for i in infos.values() if isinstance(i, Mapping) and "avg_jct" in i), None)
            if info is not None and metrics_logger is not None:
                metrics_logger.log_value("avg_jct", float(info["avg_jct"]), reduce="mean")

    return EpisodeMetrics


def training_env_config(cfg: TrainConfig) -> dict[str, Any]:
    """The env_config of training envs (the workload spec wrapped so evaluation seeds are never drawn)."""
    env = cfg.env_config()
    spec = env.get("workload", ENV_DEFAULTS.workload)
    env["workload"] = DisjointSeedWorkload(spec, frozenset(cfg.evaluation.seeds))
    return env


def prepare_predictor(cfg: TrainConfig, run_dir: Path, log: Log) -> TrainConfig:
    """``cfg`` with ``env.interference_model`` set: trains the learned interference predictor into the run
    folder when the config asks for "learned" without naming a model (reused when already there)."""
    env = cfg.env
    if "learned" not in (env.get("interference"), env.get("predictor")) or env.get("interference_model"):
        return cfg
    path = run_dir / "interference_model.json"
    if not path.is_file():
        from interference.gavel_data import load_gavel_pairs
        from interference.training import TrainConfig as PredictorConfig
        from interference.training import fit

        pt = cfg.predictor_training
        t0 = time.perf_counter()
        log(f"interference predictor: fitting to {pt.data} ({pt.steps} steps)")
        fit(load_gavel_pairs(pt.data), PredictorConfig(steps=pt.steps, seed=cfg.seed)).save(path)
        log(f"interference predictor: {path} ({time.perf_counter() - t0:.0f} s)")
    return dataclasses.replace(cfg, env={**env, "interference_model": str(path.resolve())})


def checkpoint_meta(cfg: TrainConfig, iteration: int) -> dict[str, Any]:
    """What export needs besides the module: the env settings the policy was trained under."""
    env = EnvConfig.from_dict(cfg.env)
    predictor = env.predictor or env.interference
    return {
        "run": cfg.name,
        "iteration": iteration,
        "cluster": _cluster_spec(env.cluster),
        "num_agents": env.num_agents,
        "queue_slots": env.queue_slots,
        "placements": list(env.placements),
        "partition_unit": env.partition_unit,
        "queue_order": env.queue_order,
        "workload": env.workload,
        "interference": env.interference,
        "predictor": predictor,
        # learned: the model file (copied into an exported policy); oracle: Gavel's measured pairs, if any
        "interference_model": env.interference_model if predictor != "none" else None,
        "model": cfg.to_dict()["model"],
    }


def _cluster_spec(cluster: Any) -> Any:
    """Preset names stay names; a YAML file is inlined so the policy does not depend on its path."""
    from topology import CLUSTER_PRESETS

    if isinstance(cluster, str) and cluster not in CLUSTER_PRESETS and Path(cluster).is_file():
        return yaml.safe_load(Path(cluster).read_text())
    return cluster


# ---------------------------------------------------------------------------------------------- Ray


def init_ray(cfg: TrainConfig, address: str | None = None) -> bool:
    """Start Ray in-process (no address) or connect to a cluster; returns whether this call started it."""
    import ray

    if ray.is_initialized():
        return False
    address = address or cfg.ray.address
    if address:
        ray.init(address=address)  # num_cpus may not be passed when connecting
    else:
        ray.init(
            num_cpus=cfg.ray.num_cpus,
            object_store_memory=cfg.ray.object_store_mb * 1024**2,
            include_dashboard=False,
            log_to_driver=False,
        )
    return True


def build_ppo_config(cfg: TrainConfig, env_config: dict[str, Any], module_spec: Any) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    from marl.env import MarlSchedEnv

    p = cfg.ppo
    return (
        PPOConfig()
        .environment(MarlSchedEnv, env_config=env_config, disable_env_checking=True)
        .env_runners(
            num_env_runners=p.num_env_runners,
            num_cpus_per_env_runner=p.num_cpus_per_env_runner,
            sample_timeout_s=p.sample_timeout_s,
        )
        .learners(num_learners=0)
        .multi_agent(policies={POLICY_ID}, policy_mapping_fn=shared_policy)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={POLICY_ID: module_spec}))
        .training(
            train_batch_size_per_learner=p.train_batch_size,
            minibatch_size=p.minibatch_size,
            num_epochs=p.num_epochs,
            lr=p.lr,
            gamma=p.gamma,
            lambda_=p.lambda_,
            clip_param=p.clip_param,
            vf_clip_param=p.vf_clip_param,
            vf_loss_coeff=p.vf_loss_coeff,
            entropy_coeff=p.entropy_coeff,
            grad_clip=p.grad_clip,
        )
        .callbacks(_episode_metrics_callback())
        .debugging(seed=cfg.seed)
    )


def load_module_weights(algo: Any, state: Mapping[str, Any]) -> None:
    """Put ``state`` (an RLModule state dict) into the learner's shared module and push it to every
    EnvRunner, so sampling and learning both start from it."""
    algo.learner_group.set_weights({POLICY_ID: dict(state)})
    # EnvRunnerGroup.sync_weights is fire-and-forget and drops the call while the build's own weight push
    # is still in flight, so set the state on every runner and wait for it.
    runner_state = algo.learner_group.get_state(components="learner/rl_module", inference_only=True)["learner"]
    runner_state = {"rl_module": runner_state["rl_module"]}
    algo.env_runner_group.foreach_env_runner(lambda runner: runner.set_state(runner_state), local_env_runner=True)


def module_spec_for(cfg: TrainConfig, env_config: Mapping[str, Any]) -> tuple[Any, Any]:
    """(RLModuleSpec, env instance) for this run's cluster and agents."""
    from marl.env import MarlSchedEnv
    from marl.rl_module import hgnn_module_spec

    env = MarlSchedEnv(dict(env_config))
    return hgnn_module_spec(env.layout, env.hierarchy(), **cfg.to_dict()["model"]), env


# ---------------------------------------------------------------------------------------------- run


class RunFolder:
    """Paths and small state files of one run."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()  # RLlib's checkpointing takes absolute paths only (else "empty scheme")

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    def read_state(self) -> dict[str, Any]:
        if not self.state_path.is_file():
            return {"iteration": 0, "checkpoint": None, "warm_start": False, "wall_s": 0.0}
        return json.loads(self.state_path.read_text())

    def write_state(self, state: Mapping[str, Any]) -> None:
        write_atomic(self.state_path, json.dumps(dict(state), indent=2) + "\n")

    def read_rows(self) -> list[dict[str, str]]:
        path = self.root / PROGRESS_FILE
        if not path.is_file():
            return []
        with path.open(newline="") as f:
            return list(csv.DictReader(f))

    def write_rows(self, rows: list[Mapping[str, Any]]) -> None:
        out = [list(CSV_COLUMNS)] + [[_fmt(r.get(c)) for c in CSV_COLUMNS] for r in rows]
        write_atomic(self.root / PROGRESS_FILE, out)


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out


def iteration_row(result: Mapping[str, Any], iteration: int, iter_s: float, wall_s: float) -> dict[str, Any]:
    """One progress.csv row from an ``Algorithm.train()`` result."""
    er = result.get("env_runners", {})
    ln = result.get("learners", {}).get(POLICY_ID, {})
    return {
        "iteration": iteration,
        "env_steps": int(_num(er.get("num_env_steps_sampled_lifetime", result.get("num_env_steps_sampled_lifetime")))),
        "episodes": int(np.nan_to_num(_num(er.get("num_episodes", 0)))),
        "episode_return_mean": _num(er.get("episode_return_mean")),
        "avg_jct": _num(er.get("avg_jct")),
        "entropy": _num(ln.get("entropy")),
        "policy_loss": _num(ln.get("policy_loss")),
        "vf_loss": _num(ln.get("vf_loss")),
        "vf_explained_var": _num(ln.get("vf_explained_var")),
        "iter_s": iter_s,
        "wall_s": wall_s,
    }


def _summary_writer(logdir: Path) -> Any:
    """TensorBoard writer from torch (needs the tensorboard package) or tensorboardX; None if neither."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            return None
    return SummaryWriter(str(logdir))


def _progress_line(row: Mapping[str, Any], total: int) -> str:
    def f(key: str, fmt: str) -> str:
        v = row[key]
        return "-" if isinstance(v, float) and math.isnan(v) else format(v, fmt)

    return (
        f"iter {row['iteration']}/{total}  env steps {row['env_steps']}  return {f('episode_return_mean', '.2f')}  "
        f"avg JCT {f('avg_jct', '.0f')} s  entropy {f('entropy', '.3f')}  policy loss {f('policy_loss', '.4f')}  "
        f"vf loss {f('vf_loss', '.3g')}  {row['iter_s']:.1f} s"
    )


def run_warm_start(cfg: TrainConfig, env_config: Mapping[str, Any], module: Any, run: RunFolder, log: Log) -> dict:
    """Imitate the expert into ``module.net``; saves the module and the metrics under ``warm_start/``."""
    from marl.warm_start import collect_expert_data, split_holdout, train_imitation

    ws = cfg.warm_start
    t0 = time.perf_counter()
    data = collect_expert_data(
        env_config,
        strategy=ws.strategy,
        backfill=ws.backfill,
        episodes=ws.episodes,
        seed=cfg.seed,
        gamma=cfg.ppo.gamma,
    )
    collect_s = time.perf_counter() - t0
    log(
        f"warm start: {ws.episodes} expert episodes, {data.env_steps} env steps, {int(data.choice.sum())} "
        f"decision states, expert avg JCT {np.mean(data.avg_jct):.0f} s ({collect_s:.1f} s)"
    )
    train, holdout = split_holdout(data)
    history = train_imitation(
        module.net,
        train,
        epochs=ws.epochs,
        batch_size=ws.batch_size,
        lr=ws.lr,
        value_coef=ws.value_coef,
        seed=cfg.seed,
        holdout=holdout,
        log=log,
    )
    report = {
        "expert": {"strategy": ws.strategy, "backfill": ws.backfill, "avg_jct": data.avg_jct},
        "env_steps": data.env_steps,
        "states": len(data),
        "decision_states": int(data.choice.sum()),
        "collect_s": collect_s,
        "train_s": time.perf_counter() - t0 - collect_s,
        "history": history,
    }
    folder = run.root / "warm_start"
    tmp = run.root / "warm_start.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    module.save_to_path(str(tmp / "module"))  # tmp is absolute: run.root is resolved
    write_atomic(tmp / CKPT_META, json.dumps(checkpoint_meta(cfg, 0), indent=2) + "\n")
    write_atomic(tmp / "metrics.json", json.dumps(report, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return report


def save_checkpoint(algo: Any, cfg: TrainConfig, run: RunFolder, iteration: int) -> Path:
    """``algo.save_to_path`` into a temporary folder renamed into place; keeps the last few."""
    ckpts = run.root / "checkpoints"
    ckpts.mkdir(parents=True, exist_ok=True)
    final = ckpts / f"iter_{iteration:06d}"
    tmp = ckpts / f".iter_{iteration:06d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    algo.save_to_path(str(tmp.resolve()))
    write_atomic(tmp / CKPT_META, json.dumps(checkpoint_meta(cfg, iteration), indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(p for p in ckpts.glob("iter_*") if p.name != final.name)[: -(KEEP_CHECKPOINTS - 1)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def train(
    cfg: TrainConfig,
    out_dir: str | Path,
    *,
    resume: bool = False,
    iterations: int | None = None,
    address: str | None = None,
    evaluate: bool | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Run (or, with ``resume``, continue) training into ``out_dir``; returns a summary dict.

    ``iterations`` overrides ``cfg.ppo.iterations`` (the total, counting iterations already done).
    """
    import ray

    run = RunFolder(out_dir)
    run.root.mkdir(parents=True, exist_ok=True)
    state = run.read_state() if resume else {"iteration": 0, "checkpoint": None, "warm_start": False, "wall_s": 0.0}
    if not resume:
        write_atomic(run.root / CONFIG_FILE, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        run.write_state(state)
    total = iterations if iterations is not None else cfg.ppo.iterations
    cfg = prepare_predictor(cfg, run.root, log)
    env_config = training_env_config(cfg)
    started_ray = init_ray(cfg, address)
    writer = None
    algo = None
    summary: dict[str, Any] = {"out": str(run.root)}
    try:
        from ray.rllib.algorithms.algorithm import Algorithm

        done = int(state.get("iteration", 0))
        rows = [r for r in run.read_rows() if int(r["iteration"]) <= done] if resume else []
        if done >= total and state.get("checkpoint"):
            log(f"all {total} iterations done; exporting and evaluating {state['checkpoint']}")
        elif resume and state.get("checkpoint"):
            ckpt = (run.root / state["checkpoint"]).resolve()
            t0 = time.perf_counter()
            algo = Algorithm.from_checkpoint(str(ckpt))
            log(f"resumed from {ckpt} at iteration {done} ({time.perf_counter() - t0:.1f} s)")
        else:
            torch.manual_seed(cfg.seed)
            spec, _ = module_spec_for(cfg, env_config)
            module = spec.build()
            warm_dir = run.root / "warm_start"
            if cfg.warm_start.enabled and not (state.get("warm_start") and warm_dir.is_dir()):
                summary["warm_start"] = run_warm_start(cfg, env_config, module, run, log)
                state["warm_start"] = True
                run.write_state(state)
            elif cfg.warm_start.enabled:
                module.restore_from_path(str(warm_dir / "module"))
                log(f"warm start: reusing {warm_dir / 'module'}")
            t0 = time.perf_counter()
            algo = build_ppo_config(cfg, env_config, spec).build_algo()
            if cfg.warm_start.enabled:
                load_module_weights(algo, module.get_state())
            log(f"PPO: built with {cfg.ppo.num_env_runners} env runners ({time.perf_counter() - t0:.1f} s)")
        run.write_rows(rows)
        writer = _summary_writer(run.root / "tb") if algo is not None else None
        wall0 = float(state.get("wall_s", 0.0))
        t_start = time.perf_counter()
        budget_s = None if cfg.ppo.time_budget_min is None else cfg.ppo.time_budget_min * 60.0
        last_ckpt = state.get("checkpoint")
        it = done
        while algo is not None and it < total:
            it += 1
            t0 = time.perf_counter()
            result = algo.train()
            now = time.perf_counter()
            row = iteration_row(result, it, now - t0, wall0 + now - t_start)
            rows.append(row)
            run.write_rows(rows)
            if writer is not None:
                for key in CSV_COLUMNS[1:]:
                    value = row[key]
                    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
                        writer.add_scalar(f"train/{key}", value, it)
                writer.flush()
            log(_progress_line(row, total))
            out_of_time = budget_s is not None and row["wall_s"] >= budget_s
            if it % cfg.ppo.checkpoint_every == 0 or it == total or out_of_time:
                path = save_checkpoint(algo, cfg, run, it)
                last_ckpt = str(path.relative_to(run.root))
                state.update(iteration=it, checkpoint=last_ckpt, wall_s=row["wall_s"])
                run.write_state(state)
            if out_of_time:
                log(f"time budget of {cfg.ppo.time_budget_min} min reached after iteration {it}")
                break
        summary.update(iterations=it, checkpoint=last_ckpt, rows=rows)
        if rows:
            plot_learning_curve(rows, run.root / "learning_curve.png")
        if algo is not None:
            algo.stop()
            algo = None
        if last_ckpt is not None:
            from marl.export import export_policy_dir

            meta = export_policy_dir(run.root / last_ckpt, run.root / "policy", log=log)
            summary["policy"] = str(run.root / "policy")
            summary["policy_files"] = meta["files"]
        if (cfg.evaluation.enabled if evaluate is None else evaluate) and last_ckpt is not None:
            summary["eval"] = evaluate_run(cfg, run.root, log=log)
    finally:
        if writer is not None:
            writer.close()
        if algo is not None:
            algo.stop()
        if started_ray:
            ray.shutdown()
    return summary


def resume_config(run_dir: str | Path) -> TrainConfig:
    """The config a run folder was started with."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run folder (no {CONFIG_FILE}); pass the --out of a run")
    return parse_train_config(yaml.safe_load(path.read_text()), str(path))


# ---------------------------------------------------------------------------------------------- outputs


def plot_learning_curve(rows: list[Mapping[str, Any]], path: Path) -> None:
    """Average JCT and episode return per iteration (PNG, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    it = np.array([int(r["iteration"]) for r in rows])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key, label in (
        (axes[0], "avg_jct", "average JCT (s)"),
        (axes[1], "episode_return_mean", "episode return (sum over agents)"),
        (axes[2], "entropy", "policy entropy"),
    ):
        y = np.array([_num(r[key]) for r in rows])
        ok = ~np.isnan(y)
        ax.plot(it[ok], y[ok], marker="o", ms=3, alpha=0.5, label="per iteration")
        window = min(5, int(ok.sum()))
        if window >= 2:  # episodes draw different workloads, so single iterations are noisy
            smooth = np.convolve(y[ok], np.ones(window) / window, mode="valid")
            ax.plot(it[ok][window - 1 :], smooth, lw=2, label=f"mean of last {window}")
            ax.legend(fontsize=8)
        ax.set_xlabel("PPO iteration")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    save_figure(fig, path)


EVAL_METRICS = ("avg_jct", "p50_jct", "p95_jct", "avg_queue_delay", "makespan", "gpu_utilization", "jobs_completed")


def evaluate_run(cfg: TrainConfig, run_dir: str | Path, log: Log = print) -> dict[str, Any]:
    """Trained policy, warm-started policy, expert and heuristics on the evaluation seeds; writes
    ``eval.json`` and ``comparison.md`` into ``run_dir``."""
    from marl.expert import ExpertPolicy
    from marl.export import TorchScriptPolicy, load_marl_policy, marl_scheduler, read_metadata
    from marl.obs_layout import ObsLayout

    run_dir = Path(run_dir).resolve()
    policy_dir = run_dir / "policy"
    meta = read_metadata(policy_dir)
    schedulers: dict[str, Callable[[], Any]] = {"marl": lambda: load_marl_policy(policy_dir)}
    warm = run_dir / "warm_start" / "module"
    if warm.is_dir():
        from marl.rl_module import HGNNRLModule

        net = HGNNRLModule.from_checkpoint(str(warm)).net
        warm_fn = TorchScriptPolicy(net)
        schedulers["marl-warm-start"] = lambda: marl_scheduler(
            warm_fn, meta, policy_dir=policy_dir, name="marl-warm-start"
        )
    layout = ObsLayout.from_dict(meta["layout"])
    expert = ExpertPolicy(layout, meta["placements"], cfg.warm_start.strategy, cfg.warm_start.backfill)
    schedulers["expert"] = lambda: marl_scheduler(expert, meta, policy_dir=policy_dir, name="expert")
    from cluster_sim.policies import get_policy

    for name in cfg.evaluation.heuristics:
        schedulers[name] = lambda name=name: get_policy(name, seed=cfg.seed)
    per_seed: dict[str, list[dict]] = {name: [] for name in schedulers}
    workload = cfg.evaluation.workload or EnvConfig.from_dict(cfg.env).workload
    t0 = time.perf_counter()
    for seed in cfg.evaluation.seeds:
        sim = eval_simulator(cfg, workload, seed)
        for name, make in schedulers.items():
            result = sim.run(make())
            metrics = result.metrics()
            metrics["scheduler"] = name
            per_seed[name].append(metrics)
    means = {name: {k: float(np.mean([m[k] for m in runs])) for k in EVAL_METRICS} for name, runs in per_seed.items()}
    for name, runs in per_seed.items():
        means[name]["avg_jct_std"] = float(np.std([m["avg_jct"] for m in runs]))
    report = {
        "workload": workload,
        "seeds": list(cfg.evaluation.seeds),
        "interference": cfg.evaluation.interference,
        "cluster": meta["cluster"],
        "num_agents": meta["num_agents"],
        "mean": means,
        "per_seed": per_seed,
        "eval_s": time.perf_counter() - t0,
    }
    write_atomic(run_dir / "eval.json", json.dumps(report, indent=2, default=_json_default) + "\n")
    table = comparison_markdown(report)
    write_atomic(run_dir / "comparison.md", table)
    log(table)
    return report


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def eval_simulator(cfg: TrainConfig, workload_spec: str, seed: int) -> Any:
    """The evaluation simulator: the run's cluster and workload, the evaluation's ground-truth interference."""
    from cluster_sim.build import build_simulator

    env = EnvConfig.from_dict(cfg.env)
    mode = cfg.evaluation.interference
    data = {"oracle": cfg.evaluation.oracle_data, "learned": env.interference_model}.get(mode)
    return build_simulator(
        env.cluster,
        workload_spec,
        seed=seed,
        interference=mode,
        interference_data=data,
        restart_cost=env.restart_cost,
        perf_model=env.perf_model,
    )


def comparison_markdown(report: Mapping[str, Any]) -> str:
    """Markdown table of the mean metrics per scheduler, best average JCT first, relative to FIFO."""
    means = report["mean"]
    ref = means.get("fifo", {}).get("avg_jct")
    cluster = report["cluster"]
    if isinstance(cluster, Mapping):
        cluster = cluster.get("name", "an inline cluster spec")
    lines = [
        f"# MARL vs heuristics: {report['workload']} on {cluster}, {report['num_agents']} agents",
        "",
        f"Interference: {report['interference']}; workload seeds {report['seeds']} (never drawn in training); "
        "means over seeds.",
        "",
        "| scheduler | avg JCT (s) | ± std | vs FIFO | p50 JCT (s) | p95 JCT (s) | queue delay (s) | makespan (s) "
        "| GPU util | jobs done |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, m in sorted(means.items(), key=lambda kv: kv[1]["avg_jct"]):
        rel = f"{m['avg_jct'] / ref:.3f}" if ref else "-"
        lines.append(
            f"| {name} | {m['avg_jct']:.0f} | {m['avg_jct_std']:.0f} | {rel} | {m['p50_jct']:.0f} | "
            f"{m['p95_jct']:.0f} | {m['avg_queue_delay']:.0f} | {m['makespan']:.0f} | {m['gpu_utilization']:.3f} | "
            f"{m['jobs_completed']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def train_from_file(config_path: str | Path, out_dir: str | Path, **kwargs: Any) -> dict[str, Any]:
    return train(load_train_config(config_path), out_dir, **kwargs)
