"""The scheduling environment in the two interfaces most RL code speaks: PettingZoo and Gymnasium.

Both wrap :class:`marl.env.placement_env.MarlSchedEnv` (the same simulator, coordinator, observations, rewards and
episode ends that RLlib trains on), so a policy trained through either runs in ``marlsched simulate``
like any other. Differences from the RLlib env, all at the interface:

- ``action_mask`` is int8 (what ``Discrete.sample(mask=...)`` and maskable learners expect), the other
  observation keys are unchanged float32.
- ``invalid_action``: what an action that the mask forbids does. ``"raise"`` (PettingZoo's default)
  rejects it; ``"first_allowed"`` (Gymnasium's default, so that learners without masking, such as
  Stable-Baselines3's PPO, can train) replaces it with the lowest allowed action. ``action_masks()``
  serves sb3-contrib's MaskablePPO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from marl.env.placement_env import MarlSchedEnv

INVALID_ACTIONS = ("raise", "first_allowed")


def int8_mask_space(space: gym.spaces.Dict) -> gym.spaces.Dict:
    """The observation space with ``action_mask`` as an int8 box."""
    spaces = dict(space.spaces)
    spaces["action_mask"] = gym.spaces.Box(0, 1, shape=spaces["action_mask"].shape, dtype=np.int8)
    return gym.spaces.Dict(spaces)


def int8_mask_obs(obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(obs)
    out["action_mask"] = np.asarray(obs["action_mask"]).astype(np.int8)
    return out


def resolve_action(action: Any, mask: np.ndarray, invalid_action: str, agent: str) -> int:
    """``action`` if the mask allows it; else the lowest allowed action, or an error naming both."""
    a = int(action)
    if 0 <= a < len(mask) and mask[a] > 0:
        return a
    allowed = np.flatnonzero(mask)
    if invalid_action == "raise":
        raise ValueError(
            f"agent {agent} chose action {a}, which its action_mask forbids (allowed: {allowed.tolist()}); "
            "sample with the mask, or build the env with invalid_action='first_allowed'"
        )
    return int(allowed[0])


def _check_invalid_action(value: str) -> str:
    if value not in INVALID_ACTIONS:
        raise ValueError(f"invalid_action={value!r}; choose one of {INVALID_ACTIONS}")
    return value


class ParallelSchedEnv(ParallelEnv):
    """PettingZoo ``ParallelEnv``: agents ``p0 .. p{K-1}``, one per partition, all acting every step.

    ``config`` takes the keys of :class:`marl.env.placement_config.EnvConfig`. Agents not in a step's actions wait (if
    their mask allows it). Every agent terminates together at the end of the workload.
    """

    metadata: ClassVar[dict[str, Any]] = {"name": "marlsched_v0", "render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None, *, invalid_action: str = "raise") -> None:
        self.env = MarlSchedEnv(config)
        self.invalid_action = _check_invalid_action(invalid_action)
        self.possible_agents = list(self.env.possible_agents)
        self.agents: list[str] = []
        self._wait = self.env.layout.C
        self._obs: dict[str, dict[str, np.ndarray]] = {}
        # one space object per agent, returned every time (PettingZoo seeds and compares them by identity)
        self._observation_spaces = {a: int8_mask_space(self.env.observation_spaces[a]) for a in self.possible_agents}
        self._action_spaces = dict(self.env.action_spaces)

    def observation_space(self, agent: str) -> gym.spaces.Dict:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return self._action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None):
        self._obs, _ = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return {a: int8_mask_obs(o) for a, o in self._obs.items()}, {a: {} for a in self.agents}

    def step(self, actions: Mapping[str, Any]):
        if not self.agents:
            raise RuntimeError("the episode is over; call reset() first")
        chosen = {
            a: resolve_action(actions.get(a, self._wait), self._obs[a]["action_mask"], self.invalid_action, a)
            for a in self.agents
        }
        obs, rewards, terminated, _, infos = self.env.step(chosen)
        self._obs = obs
        done = bool(terminated["__all__"])
        agents = self.agents
        out = (
            {a: int8_mask_obs(obs[a]) for a in agents},
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
    :class:`marl.env.placement_config.EnvConfig`."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, config: Mapping[str, Any] | None = None, *, invalid_action: str = "first_allowed") -> None:
        cfg = dict(config or {})
        if cfg.setdefault("num_agents", 1) != 1:
            raise ValueError(
                f"SingleAgentSchedEnv has one agent for the whole cluster, got num_agents={cfg['num_agents']}; "
                "use ParallelSchedEnv (PettingZoo) or MarlSchedEnv (RLlib) for several agents"
            )
        self.env = MarlSchedEnv(cfg)
        self.invalid_action = _check_invalid_action(invalid_action)
        self.agent = self.env.possible_agents[0]
        self.observation_space = int8_mask_space(self.env.observation_spaces[self.agent])
        self.action_space = self.env.action_spaces[self.agent]
        self._obs: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, _ = self.env.reset(seed=seed, options=options)
        self._obs = obs[self.agent]
        return int8_mask_obs(self._obs), {}

    def step(self, action: Any):
        if self._obs is None:
            raise RuntimeError("call reset() before step()")
        a = resolve_action(action, self._obs["action_mask"], self.invalid_action, self.agent)
        obs, rewards, terminated, _, infos = self.env.step({self.agent: a})
        self._obs = obs[self.agent]
        return (
            int8_mask_obs(self._obs),
            float(rewards[self.agent]),
            bool(terminated["__all__"]),
            False,
            dict(infos.get(self.agent, {})),
        )

    def action_masks(self) -> np.ndarray:
        """Allowed actions now (bool), for maskable learners."""
        if self._obs is None:
            raise RuntimeError("call reset() before action_masks()")
        return np.asarray(self._obs["action_mask"]) > 0
