"""RLlib environment of the priority agents on trace windows, with a reference schedule as baseline.

Every step is one scheduling point at which some agent has a waiting job: each agent ``p{k}`` observes its
partition (:mod:`marl.env.priority_features`) and acts with one score per job slot; the scores go through
:meth:`marl.env.priority_agents.PriorityAgents.apply`, and the simulator advances to the next such point.
With ``placing``, agents also see their partition's topology (:mod:`marl.env.topology_obs`) and score every
(job slot, GPU type) pair after the job scores: where a started job runs and, with ``migrate``, where a
running job moves.

Episodes replay a window of a trace, drawn per episode (seeded) between ``train_start`` and
``train_end`` (seconds from the trace's start) at a load drawn from ``load``; a window of the held-out
period is a fixed ``workload`` spec instead (evaluation). A drawn window too quiet to offer its load is
drawn again (counted in ``quiet_windows``), as an operator would pick another day to replay.

Reward, shared by all agents: minus the jobs in the system integrated over the time since the last step,
*relative to a reference schedule of the same window* (QSSF's scores through the same agents, each job on
its fastest type and moved as ``migrate`` says, run once at reset), divided by ``reward_scale`` seconds.
Summed over an episode it is ``-(total JCT - total JCT of the reference) / reward_scale``: the workload's
own weight, which dominates returns in scheduling, cancels, and what is left is what the policy changed (an
input-dependent baseline in reward form; it does not depend on the actions, so the policy gradient stays
unbiased). Observations carry the reference's state beside the agents' own (``critic``, read by the value
function only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from cluster_sim.build import build_simulator
from cluster_sim.traces.periods import HELD_OUT_START, window_spec
from cluster_sim.workload_spec import QuietWorkloadSpecError
from marl.env.priority_agents import PriorityAgents, qssf_scores
from marl.env.seeding import copy_offset, reset_generator

MAX_DRAWS = 100  # quiet windows in a row before the settings themselves are blamed


@dataclass(frozen=True)
class PriorityEnvConfig:
    """Settings of :class:`PriorityEnv` (``env_config`` keys)."""

    cluster: str = "small"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv"
    train_start: float = 1_728_000.0  # day 20: the trace has a handful of jobs before
    train_end: float = HELD_OUT_START  # 2017-11-01, where the report period starts
    window_days: float = 7.0
    load: tuple[float, float] = (0.9, 0.9)
    workload: str | None = None  # a fixed spec (evaluation) instead of random windows
    num_agents: int = 4
    slots: int | None = None
    hysteresis: float = float(np.log(31.0))
    interference: str = "oracle"
    interference_data: str | None = "gavel:../shared/traces/gavel/simulation_throughputs.json"
    restart_cost: float = 30.0
    reward_scale: float = 360_000.0  # one unit = 100 job-hours
    relative: bool = True  # reward relative to the reference schedule
    seed: int = 0
    envs_per_runner: int = 1  # set by training: with several, each runner's copies draw their own seeds
    placing: bool = False  # the agents also choose each started job's GPU type (type scores in the action)
    migrate: float | None = None  # move a running job to a type whose score beats its own by this (None: never)
    interference_inputs: str | None = None  # placing agents also read this predictor's estimates (MODE[:PATH])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PriorityEnvConfig:
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"priority env_config: unknown keys {unknown}; allowed: {sorted(known)}")
        if "load" in data:
            load = data["load"]
            data["load"] = (float(load), float(load)) if np.isscalar(load) else tuple(float(x) for x in load)
            if len(data["load"]) != 2 or not 0 < data["load"][0] <= data["load"][1]:
                raise ValueError(f"priority env_config.load must be a number or [low, high] > 0, got {load!r}")
        cfg = cls(**data)
        if cfg.workload is None and cfg.train_end - cfg.train_start < cfg.window_days * 86400.0:
            raise ValueError(
                f"priority env_config: train_end - train_start ({cfg.train_end - cfg.train_start:.0f} s) is shorter "
                f"than one window of window_days={cfg.window_days}; widen the range or shorten the windows"
            )
        return cfg

    def window_spec(self, rng: np.random.Generator) -> str:
        """The workload of one episode: a fixed spec, or a random window of the training period."""
        if self.workload is not None:
            return self.workload
        length = self.window_days * 86400.0
        start = float(rng.uniform(self.train_start, self.train_end - length))
        load = float(rng.uniform(*self.load))
        return window_spec(self.trace, start, start + length, round(load, 3))


class InSystemIntegral:
    """``F(t)``: the integral of the number of jobs in the system from 0 to ``t`` for a finished schedule."""

    def __init__(self, arrival: np.ndarray, finish: np.ndarray) -> None:
        self.a = np.sort(arrival)
        self.c = np.sort(finish)
        self.sa = np.concatenate([[0.0], np.cumsum(self.a)])
        self.sc = np.concatenate([[0.0], np.cumsum(self.c)])
        self.total = float(self.sc[-1] - self.sa[-1])  # F(infinity): the total JCT

    def count(self, t: float) -> int:
        """Jobs in the system at ``t``."""
        return int(np.searchsorted(self.a, t, side="right") - np.searchsorted(self.c, t, side="right"))

    def __call__(self, t: float) -> float:
        na = int(np.searchsorted(self.a, t, side="right"))
        nc = int(np.searchsorted(self.c, t, side="right"))
        return (t * na - self.sa[na]) - (t * nc - self.sc[nc])


class PriorityEnv(MultiAgentEnv):
    """Agents ``p0 .. p{K-1}``; one step per scheduling point at which some agent has a waiting job."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.config = cfg = PriorityEnvConfig.from_dict(config)
        self.agents_policy = PriorityAgents(
            None,
            num_agents=cfg.num_agents,
            slots=cfg.slots,
            hysteresis=cfg.hysteresis,
            placing=cfg.placing,
            migrate=cfg.migrate,
            interference_inputs=cfg.interference_inputs,
        )
        self.possible_agents = [f"p{k}" for k in range(cfg.num_agents)]
        self.agents = list(self.possible_agents)
        # The layout's N depends on the partition size: build one simulator-free probe of the cluster.
        probe = build_simulator(cfg.cluster, self._probe_workload(), seed=0)
        self.agents_policy.reset(probe)
        self.layout = self.agents_policy.layout
        self.observation_spaces = {a: self.layout.space(critic=True) for a in self.agents}
        self.action_spaces = {a: self.layout.action_space() for a in self.agents}
        self._env_context = config
        self._rng = np.random.Generator(np.random.PCG64(cfg.seed + copy_offset(config)))
        self.sim = None
        self.spec = ""
        self.quiet_windows = 0
        self.reference_jct = float("nan")

    @staticmethod
    def _probe_workload() -> str:
        return "synthetic:1,load=0.5"

    # ------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = reset_generator(seed, self._env_context, self.config.envs_per_runner)
        cfg = self.config
        self.sim = self.draw_simulator()
        self.reference = None
        if cfg.relative:
            ref_sim = self._simulator()
            ref = ref_sim.run(PriorityAgents(qssf_scores, num_agents=cfg.num_agents, slots=cfg.slots,
                                             migrate=cfg.migrate))  # fmt: skip
            self.reference = InSystemIntegral(ref.workload.arrival, ref.end)
            self.reference_jct = float(ref.jct.mean())
        self.agents_policy.reset(self.sim)
        self._reward = 0.0
        self._obs = None
        self._done = self._advance()
        return self._observations(), {}

    def step(self, action_dict: Mapping[str, np.ndarray]):
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        if not self._done:
            n = self.layout.N * (1 + self.layout.T)
            scores = np.stack([np.asarray(action_dict.get(a, np.zeros(n)), dtype=np.float64) for a in self.agents])
            decisions = self.agents_policy.apply(self.sim, scores)
            if decisions:
                self.sim.apply(decisions)
            self._done = self._advance()
        reward, self._reward = self._reward, 0.0
        rewards = dict.fromkeys(self.agents, reward)
        infos: dict[str, dict] = {}
        if self._done:
            jct = self.sim.result("marl-priority", 0.0).jct
            summary = {"avg_jct": float(jct.mean()), "reference_jct": self.reference_jct, "jobs": len(jct)}
            infos = {a: dict(summary) for a in self.agents}
        return self._observations(), rewards, {"__all__": self._done}, {"__all__": False}, infos

    # ------------------------------------------------------------ internals
    def draw_simulator(self):
        """The simulator of this episode's window: drawn again while the window cannot offer its load."""
        cfg = self.config
        for _ in range(MAX_DRAWS):
            self.spec = cfg.window_spec(self._rng)
            self.workload_seed = int(self._rng.integers(2**31 - 1)) if cfg.workload is None else cfg.seed
            try:
                return self._simulator()
            except QuietWorkloadSpecError as e:
                if cfg.workload is not None:
                    raise
                self.quiet_windows += 1
                last = e
        raise ValueError(
            f"priority env_config: {MAX_DRAWS} windows in a row of window_days={cfg.window_days} between train_start="
            f"{cfg.train_start:.0f} and train_end={cfg.train_end:.0f} could not offer load={list(cfg.load)}; lower "
            f"the load or lengthen the windows (last: {last})"
        )

    def _simulator(self):
        cfg = self.config
        return build_simulator(
            cfg.cluster,
            self.spec,
            seed=self.workload_seed,
            interference=cfg.interference,
            interference_data=cfg.interference_data,  # the predictor file in learned mode
            restart_cost=cfg.restart_cost,
        )

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        critic = self._critic()
        if self._obs is None:
            zeros = {k: np.zeros(s, dtype=np.float32) for k, s in self.layout.shapes().items()}
            return {a: {**zeros, "critic": critic} for a in self.agents}
        arrays = self._obs.arrays
        return {a: {**{key: arrays[key][k] for key in arrays}, "critic": critic} for k, a in enumerate(self.agents)}

    def _critic(self) -> np.ndarray:
        """:data:`~marl.env.priority_features.CRITIC_FEATURES` now (no deficit without a reference)."""
        sim = self.sim
        n = sim.num_arrived - sim.num_completed
        ref = self.reference.count(sim.now) if self.reference is not None else n
        return np.array([n / 100.0, ref / 100.0, (n - ref) / 10.0], dtype=np.float32)

    def _advance(self) -> bool:
        """Advance to the next point where some agent has a waiting job; True when the run is over."""
        sim, scale = self.sim, self.config.reward_scale
        while True:
            in_system = sim.num_arrived - sim.num_completed
            t0 = sim.now
            if not sim.advance():
                self._obs = None
                if self.reference is not None:  # the reference may finish later: its tail counts too
                    self._reward += (self.reference.total - self.reference(sim.now)) / scale
                return True
            ref = self.reference(sim.now) - self.reference(t0) if self.reference is not None else 0.0
            self._reward -= (in_system * (sim.now - t0) - ref) / scale
            self._obs = self.agents_policy.observe(sim)
            if self._obs is not None:
                return False
            decisions = self.agents_policy.apply(sim, np.zeros(0))  # jobs larger than a partition only
            if decisions:
                sim.apply(decisions)
