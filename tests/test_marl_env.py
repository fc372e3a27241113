"""Multi-agent environment: masks, exact reward accounting, expert = heuristic, env = scheduler adapter,
no oracle durations in observations, dispatch rules, spill jobs, and a real RLlib PPO iteration."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from cluster_sim.model_rules import default_batch_sizes
from cluster_sim.model_zoo import MODEL_NAMES
from cluster_sim.policies import get_policy
from cluster_sim.protocol import ClusterStateView
from cluster_sim.simulator import Simulator
from cluster_sim.workload import Workload
from marl.deploy.scheduler import MarlScheduler, greedy
from marl.env.dispatch import SPILL, Dispatcher, owned_agents
from marl.env.obs_layout import CAND_EXTRA_FEATURES, GPU_FEATURES, OBS_KEYS
from marl.env.placement_env import MarlSchedEnv
from marl.training.expert import ExpertPolicy


def busy_workload(n: int, seed: int, tenants: int = 4, gap: float = 60.0, min_duration: float = 0.0) -> Workload:
    """Jobs of 1 to 32 GPUs arriving every ``gap`` seconds on average: ~300 GPUs of demand at the default gap,
    more than the 256 of the "small" cluster, so queues build up and placement choices matter."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([1, 2, 4, 8, 16, 32], size=n, p=[0.3, 0.15, 0.2, 0.2, 0.1, 0.05]).astype(np.int32)
    arrival = np.concatenate([[0.0], np.cumsum(rng.exponential(gap, n - 1))])
    model = rng.integers(0, len(MODEL_NAMES), n)
    return Workload(
        arrival=arrival,
        num_gpus=gpus,
        duration=min_duration + rng.lognormal(np.log(1800.0), 1.0, n),
        model=model.astype(np.int16),
        batch_size=default_batch_sizes(model, gpus),
        tenant=rng.integers(0, tenants, n).astype(np.int16),
        models=MODEL_NAMES,
        tenants=tuple(f"t{i}" for i in range(tenants)),
    )


def with_big_jobs(w: Workload, jobs: list[int], gpus: list[int]) -> Workload:
    """``w`` with the given jobs resized, e.g. beyond a partition so that they spill."""
    num = w.num_gpus.copy()
    num[jobs] = gpus
    return Workload(**{**w.__dict__, "num_gpus": num, "batch_size": num * 32})


def run_episode(env: MarlSchedEnv, choose, seed: int | None = None) -> tuple[dict[str, float], list, dict]:
    """Drive ``env`` to the end; returns per-agent reward sums, the observations seen, the final infos."""
    obs, _ = env.reset(seed=seed)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    seen = [obs]
    done = False
    while not done:
        obs, rewards, term, trunc, infos = env.step(choose(obs))
        for a, r in rewards.items():
            totals[a] += r
        seen.append(obs)
        done = term["__all__"]
        assert not trunc["__all__"]
    return totals, seen, infos


def random_masked(seed: int):
    rng = np.random.default_rng(seed)

    def choose(obs):
        return {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}

    return choose


def small_env(**overrides) -> MarlSchedEnv:
    config = {"cluster": "small", "workload": busy_workload(60, 3), "num_agents": 4, "seed": 3}
    return MarlSchedEnv({**config, **overrides})


def stacked(obs: dict) -> dict[str, np.ndarray]:
    return {k: np.stack([o[k] for o in obs.values()]) for k in OBS_KEYS}


# ---------------------------------------------------------------- masks, spaces, reward


@pytest.mark.parametrize("queue_order", ["arrival", "estimate"])
def test_random_masked_episode_respects_masks_spaces_and_sums_reward_to_total_jct(queue_order: str) -> None:
    env = small_env(queue_order=queue_order)
    totals, seen, infos = run_episode(env, random_masked(0), seed=11)
    result = env.last_result
    assert np.isfinite(result.end).all(), "every job finishes"  # the simulator validated every start
    space = env.layout.space()
    wait = env.layout.C
    for obs in seen[::3]:
        for o in obs.values():
            assert space.contains(o)
            mask = o["action_mask"]
            idle = o["gpu_feats"][:, 0].all()  # column "free": nothing held in the partition
            # wait is masked exactly when the partition is idle and some candidate is feasible
            assert mask[wait] == (0.0 if idle and mask[:wait].any() else 1.0)
            # a feasible candidate only uses free GPUs of its partition
            cand = o["cand_gpus"][mask[:wait] > 0]
            assert (cand <= o["gpu_feats"][None, :, 0]).all()
    expected = -float(np.sum(result.jct)) / 3600.0
    for a in env.possible_agents:
        assert totals[a] == pytest.approx(expected, rel=1e-9)
        assert infos[a]["avg_jct"] == pytest.approx(float(np.mean(result.jct)), rel=1e-12)
    assert len(set(totals.values())) == 1  # the reward is shared


def test_masked_action_is_rejected_with_the_agent_named() -> None:
    env = small_env()
    obs, _ = env.reset(seed=0)
    actions = {a: int(np.flatnonzero(o["action_mask"])[0]) for a, o in obs.items()}
    agent = next(a for a, o in obs.items() if (o["action_mask"] == 0).any())
    bad = int(np.flatnonzero(obs[agent]["action_mask"] == 0)[0])
    actions[agent] = bad
    with pytest.raises(ValueError, match=f"agent {agent} chose action {bad}, which its action_mask forbids"):
        env.step(actions)


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ValueError, match=r"unknown keys \['num_agent'\]"):
        MarlSchedEnv({"num_agent": 4})
    with pytest.raises(ValueError, match="interference='exact'"):
        MarlSchedEnv({"interference": "exact"})


def test_seeding_eval_fixed_training_varies() -> None:
    env = small_env(workload="synthetic:30")
    env.reset(seed=5)
    first = env.sim.jobs.arrival.copy()
    env.reset()
    assert not np.array_equal(first, env.sim.jobs.arrival), "training resets draw new workloads"
    again = small_env(workload="synthetic:30")
    again.reset(seed=5)
    assert np.array_equal(first, again.sim.jobs.arrival), "same seed, same workload"
    ev = small_env(workload="synthetic:30", eval=True)
    ev.reset()
    a = ev.sim.jobs.arrival.copy()
    ev.reset()
    assert np.array_equal(a, ev.sim.jobs.arrival), "eval resets repeat the workload"


def test_vector_slots_of_every_runner_draw_their_own_workloads() -> None:
    from ray.rllib.env.env_context import EnvContext

    cfg = {"workload": "synthetic:30", "seed": 7}
    drawn = {}
    for runner in (1, 2):
        for slot in range(2):
            env = MarlSchedEnv(EnvContext({**cfg, "envs_per_runner": 2}, worker_index=runner))
            env.reset(seed=7 + runner + slot)  # RLlib's first reset of this slot of this runner
            drawn[runner, slot] = env.workload_seed
    assert len(set(drawn.values())) == 4, f"copies replay each other's workloads: {drawn}"
    one = MarlSchedEnv(EnvContext({**cfg, "envs_per_runner": 1}, worker_index=2))
    one.reset(seed=9)
    plain = MarlSchedEnv(cfg)
    plain.reset(seed=9)
    assert one.workload_seed == plain.workload_seed, "one environment per runner keeps the seed as given"


def test_rllib_runner_steps_several_environments_with_one_module() -> None:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

    from marl.models.rl_module import hgnn_module_spec

    env_config = {"workload": "synthetic:12,load=1.5", "seed": 0, "envs_per_runner": 3}
    probe = MarlSchedEnv(env_config)
    spec = hgnn_module_spec(probe.layout, probe.hierarchy(), hidden=8, gpu_layers=1, server_layers=1)
    config = (
        PPOConfig()
        .environment(MarlSchedEnv, env_config=env_config, disable_env_checking=True)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=3)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kw: "shared")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={"shared": spec}))
        .debugging(seed=0)
    )
    runner = MultiAgentEnvRunner(config=config)
    try:
        episodes = runner.sample(num_timesteps=30, random_actions=False)
        assert sum(ep.env_steps() for ep in episodes) >= 30
        seeds = [env.unwrapped.workload_seed for env in runner.env.envs]
        assert len(set(seeds)) == 3, f"the runner's environments share workloads: {seeds}"
        assert len({ep.id_ for ep in episodes}) >= 3  # one episode (chunk) per environment at least
    finally:
        runner.stop()


# ---------------------------------------------------------------- expert and scheduler adapter


@pytest.mark.parametrize(
    ("cluster", "strategy", "policy"),
    [("small", "consolidate", "fifo"), ("small-mixed", "closest-gpus", "closest-gpus")],
)
def test_single_agent_expert_reproduces_the_heuristic_exactly(cluster: str, strategy: str, policy: str) -> None:
    env = MarlSchedEnv({"cluster": cluster, "workload": busy_workload(120, 7), "num_agents": 1, "eval": True})
    expert = ExpertPolicy(env.layout, env.config.placements, strategy=strategy)
    run_episode(env, expert.act)
    mine = env.last_result
    ref = Simulator(env.view, env.sim.jobs, perf=env.perf).run(get_policy(policy))
    assert np.array_equal(mine.start, ref.start)
    assert np.array_equal(mine.end, ref.end)
    assert mine.metrics()["avg_jct"] == ref.metrics()["avg_jct"]
    assert (ref.queue_delay > 0).sum() > 20, "the workload must queue for the comparison to mean something"


def _linear_policy(layout, seed: int):
    """A fixed non-trivial scorer of candidates from their features: exercises every feature column."""
    w = np.random.default_rng(seed).normal(size=layout.Fc)

    def policy_fn(batch: dict[str, np.ndarray]) -> np.ndarray:
        scores = batch["cand_feats"] @ w + batch["queue_feats"][..., 2].sum(-1, keepdims=True)
        wait = np.full((scores.shape[0], 1), 0.5)
        return np.concatenate([scores, wait], axis=1)

    return policy_fn


@pytest.mark.parametrize("who", ["expert", "linear"])
def test_scheduler_adapter_equals_env(who: str) -> None:
    env = small_env(workload=with_big_jobs(busy_workload(80, 5, tenants=3), [10, 40], [96, 128]), eval=True)
    expert = ExpertPolicy(env.layout, env.config.placements, backfill=True)
    policy_fn = expert if who == "expert" else _linear_policy(env.layout, 1)

    def choose(obs):
        acts = greedy(policy_fn(stacked(obs)), stacked(obs)["action_mask"])
        return dict(zip(obs, acts.tolist(), strict=True))

    run_episode(env, choose)
    in_env = env.last_result
    sched = MarlScheduler(policy_fn, env.layout, num_agents=4, placements=env.config.placements)
    sim = Simulator(env.view, env.sim.jobs, perf=env.perf, record_history=True)
    deployed = sim.run(sched)
    assert np.array_equal(in_env.start, deployed.start)
    assert np.array_equal(in_env.end, deployed.end)
    assert np.array_equal(in_env.span, deployed.span)
    assert sched.coord.dispatch.handoffs == env.coord.dispatch.handoffs
    assert (env.coord.dispatch.agent_of[[10, 40]] == SPILL).all()
    assert sched.policy_calls > 0
    other = ExpertPolicy(env.layout, env.config.placements, strategy="spread")
    assert not np.array_equal(Simulator(env.view, env.sim.jobs, perf=env.perf).run(
        MarlScheduler(other, env.layout, num_agents=4)).span, deployed.span), "placements must matter"  # fmt: skip


def _declared_members(protocol: type) -> set[str]:
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, typing.Protocol, typing.Generic) or not getattr(cls, "_is_protocol", False):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names


class _DeclaredOnly:
    """A simulator seen through ClusterStateView alone: reading any member it does not declare fails."""

    members = _declared_members(ClusterStateView)

    def __init__(self, sim: Simulator) -> None:
        self._sim = sim

    def __getattr__(self, name: str):
        if name not in self.members:
            raise AttributeError(f"{name!r} is not declared by ClusterStateView")
        return getattr(self._sim, name)


class _ThroughProtocol:
    """Hands ``inner`` the simulator as :class:`_DeclaredOnly` at every call."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seen: _DeclaredOnly | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def _view(self, sim: Simulator) -> _DeclaredOnly:
        if self.seen is None or self.seen._sim is not sim:
            self.seen = _DeclaredOnly(sim)
        return self.seen

    def reset(self, sim: Simulator) -> None:
        self.inner.reset(self._view(sim))

    def schedule(self, sim: Simulator):
        return self.inner.schedule(self._view(sim))


def test_coordinator_reads_only_the_declared_view() -> None:
    env = small_env(workload=busy_workload(60, 7), eval=True)
    expert = ExpertPolicy(env.layout, env.config.placements, backfill=True)
    sim = Simulator(env.view, env.make_workload(0), perf=env.perf)
    assert isinstance(sim, ClusterStateView)
    direct = sim.run(MarlScheduler(expert, env.layout, num_agents=4))
    declared = Simulator(env.view, env.make_workload(0), perf=env.perf).run(
        _ThroughProtocol(MarlScheduler(expert, env.layout, num_agents=4))
    )
    assert np.array_equal(direct.start, declared.start) and np.array_equal(direct.end, declared.end)
    with pytest.raises(AttributeError, match="not declared"):
        _DeclaredOnly(sim)._state  # noqa: B018


def test_scheduler_rejects_a_layout_of_another_cluster() -> None:
    env = small_env()
    sched = MarlScheduler(lambda b: None, env.layout, num_agents=2)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="does not fit 'small' split into 2 partitions"):
        sched.reset(env.sim)


# ---------------------------------------------------------------- no oracle facts


@pytest.mark.parametrize("queue_order", ["arrival", "estimate"])
def test_observations_do_not_depend_on_durations_until_a_job_completes(queue_order: str) -> None:
    base = busy_workload(60, 4, gap=30.0, min_duration=900.0)
    rng = np.random.default_rng(0)
    other = Workload(**{**base.__dict__, "duration": base.duration * rng.uniform(0.5, 3.0, len(base))})
    envs = [small_env(workload=w, eval=True, queue_order=queue_order) for w in (base, other)]
    expert = ExpertPolicy(envs[0].layout, envs[0].config.placements, backfill=True)
    obs = [e.reset()[0] for e in envs]
    compared = 0
    while all(e.sim.num_completed == 0 for e in envs):
        for a in obs[0]:
            for k in OBS_KEYS:
                assert np.array_equal(obs[0][a][k], obs[1][a][k]), (a, k, compared)
        compared += 1
        acts = expert.act(obs[0])
        obs = [e.step(acts)[0] for e in envs]
    assert compared >= 10
    assert envs[0].sim.now != envs[1].sim.now or envs[0].sim.num_completed != envs[1].sim.num_completed


def test_estimate_order_shows_smallest_estimated_gpu_time_and_the_oldest_job() -> None:
    """The shown jobs come from completed jobs' GPU-time per model, never from a queued job's duration."""
    env = small_env(workload=busy_workload(120, 5, gap=10.0), eval=True, queue_order="estimate")
    coord, q = env.coord, env.layout.Q
    expert = ExpertPolicy(env.layout, env.config.placements, backfill=True)
    obs, _ = env.reset()
    checked = 0
    while not env._done and checked < 40:
        est = coord.jobs.estimator
        for i in range(coord.num_agents):
            queue = coord.dispatch.queues[i]
            if len(queue) <= q or est.count.sum() == 0:
                continue
            shown = coord.shown(i)
            key = est.estimate_gpu_time(coord.jobs.model[np.asarray(queue)])
            ranked = [queue[k] for k in np.lexsort((np.arange(len(queue)), key))]
            want = ranked[: q - 1] + ([queue[0]] if queue[0] not in ranked[: q - 1] else [ranked[q - 1]])
            assert shown == want
            assert queue[0] in shown  # the oldest job is always a choice
            # the queue features describe exactly these jobs, in slot order
            attained = coord.view.now - coord.jobs.arrival[np.asarray(shown)]
            assert np.allclose(obs[f"p{i}"]["queue_feats"][:, 2], np.log1p(attained / 3600.0) / 5.0, atol=1e-6)
            checked += 1
        obs = env.step(expert.act(obs))[0]
    assert checked >= 10


class PerNeighbour:
    """A transparent interference rule: each co-located job costs a quarter of the speed."""

    name = "per-neighbour"

    def throughput_factors(self, queries) -> np.ndarray:
        return np.array([1.0 / (1.0 + 0.25 * len(q.neighbours)) for q in queries])


def test_interference_features_follow_the_model_and_the_simulator() -> None:
    env = small_env(workload=busy_workload(50, 6), eval=True, interference=PerNeighbour())
    lay = env.layout
    col = lay.Q + list(CAND_EXTRA_FEATURES).index("pred_interference")
    choose = random_masked(2)
    obs, _ = env.reset()
    checked = shared = 0
    done = False
    while not done:
        for i, o in enumerate(obs.values()):
            agent = env.coord.agents[i]
            occ, sub = agent.occ, agent.static.sub
            for c in np.flatnonzero(o["action_mask"][: lay.C]):
                servers = np.unique(sub.gpu_server[o["cand_gpus"][c] > 0])
                near = occ[np.isin(sub.gpu_server, servers)]
                n = len(np.unique(near[near >= 0]))
                assert o["cand_feats"][c, col] == pytest.approx(1 - 1 / (1 + 0.25 * n), abs=1e-6)
                checked += 1
                shared += n > 0
            held = (occ >= 0) & ~env.coord.jobs.in_round[np.maximum(occ, 0)]
            observed = 1.0 - env.sim.job_factor[occ[held]]
            np.testing.assert_allclose(o["gpu_feats"][held, GPU_FEATURES.index("pred_slowdown")], observed, atol=1e-6)
        obs, _, term, _, _ = env.step(choose(obs))
        done = term["__all__"]
    assert checked > 50 and shared > 10
    assert env.last_result.interference_slowdown.max() > 0  # the simulator's ground truth is the same rule


def test_env_runs_with_the_project_interference_model() -> None:
    import interference

    if not hasattr(interference, "load_interference_model"):
        pytest.skip("interference.load_interference_model is not available yet")
    env = small_env(workload=busy_workload(30, 1), interference="oracle", eval=True)
    totals, _, _ = run_episode(env, random_masked(0))
    assert totals["p0"] == pytest.approx(-float(np.sum(env.last_result.jct)) / 3600.0, rel=1e-9)


# ---------------------------------------------------------------- dispatch, hand-off, spill


def test_tenant_ownership_and_least_loaded_dispatch() -> None:
    assert [o.tolist() for o in owned_agents(4, 2)] == [[0, 2], [1, 3]]
    assert [o.tolist() for o in owned_agents(2, 4)] == [[0], [1], [0], [1]]
    assert [o.tolist() for o in owned_agents(3, 1)] == [[0, 1, 2]]
    d = Dispatcher([64] * 4, num_tenants=2, num_jobs=10)
    free = np.array([64, 64, 10, 64])
    assert d.assign(0, 8, 0, free) == 0  # tenant 0: agents 0 and 2; agent 2 is busier
    assert d.assign(1, 8, 0, free) == 0  # 8 queued GPUs at agent 0 still beat 54 in use at agent 2
    assert d.assign(2, 4, 1, free) == 1  # tie between 1 and 3: lowest index
    assert d.assign(3, 4, 1, free) == 3
    assert d.assign(4, 128, 1, free) == SPILL and d.spill == [4]
    assert d.demand.tolist() == [16, 4, 0, 4]
    d.remove(0, 0, 8)
    assert d.queues[0] == [1] and d.demand[0] == 8


def test_blocked_head_moves_to_an_idle_neighbour() -> None:
    d = Dispatcher([64] * 3, num_tenants=1, num_jobs=2)
    need = np.array([32, 8])
    assert d.assign(0, 32, 0, np.array([64, 0, 0])) == 0
    assert d.assign(1, 8, 0, np.array([64, 0, 0])) == 0
    assert d.hand_off(need, np.array([16, 64, 64])) == [(0, 0, 1)]  # 32 > 16 free: to the idle neighbour
    assert d.queues == [[1], [0], []] and d.demand.tolist() == [8, 32, 0] and d.agent_of.tolist() == [1, 0]
    assert d.hand_off(need, np.array([0, 64, 64])) == []  # agent 0 is blocked, but its only neighbour is busy


def test_spill_jobs_complete_consolidated() -> None:
    big = np.array([5, 17, 30])
    w = with_big_jobs(busy_workload(40, 2), big.tolist(), [96, 128, 80])  # larger than a 64-GPU partition
    env = small_env(workload=w, eval=True)
    run_episode(env, random_masked(1))
    result = env.last_result
    assert np.isfinite(result.end).all()
    assert (env.coord.dispatch.agent_of[big] == SPILL).all()
    assert (env.coord.dispatch.agent_of[np.setdiff1d(np.arange(len(w)), big)] >= 0).all()
    assert (np.diff(result.start[big]) >= 0).all(), "spill jobs start in arrival order"
    assert (result.span[big] >= 4).all()  # more than a rack


# ---------------------------------------------------------------- RLlib


def test_ppo_iteration_with_hgnn_module(ray_local) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    from marl.models.rl_module import hgnn_module_spec

    env_config = {"cluster": "small", "workload": "synthetic:20,load=1.5", "num_agents": 4, "seed": 0}
    probe = MarlSchedEnv(env_config)
    spec = hgnn_module_spec(probe.layout, probe.hierarchy(), hidden=16, gpu_layers=1, server_layers=1)
    config = (
        PPOConfig()
        .environment(MarlSchedEnv, env_config=env_config, disable_env_checking=True)
        .env_runners(num_env_runners=0)
        .learners(num_learners=0)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kw: "shared")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={"shared": spec}))
        .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        result = algo.train()
        learner = result["learners"]["shared"]
        assert np.isfinite(learner["policy_loss"]) and np.isfinite(learner["vf_loss"])
        sampled = result["env_runners"]["num_agent_steps_sampled_lifetime"]
        assert all(sampled.get(a, 0) > 0 for a in probe.possible_agents)
    finally:
        algo.stop()
