"""`marlsched train`: imitation warm start, then PPO on RLlib's new API stack, then evaluation.

The phases live in their own modules: the warm start in :mod:`marl.training.warm_start`, evaluation in
:mod:`marl.training.evaluation`, the run folder (state for resuming, progress rows, learning curve, checkpoint
metadata) in :mod:`marl.training.run_folder`. This module builds PPO and runs its loop, checkpointing and resuming.

Training draws episode workloads from the env's seed stream; :class:`DisjointSeedWorkload` moves any draw
that hits an evaluation seed elsewhere, so evaluation is on unseen workloads by construction.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from cluster_sim.results import write_atomic
from cluster_sim.workload import Workload
from cluster_sim.workload_spec import parse_workload_spec
from marl.deploy.export import CKPT_META
from marl.env.placement_config import ENV_DEFAULTS
from marl.training.config import TrainConfig, load_train_config, parse_train_config
from marl.training.evaluation import evaluate_run
from marl.training.local_ray import start_local_ray
from marl.training.run_folder import (
    CONFIG_FILE,
    CSV_COLUMNS,
    POLICY_ID,
    RunFolder,
    checkpoint_meta,
    iteration_row,
    plot_learning_curve,
    progress_line,
    summary_writer,
    train_iteration,
)
from marl.training.warm_start import run_warm_start

KEEP_CHECKPOINTS = 3

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
        start_local_ray(cfg.ray.num_cpus, cfg.ray.object_store_mb * 1024**2)
    return True


def build_ppo_config(cfg: TrainConfig, env_config: dict[str, Any], module_spec: Any) -> Any:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    from marl.env.placement_env import MarlSchedEnv

    p = cfg.ppo
    env_config = {**env_config, "envs_per_runner": p.num_envs_per_env_runner}
    return (
        PPOConfig()
        .environment(
            MarlSchedEnv, env_config=env_config, disable_env_checking=True, normalize_actions=False, clip_actions=False
        )
        .env_runners(
            num_env_runners=p.num_env_runners,
            num_cpus_per_env_runner=p.num_cpus_per_env_runner,
            num_envs_per_env_runner=p.num_envs_per_env_runner,
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
    from marl.env.placement_env import MarlSchedEnv
    from marl.models.rl_module import hgnn_module_spec

    env = MarlSchedEnv(dict(env_config))
    return hgnn_module_spec(env.layout, env.hierarchy(), **cfg.to_dict()["model"]), env


# ---------------------------------------------------------------------------------------------- run


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
        writer = summary_writer(run.root / "tb") if algo is not None else None
        wall0 = float(state.get("wall_s", 0.0))
        t_start = time.perf_counter()
        budget_s = None if cfg.ppo.time_budget_min is None else cfg.ppo.time_budget_min * 60.0
        last_ckpt = state.get("checkpoint")
        it = done
        while algo is not None and it < total:
            it += 1
            t0 = time.perf_counter()
            result = train_iteration(algo, it)
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
            log(progress_line(row, total))
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
            from marl.deploy.export import export_policy_dir

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


def train_from_file(config_path: str | Path, out_dir: str | Path, **kwargs: Any) -> dict[str, Any]:
    return train(load_train_config(config_path), out_dir, **kwargs)
