"""The priority agents with ``gavel-las``'s rounds as their decision layer: untrained they are ``gavel-las``
decision for decision (through the network, its topology encoder and interference inputs, and a policy
folder); a lean of the agents moves the rounds; the environment's reward is relative to ``gavel-las``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.build import build_simulator
from cluster_sim.policies import get_policy
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from marl.deploy.priority_export import load_priority_policy, save_priority_policy
from marl.env.priority_agents import qssf_scores
from marl.env.priority_env import PriorityEnv
from marl.env.rounds_agents import DEAD_ZONE, RoundsAgents, agents_class
from marl.models.priority_net import PlacingPriorityNet

GAVEL = "gavel:{}/gavel/simulation_throughputs.json"


@pytest.fixture(scope="module")
def quarter_day(traces_dir: Path) -> str:
    start = HELD_OUT_START - 10 * DAY
    trace = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel"
    return window_spec(trace, start, start + DAY / 4, 1.1)


def _sim(spec: str, traces_dir: Path):
    return build_simulator("small-hetero", spec, seed=0, restart_cost=30.0, interference="oracle",
                           interference_data=GAVEL.format(traces_dir))  # fmt: skip


def test_untrained_agents_on_the_rounds_stage_are_gavel_las(
    tmp_path: Path, quarter_day: str, traces_dir: Path, small_predictor: Path
) -> None:
    torch.manual_seed(0)
    meta = {"agents": {"hysteresis": 2.0, "num_agents": 4, "decision": "gavel-las",
                       "interference_inputs": f"learned:{small_predictor}"}}  # fmt: skip
    save_priority_policy(PlacingPriorityNet(16, interference=True), tmp_path / "p", meta)
    agents = load_priority_policy(tmp_path / "p")
    assert isinstance(agents, RoundsAgents) and agents.placing and agents.inputs is not None
    ours = _sim(quarter_day, traces_dir).run(agents)
    las = _sim(quarter_day, traces_dir).run(get_policy("gavel-las"))
    assert len(ours.jct) > 50 and agents.rounds > 20
    np.testing.assert_array_equal(ours.jct, las.jct)


def test_a_lean_below_the_dead_zone_changes_nothing_and_a_real_one_moves_the_rounds(
    quarter_day: str, traces_dir: Path
) -> None:
    las = _sim(quarter_day, traces_dir).run(get_policy("gavel-las")).jct
    noise = _sim(quarter_day, traces_dir).run(RoundsAgents(lambda o: qssf_scores(o) + DEAD_ZONE / 2, num_agents=4))
    np.testing.assert_array_equal(noise.jct, las)

    def big_first(obs):  # lean hard towards the jobs asking for the most GPUs
        return qssf_scores(obs) + 20.0 * obs["jobs"][..., 2]

    leaned = _sim(quarter_day, traces_dir).run(RoundsAgents(big_first, num_agents=4))
    assert len(leaned.jct) == len(las) and not np.array_equal(leaned.jct, las)


def test_environment_on_the_rounds_stage_rewards_relative_to_gavel_las(quarter_day: str, traces_dir: Path) -> None:
    env = PriorityEnv({"cluster": "small-hetero", "workload": quarter_day, "num_agents": 4, "decision": "gavel-las",
                       "interference_data": GAVEL.format(traces_dir)})  # fmt: skip
    assert isinstance(env.agents_policy, RoundsAgents)
    obs, _ = env.reset(seed=0)
    total, steps = 0.0, 0
    while True:  # the untrained agents' actions: QSSF's scores (a zero lean)
        acts = {a: qssf_scores({"jobs": o["jobs"][None]})[0] for a, o in obs.items()}
        obs, rewards, done, _, infos = env.step(acts)
        total, steps = total + rewards["p0"], steps + 1
        if done["__all__"]:
            break
    assert steps > 10  # the rounds at which jobs wait
    assert infos["p0"]["avg_jct"] == infos["p0"]["reference_jct"]
    assert abs(total) < 1e-9


def test_unknown_decision_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="partitions, gavel-las"):
        agents_class("gavel")
    with pytest.raises(ValueError, match="decision 'lp'"):
        PriorityEnv({"decision": "lp"})
