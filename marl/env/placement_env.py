"""RLlib multi-agent environment: one scheduler agent per partition over the event-driven simulator.

Every step all agents observe and act together (their partitions are disjoint). After a step in which
some agent started a job, simulated time stands still and all agents are asked again, unless no agent
has a feasible candidate left. Once every agent waits (or none can act), the round's decisions go to the
simulator, which advances to the next scheduling point at which some agent has a feasible candidate
(spill jobs, arrivals and hand-offs are handled at every point on the way). Agents with nothing to do
get an observation whose only allowed action is wait.

Reward, shared by all agents: minus the number of jobs in the system (arrived, not finished) integrated
over the simulated time since the last step, divided by ``reward_scale`` seconds (default 3600, so one
unit is one job-hour). Summed over an episode it is exactly ``-(total JCT) / reward_scale`` for each
agent, so maximising it minimises the average JCT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from cluster_sim.build import assemble_simulator
from cluster_sim.perf_model import PerformanceModel
from cluster_sim.simulator import Simulator
from cluster_sim.workload import Workload
from cluster_sim.workload_spec import parse_workload_spec
from interference.base import InterferenceModel
from interference.loader import load_interference_model
from marl.env.coordinator import Coordinator
from marl.env.placement_config import EnvConfig
from marl.env.seeding import copy_offset, reset_generator
from topology import ClusterSpec, build_cluster, hierarchy_tensors, parse_spec
from topology.graph_tensors import HierarchyTensors
from topology.view import ClusterView


def _interference(mode: str | InterferenceModel, path: str | None) -> InterferenceModel:
    return load_interference_model(mode, path) if isinstance(mode, str) else mode


def _cluster_view(cluster: str | Mapping[str, Any] | ClusterSpec) -> ClusterView:
    if isinstance(cluster, Mapping):
        cluster = parse_spec(dict(cluster), source="env_config.cluster")
    return build_cluster(cluster).view


class MarlSchedEnv(MultiAgentEnv):
    """Agents ``p0 .. p{K-1}``; observation and action spaces from the coordinator's ObsLayout."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        cfg = EnvConfig.from_dict(config)
        self.config = cfg
        self.view = _cluster_view(cfg.cluster)
        self.perf = PerformanceModel(self.view) if cfg.perf_model else None
        self.interference = _interference(cfg.interference, cfg.interference_model)
        predictor = self.interference if cfg.predictor is None else _interference(cfg.predictor, cfg.interference_model)
        self.coord = Coordinator(
            self.view,
            num_agents=cfg.num_agents,
            queue_slots=cfg.queue_slots,
            placements=cfg.placements,
            predictor=predictor,
            partition_unit=cfg.partition_unit,
            queue_order=cfg.queue_order,
        )
        self.layout = self.coord.layout
        self.possible_agents = list(self.coord.agent_ids)
        self.agents = list(self.possible_agents)
        self.observation_spaces = {a: self.layout.space() for a in self.agents}
        self.action_spaces = {a: self.layout.action_space() for a in self.agents}
        # Distinct env copies (RLlib env runners and vector slots) draw distinct workloads.
        self._env_context = config
        self._base_seed = cfg.seed if cfg.eval else cfg.seed + copy_offset(config)
        self._rng = np.random.Generator(np.random.PCG64(self._base_seed))
        self.sim: Simulator | None = None
        self.last_result = None
        self._reward = 0.0
        self._done = True

    def hierarchy(self) -> HierarchyTensors:
        """Graph tensors of one partition (all have the same shape), for the policy's RLModule spec."""
        return hierarchy_tensors(self.view, self.coord.partitions[0])

    def make_workload(self, seed: int) -> Workload:
        spec = self.config.workload
        if isinstance(spec, Workload):
            workload = spec
        elif isinstance(spec, str):
            workload = parse_workload_spec(spec, cluster_gpus=self.view.num_gpus, seed=seed)
        elif callable(spec):
            workload = spec(seed, self.view.num_gpus)
        else:
            raise ValueError(f"env_config.workload must be a spec string, a Workload or a callable, got {spec!r}")
        if len(workload) == 0:
            raise ValueError("env_config.workload has no jobs; an episode needs at least one")
        return workload

    # ------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = reset_generator(seed, self._env_context, self.config.envs_per_runner)
        cfg = self.config
        workload_seed = self._base_seed if cfg.eval else int(self._rng.integers(2**31 - 1))
        self.workload_seed = workload_seed
        self.sim = assemble_simulator(
            self.view,
            self.make_workload(workload_seed),
            perf=self.perf,
            interference=self.interference,
            restart_cost=cfg.restart_cost,
            record_timeline=False,
        )
        self.coord.reset(self.sim)
        self.last_result = None
        self._reward = 0.0
        self._done = self._advance()
        return self._observations(), {}

    def step(self, action_dict: Mapping[str, int]):
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        wait = self.layout.C
        actions = [int(action_dict.get(a, wait)) for a in self.possible_agents]
        started = 0 if self._done else self.coord.act(actions)
        if not self._done and (started == 0 or not self.coord.any_feasible()):
            self._done = self._advance()
        reward, self._reward = self._reward, 0.0
        rewards = dict.fromkeys(self.possible_agents, reward)
        infos: dict[str, dict] = {}
        if self._done:
            self.last_result = self.sim.result("marl", 0.0)
            jct = self.last_result.jct
            summary = {"avg_jct": float(jct.mean()), "total_jct": float(jct.sum()), "jobs": len(jct)}
            infos = {a: dict(summary) for a in self.possible_agents}
        return self._observations(), rewards, {"__all__": self._done}, {"__all__": False}, infos

    # ------------------------------------------------------------ internals
    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        return dict(zip(self.possible_agents, self.coord.observe(), strict=True))

    def _advance(self) -> bool:
        """Apply the round, then advance to the next point where some agent can act; True when all done."""
        sim, scale = self.sim, self.config.reward_scale
        while True:
            decisions = self.coord.end_round()
            if decisions:
                sim.apply(decisions)
            in_system = sim.num_arrived - sim.num_completed
            t0 = sim.now
            if not sim.advance():
                return True
            self._reward -= in_system * (sim.now - t0) / scale
            self.coord.begin(sim)
            if self.coord.any_feasible():
                return False
