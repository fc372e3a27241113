"""Deployment: one Ray actor per partition holds the exported policy; a round asks all agents in parallel.

:class:`RayActorPolicy` is a ``policy_fn`` for :class:`marl.scheduler.MarlScheduler`: it sends each
agent's observation to that agent's actor, waits for all of them, and stacks the logits, so the
simulator applies the agents' decisions exactly as with in-process inference. Actors are created with
``max_restarts=-1`` and ``max_task_retries=-1``: an actor that dies (a crashed process, a lost node) is
restarted from the same policy bytes and its pending call is retried, so an episode loses no decision.
The policy travels as bytes in the actor's arguments, so actors on other nodes need no shared disk.
An agent whose mask allows a single action (typically "wait" on a full partition) is not asked: any
policy takes that action, so skipping the call changes no decision and saves most calls at scale.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from marl.export import marl_scheduler, read_metadata
from marl.obs_layout import OBS_KEYS
from marl.scheduler import MarlScheduler


@ray.remote(max_restarts=-1, max_task_retries=-1)
class PolicyActor:
    """One agent's policy: TorchScript loaded from bytes, single-threaded inference."""

    def __init__(self, policy_bytes: bytes, agent: int, num_threads: int = 1) -> None:
        torch.set_num_threads(num_threads)
        self.agent = agent
        self.module = torch.jit.load(io.BytesIO(policy_bytes), map_location="cpu").eval()
        self.calls = 0
        self.busy_s = 0.0

    def logits(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """Masked logits (B, C + 1) of observations with a leading batch axis."""
        t0 = time.perf_counter()
        with torch.no_grad():
            # arrays from the object store are read-only views; torch wants its own writable copy
            out, _ = self.module(*(torch.from_numpy(np.array(obs[k], dtype=np.float32)) for k in OBS_KEYS))
        self.calls += 1
        self.busy_s += time.perf_counter() - t0
        return out.numpy()

    def info(self) -> dict[str, Any]:
        """Process id (changes when the actor is restarted), calls served and seconds spent in inference
        since (re)start."""
        return {"agent": self.agent, "pid": os.getpid(), "calls": self.calls, "busy_s": self.busy_s}


class RayActorPolicy:
    """``policy_fn`` over ``num_agents`` :class:`PolicyActor` s (needs ``ray.init`` first).

    ``num_cpus`` is each actor's CPU reservation (fractional values let several agents share a core).
    """

    def __init__(
        self, policy_dir: str | Path, num_agents: int | None = None, *, num_cpus: float = 1.0, num_threads: int = 1
    ) -> None:
        self.meta = read_metadata(policy_dir)
        self.policy_dir = Path(policy_dir)
        self.num_agents = int(num_agents if num_agents is not None else self.meta["num_agents"])
        if self.num_agents != int(self.meta["num_agents"]):
            raise ValueError(
                f"policy in {policy_dir} was trained for {self.meta['num_agents']} agents, not {self.num_agents}"
            )
        blob = (self.policy_dir / self.meta["files"]["torchscript"]).read_bytes()
        # Held for the actors' lifetime: a restarted actor re-reads its constructor arguments from here.
        self._blob = ray.put(blob)
        self.actors = [
            PolicyActor.options(num_cpus=num_cpus).remote(self._blob, i, num_threads) for i in range(self.num_agents)
        ]
        self.calls = 0
        self.agent_calls = 0

    def __call__(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        mask = np.asarray(batch["action_mask"])
        # A single allowed action needs no policy: its logit is 0, the forbidden ones are very negative.
        out = np.where(mask > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
        ask = np.flatnonzero((mask > 0).sum(axis=1) > 1)
        futures = [self.actors[i].logits.remote({k: batch[k][i : i + 1] for k in OBS_KEYS}) for i in ask.tolist()]
        self.calls += 1
        self.agent_calls += len(futures)
        if futures:
            out[ask] = np.concatenate(ray.get(futures), axis=0)
        return out

    def info(self) -> list[dict[str, Any]]:
        return ray.get([a.info.remote() for a in self.actors])

    def scheduler(self, *, name: str = "marl-ray", **kwargs: Any) -> MarlScheduler:
        """A MarlScheduler that asks these actors (settings from the policy's metadata)."""
        return marl_scheduler(self, self.meta, policy_dir=self.policy_dir, name=name, **kwargs)

    def shutdown(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []


def deploy_policy(
    policy_dir: str | Path, *, num_cpus: float = 1.0, name: str = "marl-ray"
) -> tuple[MarlScheduler, RayActorPolicy]:
    """(scheduler, actor policy) for ``policy_dir``; call ``shutdown()`` on the policy when done."""
    policy = RayActorPolicy(policy_dir, num_cpus=num_cpus)
    return policy.scheduler(name=name), policy
