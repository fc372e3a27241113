"""The priority agents' environment in the two interfaces most RL code speaks: PettingZoo and Gymnasium.

Both wrap :class:`marl.env.priority_env.PriorityEnv` (the same simulator, agents, observations, rewards and
episode ends that RLlib trains on), so a policy trained through either runs in ``marlsched simulate`` like
any other. Differences from the RLlib env, all at the interface:

- The observation leaves out ``critic`` (the reference schedule's state, which only a training critic may
  see): what remains is what a deployed agent observes.
- ``prior=True`` (the default) makes an action the residual on the untrained network's scores: QSSF's key
  for every job slot and, for placing agents, the job's log speed on each GPU type. A learner that starts
  near zero then starts at QSSF with each job on its fastest type, as marlsched's own network does;
  ``prior=False`` takes the raw scores.
- Actions are bounded to ``[-ACTION_BOUND, ACTION_BOUND]`` (learners such as Stable-Baselines3 need finite
  bounds) and clipped to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from marl.env.priority_agents import qssf_scores
from marl.env.priority_env import PriorityEnv
from marl.env.priority_features import JobSetLayout
from marl.env.topology_obs import cand_column

PRIVILEGED = "critic"
ACTION_BOUND = 20.0  # finite bounds for learners that need them; QSSF's scores span about -15..5


def prior_scores(obs: Mapping[str, np.ndarray], layout: JobSetLayout) -> np.ndarray:
    """The untrained network's scores ``(..., N * (1 + T))`` for a (batch of) observation(s)."""
    scores = qssf_scores(obs).astype(np.float32)
    if layout.T == 0:
        return scores
    types = np.asarray(obs["cands"])[..., cand_column("log_speed")]  # (..., N, T)
    return np.concatenate([scores, types.reshape(*types.shape[:-2], -1)], axis=-1).astype(np.float32)


def _public(obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in obs.items() if k != PRIVILEGED}


class ParallelSchedEnv(ParallelEnv):
    """PettingZoo ``ParallelEnv``: agents ``p0 .. p{K-1}``, one per partition, all scoring every step.

    ``config`` takes the keys of :class:`marl.env.priority_env.PriorityEnvConfig`. An agent left out of a
    step's actions plays its prior (the untrained network's scores). Every agent terminates together at
    the end of the workload.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "marlsched_v1", "render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None, *, prior: bool = True) -> None:
        self.env = PriorityEnv(config)
        self.prior = prior
        self.layout = self.env.layout
        self.possible_agents = list(self.env.possible_agents)
        self.agents: list[str] = []
        self._obs: dict[str, dict[str, np.ndarray]] = {}
        # one space object per agent, returned every time (PettingZoo seeds and compares them by identity)
        self._observation_spaces = {a: self.layout.space() for a in self.possible_agents}
        width = self.layout.action_space().shape
        self._action_spaces = {
            a: gym.spaces.Box(-ACTION_BOUND, ACTION_BOUND, shape=width, dtype=np.float32) for a in self.possible_agents
        }

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> gym.spaces.Box:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, _ = self.env.reset(seed=seed, options=options)
        self._obs = {a: _public(o) for a, o in obs.items()}
        self.agents = list(self.possible_agents)
        return dict(self._obs), {a: {} for a in self.agents}

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("the episode is over; call reset() first")
        width = self.layout.N * (1 + self.layout.T)
        scores = {}
        for a in self.agents:
            act = np.asarray(actions.get(a, np.zeros(width)), dtype=np.float32).reshape(-1)
            if act.shape != (width,):
                raise ValueError(f"agent {a}: action of shape {act.shape}, expected ({width},) (its action_space)")
            act = np.clip(act, -ACTION_BOUND, ACTION_BOUND)
            scores[a] = prior_scores(self._obs[a], self.layout) + act if self.prior else act
        obs, rewards, terminated, _, infos = self.env.step(scores)
        self._obs = {a: _public(o) for a, o in obs.items()}
        done = bool(terminated["__all__"])
        agents = self.agents
        out = (
            dict(self._obs),
            {a: float(rewards[a]) for a in agents},
            dict.fromkeys(agents, done),
            dict.fromkeys(agents, False),
            {a: dict(infos.get(a, {})) for a in agents},
        )
        if done:
            self.agents = []
        return out

    def close(self) -> None:
        self.agents = []


class SingleAgentSchedEnv(gym.Env):
    """Gymnasium ``Env``: one agent schedules the whole cluster (``num_agents`` is 1), with the same
    observation and action conventions as each multi-agent agent. ``config`` takes the keys of
    :class:`marl.env.priority_env.PriorityEnvConfig`."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None, *, prior: bool = True) -> None:
        cfg = dict(config or {})
        if cfg.setdefault("num_agents", 1) != 1:
            raise ValueError(
                f"SingleAgentSchedEnv has one agent for the whole cluster, got num_agents={cfg['num_agents']}; "
                "use ParallelSchedEnv (PettingZoo) or PriorityEnv (RLlib) for several agents"
            )
        self.parallel = ParallelSchedEnv(cfg, prior=prior)
        self.layout = self.parallel.layout
        self.agent = self.parallel.possible_agents[0]
        self.observation_space = self.parallel.observation_space(self.agent)
        self.action_space = self.parallel.action_space(self.agent)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, _ = self.parallel.reset(seed=seed, options=options)
        return obs[self.agent], {}

    def step(self, action: Any):
        if not self.parallel.agents:
            raise RuntimeError("call reset() before step() (or after the episode ended)")
        obs, rewards, terminated, _, infos = self.parallel.step({self.agent: action})
        a = self.agent
        return obs[a], rewards[a], terminated[a], False, infos[a]
