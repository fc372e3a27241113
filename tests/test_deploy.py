"""Deployment: agents grouped into Ray actors give the in-process decisions, and survive an actor crash."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from marl.deploy.export import export_policy_dir, load_marl_policy
from marl.training.config import parse_train_config
from marl.training.evaluation import eval_simulator
from marl.training.run_folder import RunFolder
from marl.training.train import module_spec_for, training_env_config
from marl.training.warm_start import run_warm_start

CFG = {
    "name": "deploy",
    "env": {"cluster": "small", "workload": "synthetic:30,load=0.95", "num_agents": 4, "reward_scale": 36000},
    "model": {"hidden": 16, "gpu_layers": 1, "server_layers": 1, "rack_layers": 1},
    "warm_start": {"episodes": 2, "epochs": 4, "batch_size": 32, "lr": 0.003},
    "evaluation": {"seeds": [1_000_001], "interference": "none"},
}
WORKLOAD = "synthetic:40,load=0.95"


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    """An exported warm-started policy (imitation of per-partition FIFO, no PPO: fast and schedules sensibly)."""
    root = tmp_path_factory.mktemp("deploy")
    cfg = parse_train_config(CFG)
    env_config = training_env_config(cfg)
    spec, _ = module_spec_for(cfg, env_config)
    run_warm_start(cfg, env_config, spec.build(), RunFolder(root), log=lambda m: None)
    export_policy_dir(root / "warm_start", root / "policy", log=lambda m: None)
    return root / "policy"


def _same_results(a, b) -> None:
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.end, b.end)
    np.testing.assert_array_equal(a.span, b.span)


@pytest.fixture(scope="module")
def reference(policy_dir: Path):
    """In-process TorchScript inference on the evaluation workload."""
    cfg = parse_train_config(CFG)
    sim = eval_simulator(cfg, WORKLOAD, 7)
    sched = load_marl_policy(policy_dir)
    result = sim.run(sched)
    assert result.metrics()["jobs_completed"] == len(sim.jobs)
    assert sched.policy_calls >= len(sim.jobs) // 2  # the policy made the decisions
    return sim, result, sched.policy_calls


@pytest.mark.parametrize(
    ("num_actors", "groups"), [(4, [[0], [1], [2], [3]]), (2, [[0, 1], [2, 3]]), (1, [[0, 1, 2, 3]])]
)
def test_actor_deployment_matches_in_process_inference(
    ray_local, policy_dir: Path, reference, num_actors: int, groups: list[list[int]]
) -> None:
    from marl.deploy.actors import RayActorPolicy

    sim, ref, calls = reference
    policy = RayActorPolicy(policy_dir, num_actors=num_actors, num_cpus=0.25)
    try:
        sched = policy.scheduler()
        result = sim.run(sched)
        _same_results(result, ref)
        assert sched.policy_calls == calls == policy.calls
        served = policy.info()
        assert [s["agents"] for s in served] == groups
        # agents are asked only when they have a choice; every asked agent was answered by its actor
        assert sum(s["decisions"] for s in served) == policy.agent_calls
        assert 0 < policy.agent_calls < 4 * calls  # some rounds needed no policy for some agent
        assert all(s["calls"] > 0 for s in served)
        assert sum(s["calls"] for s in served) <= num_actors * calls  # at most one call per actor a round
        assert len({s["pid"] for s in served}) == num_actors  # one process per actor
    finally:
        policy.shutdown()


def test_actors_default_to_one_per_cpu(ray_local, policy_dir: Path) -> None:
    from marl.deploy.actors import RayActorPolicy

    policy = RayActorPolicy(policy_dir)
    try:
        assert len(policy.actors) == 2  # ray_local has 2 CPUs; 4 agents
        assert [s["agents"] for s in policy.info()] == [[0, 1], [2, 3]]
    finally:
        policy.shutdown()


def test_killed_agent_actor_is_restarted_and_no_job_is_lost(ray_local, policy_dir: Path, reference) -> None:
    from marl.deploy.actors import RayActorPolicy
    from marl.deploy.export import marl_scheduler

    sim, ref, calls = reference
    policy = RayActorPolicy(policy_dir, num_actors=2, num_cpus=0.25)
    victim = 1  # serves agents 2 and 3
    pid_before = policy.info()[victim]["pid"]
    kill_at = calls // 3

    class KillMidEpisode:
        def __init__(self) -> None:
            self.n = 0

        def __call__(self, batch):
            self.n += 1
            if self.n == kill_at:
                ray_local.kill(policy.actors[victim], no_restart=False)  # crash; Ray restarts it
            return policy(batch)

    try:
        result = sim.run(marl_scheduler(KillMidEpisode(), policy.meta))
        assert result.metrics()["jobs_completed"] == len(sim.jobs)
        _same_results(result, ref)  # the restarted actor made the same decisions
        after = policy.info()[victim]
        assert after["pid"] != pid_before  # it really was a new process
        assert 0 < after["calls"] <= calls - kill_at + 1  # ...which served the rest of the episode
    finally:
        policy.shutdown()


@pytest.fixture(scope="module")
def priority_dir(tmp_path_factory) -> Path:
    """A priority-agent policy with random residual weights, so that its scores differ from QSSF's."""
    import torch

    from marl.deploy.priority_export import save_priority_policy
    from marl.models.priority_net import PriorityNet

    torch.manual_seed(1)
    net = PriorityNet(16)
    for p in net.score.parameters():
        torch.nn.init.normal_(p, std=1.0)
    return save_priority_policy(net, tmp_path_factory.mktemp("prio") / "policy", {})


@pytest.mark.slow
def test_priority_agents_on_actors_match_in_process_and_survive_a_crash(
    ray_local, priority_dir: Path, traces_dir: Path
) -> None:
    from cluster_sim.build import build_simulator
    from marl.deploy.actors import deploy_policy
    from marl.deploy.priority_export import load_priority_policy
    from marl.env.priority_agents import PriorityAgents

    start = 4_973_359 + 6 * 86400  # a held-out day of Philly at load 0.9: jobs queue
    spec = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,start={start},end={start + 86400},load=0.9"

    def sim():
        return build_simulator("small", spec, seed=3, restart_cost=30)

    ref = sim().run(load_priority_policy(priority_dir, num_agents=4))
    qssf = sim().run(PriorityAgents(num_agents=4))
    assert not np.array_equal(ref.start, qssf.start)  # the random residual reorders jobs: scores matter
    sched, policy = deploy_policy(priority_dir, num_agents=4, num_actors=2, num_cpus=0.25)
    try:
        _same_results(sim().run(sched), ref)
        served = policy.info()
        assert [s["agents"] for s in served] == [[0, 1], [2, 3]]
        assert sum(s["decisions"] for s in served) == policy.agent_calls == 4 * policy.calls > 0
        # a crashed actor is restarted from the same bytes and the run loses nothing
        pid, calls, inner = served[1]["pid"], policy.calls, sched.scorer

        def crash_once(obs):
            if inner.calls == calls + 5:
                ray_local.kill(policy.actors[1], no_restart=False)
            return inner(obs)

        sched.scorer = crash_once
        _same_results(sim().run(sched), ref)
        assert policy.info()[1]["pid"] != pid
    finally:
        policy.shutdown()
    with pytest.raises(ValueError, match="pass num_agents"):
        deploy_policy(priority_dir)
