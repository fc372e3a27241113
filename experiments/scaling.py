"""Agent-count scaling: the same data center split into K partition agents, for every K of the config.

Per K this measures (1) rollout throughput: environment steps per second that ``env_runners`` parallel
RLlib EnvRunners (Ray actors) sample with the shared HGNN policy; (2) per-decision latency: the wall time
of one policy round (one batched forward for all K agents) and that divided by K; (3) the wall time of
one evaluation episode in the simulator with ground-truth interference; (4) that episode's average JCT.

Policy per K: the HGNN's weights do not depend on the partition shape (only its graph buffers do), so the
config's warm start (imitating the heuristic expert, as in training) runs once at ``reference_agents`` and
its weights are loaded into the module of every K. No PPO here: the JCT column shows how an imitation
policy behaves as the data center is split finer, not a tuned policy per K.

Each K's row is written to ``scaling/agents_NNN.json`` when it finishes, so a rerun measures only the rest.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.results import write_atomic
from experiments.run_config import ExperimentConfig, absolute_spec

Log = Callable[[str], None]
SCALING_DIR = "scaling"


class TimedPolicy:
    """Wraps a ``policy_fn`` and accumulates the wall time of its calls."""

    def __init__(self, fn: Callable[[dict[str, np.ndarray]], np.ndarray]) -> None:
        self.fn, self.calls, self.seconds = fn, 0, 0.0

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.fn(batch)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def _env_config(cfg: ExperimentConfig, agents: int, workload: str) -> dict[str, Any]:
    assert cfg.train_config is not None
    return cfg.train_config.env_config(num_agents=agents, workload=workload)


def reference_weights(cfg: ExperimentConfig, folder: Path, log: Log) -> dict[str, Any]:
    """The shared network's parameters (warm-started at ``reference_agents``, or untrained); cached on disk."""
    import torch

    from marl.training.train import module_spec_for

    sc, t = cfg.scaling_config, cfg.train_config
    assert sc is not None and t is not None
    path = folder / f"reference_{sc.policy}_{sc.reference_agents}.pt"
    if path.is_file():
        log(f"scaling: reusing the reference weights {path}")
        return torch.load(path)
    env_config = _env_config(cfg, sc.reference_agents, sc.rollout_workload)
    spec, _ = module_spec_for(t, env_config)
    torch.manual_seed(t.seed)
    module = spec.build()
    if sc.policy == "warm-start":
        from marl.training.warm_start import collect_expert_data, split_holdout, train_imitation

        ws = t.warm_start
        t0 = time.perf_counter()
        data = collect_expert_data(
            env_config, strategy=ws.strategy, backfill=ws.backfill, episodes=ws.episodes, seed=t.seed,
            gamma=t.ppo.gamma,
        )  # fmt: skip
        train, holdout = split_holdout(data)
        history = train_imitation(
            module.net, train, epochs=ws.epochs, batch_size=ws.batch_size, lr=ws.lr, value_coef=ws.value_coef,
            seed=t.seed, holdout=holdout, log=None,
        )  # fmt: skip
        last = history[-1]
        acc = last.get("holdout_equivalent_accuracy", last.get("train_equivalent_accuracy", float("nan")))
        log(
            f"scaling: warm start at {sc.reference_agents} agents on {sc.rollout_workload}: {ws.episodes} expert "
            f"episodes, {len(data)} states, imitation accuracy {acc:.3f} ({time.perf_counter() - t0:.0f} s)"
        )
    weights = {name: p.detach().clone() for name, p in module.net.named_parameters()}
    tmp = path.with_name(f".{path.name}.tmp")
    torch.save(weights, tmp)
    tmp.replace(path)
    return weights


def module_for(cfg: ExperimentConfig, agents: int, weights: Mapping[str, Any], workload: str) -> tuple[Any, Any]:
    """(RLModule spec, module with the shared weights, env) for ``agents`` partitions."""
    from marl.training.train import module_spec_for

    assert cfg.train_config is not None
    spec, env = module_spec_for(cfg.train_config, _env_config(cfg, agents, workload))
    module = spec.build()
    missing, unexpected = module.net.load_state_dict(dict(weights), strict=False)
    buffers = {name for name, _ in module.net.named_buffers()}
    if unexpected or set(missing) - buffers:
        raise ValueError(f"shared weights do not fit {agents} agents: missing {missing}, unexpected {unexpected}")
    return spec, module, env


def rollout_throughput(cfg: ExperimentConfig, spec: Any, module: Any, agents: int) -> dict[str, float]:
    """Env and agent steps per second of ``env_runners`` RLlib EnvRunners sampling in parallel."""
    from marl.training.train import build_ppo_config, load_module_weights

    sc, t = cfg.scaling_config, cfg.train_config
    assert sc is not None and t is not None
    t_cfg = dataclasses.replace(t, ppo=dataclasses.replace(t.ppo, num_env_runners=sc.env_runners))
    env_config = _env_config(cfg, agents, sc.rollout_workload)
    t0 = time.perf_counter()
    algo = build_ppo_config(t_cfg, env_config, spec).build_algo()
    build_s = time.perf_counter() - t0
    try:
        load_module_weights(algo, module.get_state())
        steps = sc.rollout_steps

        def sample(runner: Any) -> tuple[int, int]:
            episodes = runner.sample(num_timesteps=steps, explore=True)
            return sum(e.env_steps() for e in episodes), sum(e.agent_steps() for e in episodes)

        group = algo.env_runner_group
        group.foreach_env_runner(sample, local_env_runner=False)  # warm-up: first resets, lazy imports
        t0 = time.perf_counter()
        counts = group.foreach_env_runner(sample, local_env_runner=False)
        dt = time.perf_counter() - t0
    finally:
        algo.stop()
    env_steps = sum(c[0] for c in counts)
    agent_steps = sum(c[1] for c in counts)
    return {
        "rollout_env_steps_per_s": env_steps / dt,
        "rollout_agent_steps_per_s": agent_steps / dt,
        "rollout_env_steps": env_steps,
        "rollout_s": dt,
        "algo_build_s": build_s,
    }


def evaluation_episode(cfg: ExperimentConfig, module: Any, env: Any, agents: int) -> dict[str, Any]:
    """One episode of the scaling workload with the policy in-process; wall time, latency and JCT."""
    from experiments.tasks import build_eval_simulator
    from marl.deploy.export import TorchScriptPolicy
    from marl.deploy.scheduler import MarlScheduler

    sc = cfg.scaling_config
    assert sc is not None
    spec = {
        "cluster": cfg.cluster,
        "workload": absolute_spec(sc.workload or cfg.workload),
        "seed": sc.seed,
        "perf_model": cfg.perf_model,
        "interference": cfg.interference,
        "interference_data": absolute_spec(cfg.interference_data) if cfg.interference_data else None,
        "restart_cost": cfg.restart_cost,
    }
    sim = build_eval_simulator(spec)
    policy = TimedPolicy(TorchScriptPolicy(module.net))
    sched = MarlScheduler(
        policy,
        env.layout,
        num_agents=agents,
        placements=env.config.placements,
        predictor=env.coord.predictor,
        partition_unit=env.config.partition_unit,
        name=f"marl-{agents}",
    )
    t0 = time.perf_counter()
    result = sim.run(sched)
    wall = time.perf_counter() - t0
    m = result.metrics()
    round_ms = 1000.0 * policy.seconds / max(policy.calls, 1)
    return {
        "episode_wall_s": wall,
        "policy_rounds": policy.calls,
        "policy_s": policy.seconds,
        "round_ms": round_ms,
        "decision_ms": round_ms / agents,
        "avg_jct": m["avg_jct"],
        "p95_jct": m["p95_jct"],
        "jobs_completed": m["jobs_completed"],
        "jobs_total": m["jobs_total"],
        "gpu_utilization": m["gpu_utilization"],
    }


def run_scaling(cfg: ExperimentConfig, out: Path, log: Log) -> dict[str, Any]:
    """Measure every agent count (skipping those measured before); returns the rows and a description."""
    sc = cfg.scaling_config
    assert sc is not None
    folder = out / SCALING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    weights = None
    rows = []
    for agents in sc.agents:
        path = folder / f"agents_{agents:03d}.json"
        if path.is_file():
            rows.append(json.loads(path.read_text()))
            log(f"scaling: {agents} agents measured before")
            continue
        if weights is None:
            weights = reference_weights(cfg, folder, log)
        t0 = time.perf_counter()
        spec, module, env = module_for(cfg, agents, weights, sc.rollout_workload)
        row: dict[str, Any] = {
            "agents": agents,
            "gpus_per_agent": env.view.num_gpus // agents,
            "parameters": sum(p.numel() for p in module.net.parameters()),
        }
        row |= evaluation_episode(cfg, module, env, agents)
        row |= rollout_throughput(cfg, spec, module, agents)
        row["measure_s"] = time.perf_counter() - t0
        write_atomic(path, json.dumps(row, indent=2) + "\n")
        rows.append(row)
        log(
            f"scaling: {agents} agents: {row['rollout_env_steps_per_s']:.1f} env steps/s "
            f"({sc.env_runners} EnvRunners), policy round {row['round_ms']:.2f} ms ({row['decision_ms']:.3f} ms per "
            f"agent decision), episode {row['episode_wall_s']:.1f} s, avg JCT {row['avg_jct']:.0f} s "
            f"({row['measure_s']:.0f} s)"
        )
    workload = sc.workload or cfg.workload
    rows[0]["baselines"] = _baselines(cfg, out, workload)
    how = (
        f"warm start (imitation of the {cfg.train_config.warm_start.strategy} expert) once at "
        f"{sc.reference_agents} agents, its weights shared by every agent count (the HGNN's weights do not "
        "depend on the partition size); no PPO"
        if sc.policy == "warm-start"
        else "an untrained network (same initial weights for every agent count)"
    )
    description = (
        f"Cluster `{cfg.cluster if isinstance(cfg.cluster, str) else cfg.cluster.get('name')}` split into K "
        f"partition agents. Rollout throughput: {sc.env_runners} parallel RLlib EnvRunners each sampling "
        f"{sc.rollout_steps} env steps of `{sc.rollout_workload}` with the policy (after a warm-up of the same size). "
        f"Policy round: one batched forward of the TorchScript policy for all K agents (per agent decision = "
        f"round / K). Evaluation episode: `{workload}` seed {sc.seed}, interference `{cfg.interference}`, "
        f"policy in-process. Policy: {how}."
    )
    return {"rows": rows, "description": description}


def _baselines(cfg: ExperimentConfig, out: Path, workload: str) -> dict[str, float]:
    """Average JCT of the experiment's heuristics on the same episode (when its tasks ran it)."""
    from experiments.tasks import TASKS_DIR, task_id

    sc = cfg.scaling_config
    assert sc is not None
    if workload != cfg.workload or sc.seed not in cfg.seeds:
        return {}
    found = {}
    for name in cfg.schedulers:
        path = out / TASKS_DIR / task_id(name, sc.seed) / "metrics.json"
        if path.is_file():
            found[name] = float(json.loads(path.read_text())["avg_jct"])
    return found
