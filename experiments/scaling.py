"""Agent-count scaling: the same data center split into K partition agents, for every K of the config.

The agents are the priority agents of the experiment's ``train: {agent: priority}`` section, with one
network for every K: its weights depend neither on the number of agents nor on their partitions' size,
so the same policy file runs at any K. The policy is the untrained network (QSSF's scores, with the
fastest type on mixed GPUs) or a shipped policy folder (``scaling.policy: DIR``); no training here.

Per K this measures (1) rollout throughput: environment and agent steps per second that ``env_runners``
parallel RLlib EnvRunners (Ray actors) sample with the policy; (2) per-decision latency: the wall time of
one policy round (one batched forward for all K agents) and that divided by K; (3) the wall time of one
evaluation episode in the simulator with ground-truth interference; (4) that episode's average JCT.

Each K's row is written to ``scaling/agents_NNN.json`` when it finishes, so a rerun measures only the rest.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.results import write_atomic
from experiments.run_config import ExperimentConfig, PriorityTrainSection, absolute_spec

Log = Callable[[str], None]
SCALING_DIR = "scaling"


class TimedPolicy:
    """Wraps a scorer and accumulates the wall time of its calls."""

    def __init__(self, fn: Callable[[dict[str, np.ndarray]], np.ndarray]) -> None:
        self.fn, self.calls, self.seconds = fn, 0, 0.0

    def __call__(self, batch: dict[str, np.ndarray]) -> np.ndarray:
        t0 = time.perf_counter()
        out = self.fn(batch)
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return out


def _section(cfg: ExperimentConfig) -> PriorityTrainSection:
    assert isinstance(cfg.train_config, PriorityTrainSection) and cfg.scaling_config is not None
    return cfg.train_config


def _policy_folder(cfg: ExperimentConfig) -> Path | None:
    policy = cfg.scaling_config.policy if cfg.scaling_config else "untrained"
    return None if policy == "untrained" else Path(policy).resolve()


def training_config(cfg: ExperimentConfig, agents: int) -> dict[str, Any]:
    """The priority training config of ``agents`` agents on the rollout workload, files made absolute."""
    section, sc = _section(cfg), cfg.scaling_config
    conf = {**section.config, "env": dict(section.config["env"]), "model": dict(section.config["model"])}
    env = conf["env"]
    env.update(num_agents=agents, workload=absolute_spec(sc.rollout_workload), placing=_placing(cfg))
    if env.get("interference_data"):
        env["interference_data"] = absolute_spec(env["interference_data"])
    folder = _policy_folder(cfg)
    if folder is not None:
        from marl.deploy.priority_export import read_priority_metadata

        conf["model"].update(init_policy=str(folder), hidden=int(read_priority_metadata(folder)["hidden"]))
    conf["ppo"] = {**conf["ppo"], "num_env_runners": sc.env_runners}
    return conf


def _placing(cfg: ExperimentConfig) -> bool:
    folder = _policy_folder(cfg)
    if folder is None:
        return bool(_section(cfg).config["env"].get("placing", False))
    from marl.deploy.priority_export import read_priority_metadata

    return bool(read_priority_metadata(folder).get("placing"))


def rollout_throughput(cfg: ExperimentConfig, agents: int) -> dict[str, float]:
    """Env and agent steps per second of ``env_runners`` RLlib EnvRunners sampling in parallel."""
    from marl.deploy.local_ray import stop_algorithm, without_known_noise
    from marl.env.priority_env import PriorityEnv
    from marl.training.priority_train import ppo_config

    sc = cfg.scaling_config
    conf = training_config(cfg, agents)
    # the workload is drawn here first: a spec the cluster cannot meet fails now, with its message, not in
    # the EnvRunners (whose errors go to Ray's worker logs and leave no runner to sample)
    PriorityEnv(conf["env"]).draw_simulator()
    t0 = time.perf_counter()
    with without_known_noise():  # the env runners start here
        algo = ppo_config(conf).build_algo()
    build_s = time.perf_counter() - t0
    try:
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
        stop_algorithm(algo)
    if len(counts) < sc.env_runners:
        raise RuntimeError(
            f"{agents} agents: {sc.env_runners - len(counts)} of {sc.env_runners} EnvRunners failed while sampling "
            "(their errors are in Ray's worker logs, /tmp/ray/session_latest/logs/worker-*.err)"
        )
    env_steps = sum(c[0] for c in counts)
    agent_steps = sum(c[1] for c in counts)
    return {
        "rollout_env_steps_per_s": env_steps / dt,
        "rollout_agent_steps_per_s": agent_steps / dt,
        "rollout_env_steps": env_steps,
        "rollout_s": dt,
        "algo_build_s": build_s,
    }


def evaluation_episode(cfg: ExperimentConfig, agents: int) -> dict[str, Any]:
    """One episode of the scaling workload with the policy in-process; wall time, latency and JCT."""
    from experiments.tasks import build_eval_simulator
    from marl.deploy.priority_export import load_priority_policy
    from marl.env.priority_env import PriorityEnvConfig
    from marl.env.rounds_agents import agents_class

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
    folder = _policy_folder(cfg)
    name = f"marl-{agents}"
    if folder is None:
        env = PriorityEnvConfig.from_dict(_section(cfg).config["env"])
        sched = agents_class(env.decision)(None, num_agents=agents, hysteresis=env.hysteresis, placing=env.placing,
                                           migrate=env.migrate, name=name)  # fmt: skip
    else:
        sched = load_priority_policy(folder, num_agents=agents, name=name)
    policy = sched.scorer = TimedPolicy(sched.scorer)
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
        "preemptions_per_job": m["preemptions_per_job"],  # a count that flips jobs wins its JCT by restarts
    }


def run_scaling(cfg: ExperimentConfig, out: Path, log: Log) -> dict[str, Any]:
    """Measure every agent count (skipping those measured before); returns the rows and a description."""
    from topology import build_cluster

    sc = cfg.scaling_config
    assert sc is not None
    folder = out / SCALING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    gpus = build_cluster(cfg.cluster).view.num_gpus
    rows = []
    todo = [k for k in sc.agents if not (folder / f"agents_{k:03d}.json").is_file()]
    if todo:  # each count is an evaluation episode and a rollout on RLlib's EnvRunners: minutes, with no line between
        log(
            f"scaling: measuring {len(todo)} agent count(s) ({', '.join(map(str, todo))}), one evaluation episode "
            f"and {sc.env_runners} EnvRunner(s) of {sc.rollout_steps} rollout steps each; each count takes a while "
            "(about 2 minutes on dc-1k on 2 cores)"
        )
    for n, agents in enumerate(sc.agents, 1):
        path = folder / f"agents_{agents:03d}.json"
        if path.is_file():
            rows.append(json.loads(path.read_text()))
            log(f"scaling: {agents} agents measured before")
            continue
        log(f"scaling: [{n}/{len(sc.agents)}] {agents} agents ...")
        t0 = time.perf_counter()
        row: dict[str, Any] = {"agents": agents, "gpus_per_agent": gpus // agents}
        row |= evaluation_episode(cfg, agents)
        row |= rollout_throughput(cfg, agents)
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
    policy = _policy_folder(cfg)
    how = (
        f"the policy folder `{sc.policy}`, the same file at every agent count"
        if policy is not None
        else "the untrained network (QSSF's scores"
        + (", each job on its fastest GPU type" if _placing(cfg) else "")
        + "), the same at every agent count"
    )
    description = (
        f"Cluster `{cfg.cluster if isinstance(cfg.cluster, str) else cfg.cluster.get('name')}` split into K "
        f"partition agents (priority agents). Rollout throughput: {sc.env_runners} parallel RLlib EnvRunners each "
        f"sampling {sc.rollout_steps} env steps of `{sc.rollout_workload}` with the policy (after a warm-up of the "
        f"same size). Policy round: one batched forward of the TorchScript policy for all K agents (per agent "
        f"decision = round / K). Evaluation episode: `{workload}` seed {sc.seed}, interference "
        f"`{cfg.interference}`, policy in-process. Policy: {how}; no training."
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
