"""Deployment: agents grouped into a few Ray actors, each answering its agents in one batched forward pass.

Both kinds of policy folder deploy this way: :class:`RayActorPolicy` serves candidate-placement agents,
:class:`RayActorScorer` priority agents (:func:`deploy_policy` picks by the folder).

:class:`RayActorPolicy` is a ``policy_fn`` for :class:`marl.deploy.scheduler.MarlScheduler`: it splits the
agents into ``num_actors`` groups (default: one per CPU that Ray has), sends each actor the stacked
observations of its agents that have a choice, waits for all actors, and puts the logits back in agent
order, so the simulator applies the agents' decisions exactly as with in-process inference. One actor
per agent costs a process and a Ray call per agent at every round; grouping keeps the calls to one per
actor and lets each actor use a batched forward pass. Actors are created with ``max_restarts=-1`` and
``max_task_retries=-1``: an actor that dies (a crashed process, a lost node) is restarted from the same
policy bytes and its pending call is retried, so an episode loses no decision. The policy travels as
bytes in the actors' arguments, so actors on other nodes need no shared disk, and actors are spread
over the nodes. An agent whose mask allows a single action (typically "wait" on a full partition) is
not asked: any policy takes that action, so skipping it changes no decision.

:class:`RayActorScorer` is the ``scorer`` of :class:`marl.env.priority_agents.PriorityAgents` in the same
way: every agent's job set goes to its group's actor, and the scores come back in agent order.
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

from marl.deploy.export import marl_scheduler, read_metadata
from marl.deploy.scheduler import MarlScheduler
from marl.env.obs_layout import OBS_KEYS
from marl.env.priority_agents import PriorityAgents
from marl.models.inference import cpu_inference, subnormals_flushed

PRIORITY_KEYS: tuple[str, ...] = ("jobs", "parts")  # the priority network's inputs, in order


@ray.remote(max_restarts=-1, max_task_retries=-1)
class PolicyActor:
    """The policy of a group of agents: TorchScript loaded from bytes, single-threaded batched inference."""

    def __init__(
        self, policy_bytes: bytes, agents: list[int], num_threads: int = 1, keys: tuple[str, ...] = OBS_KEYS
    ) -> None:
        cpu_inference(num_threads)
        self.agents = list(agents)
        self.keys = tuple(keys)
        self.module = torch.jit.load(io.BytesIO(policy_bytes), map_location="cpu").eval()
        self.calls = 0
        self.decisions = 0
        self.busy_s = 0.0

    def logits(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The network's decisions for B agents' observations stacked on a leading axis: masked logits
        (B, C + 1) of candidate agents, scores (B, N) of priority agents, (B, N * (1 + T)) of placing ones."""
        t0 = time.perf_counter()
        with torch.no_grad(), subnormals_flushed():
            # arrays from the object store are read-only views; torch wants its own writable copy
            outs = self.module(*(torch.from_numpy(np.array(obs[k], dtype=np.float32)) for k in self.keys))
            out = outs[0] if len(outs) == 2 else torch.cat([outs[0], outs[1].flatten(1)], dim=1)
        self.calls += 1
        self.decisions += len(out)
        self.busy_s += time.perf_counter() - t0
        return out.numpy()

    def info(self) -> dict[str, Any]:
        """Its agents, process id (changes when the actor is restarted), calls and agent decisions served,
        seconds spent in inference since (re)start, and the node it runs on."""
        return {
            "agents": self.agents,
            "pid": os.getpid(),
            "calls": self.calls,
            "decisions": self.decisions,
            "busy_s": self.busy_s,
            "node_id": ray.get_runtime_context().get_node_id(),
        }


class RayActorPolicy:
    """``policy_fn`` over the agents of ``policy_dir``, served by ``num_actors`` :class:`PolicyActor` s
    (needs ``ray.init`` first).

    ``num_actors``: default one per CPU that Ray has (at most one per agent); agents are split into
    contiguous groups. ``num_cpus``: each actor's CPU reservation, default Ray's CPUs shared evenly.
    """

    def __init__(
        self,
        policy_dir: str | Path,
        num_agents: int | None = None,
        *,
        num_actors: int | None = None,
        num_cpus: float | None = None,
        num_threads: int = 1,
    ) -> None:
        self.meta = read_metadata(policy_dir)
        self.policy_dir = Path(policy_dir)
        self.num_agents = int(num_agents if num_agents is not None else self.meta["num_agents"])
        if self.num_agents != int(self.meta["num_agents"]):
            raise ValueError(
                f"policy in {policy_dir} was trained for {self.meta['num_agents']} agents, not {self.num_agents}"
            )
        blob = (self.policy_dir / self.meta["files"]["torchscript"]).read_bytes()
        self._blob, self.groups, self.actors = _start_actors(blob, self.num_agents, num_actors, num_cpus, num_threads)
        self.calls = 0
        self.agent_calls = 0

    def __call__(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        mask = np.asarray(batch["action_mask"])
        # A single allowed action needs no policy: its logit is 0, the forbidden ones are very negative.
        out = np.where(mask > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
        asked = (mask > 0).sum(axis=1) > 1
        futures, rows = [], []
        for actor, group in zip(self.actors, self.groups, strict=True):
            idx = group[asked[group]]
            if len(idx):
                futures.append(actor.logits.remote({k: batch[k][idx] for k in OBS_KEYS}))
                rows.append(idx)
        self.calls += 1
        self.agent_calls += int(asked.sum())
        if futures:
            out[np.concatenate(rows)] = np.concatenate(ray.get(futures), axis=0)
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


def _start_actors(
    blob: bytes, num_agents: int, num_actors: int | None, num_cpus: float | None, num_threads: int, **kwargs: Any
) -> tuple[Any, list[np.ndarray], list[Any]]:
    """(object ref of the policy bytes, agent groups, actors): agents split into contiguous groups, one
    actor each, by default one per CPU that Ray has, spread over the nodes."""
    cpus = max(1.0, float(ray.cluster_resources().get("CPU", 1.0)))
    n = int(num_actors) if num_actors is not None else int(cpus)
    if n < 1:
        raise ValueError(f"num_actors={num_actors} must be >= 1")
    n = min(n, num_agents)
    groups = [g.astype(np.int64) for g in np.array_split(np.arange(num_agents), n)]
    # Held for the actors' lifetime: a restarted actor re-reads its constructor arguments from here.
    ref = ray.put(blob)
    per_actor = num_cpus if num_cpus is not None else cpus / n
    actors = [
        PolicyActor.options(num_cpus=per_actor, scheduling_strategy="SPREAD").remote(
            ref, g.tolist(), num_threads, **kwargs
        )
        for g in groups
    ]
    return ref, groups, actors


class RayActorScorer(RayActorPolicy):
    """The ``scorer`` of priority agents over ``num_agents`` agents (default one per rack of the cluster
    it is reset on), served by ``num_actors`` :class:`PolicyActor` s; every round each actor scores its
    agents' job sets in one forward pass."""

    def __init__(
        self,
        policy_dir: str | Path,
        num_agents: int,
        *,
        num_actors: int | None = None,
        num_cpus: float | None = None,
        num_threads: int = 1,
    ) -> None:
        from marl.deploy.priority_export import TORCHSCRIPT, is_priority_policy, read_priority_metadata
        from marl.models.priority_net import PLACING_INPUTS

        if not is_priority_policy(policy_dir):
            raise ValueError(f"{policy_dir} is not a priority-agent policy folder; use RayActorPolicy")
        self.policy_dir = Path(policy_dir)
        self.num_agents = int(num_agents)
        self.keys = PLACING_INPUTS if read_priority_metadata(policy_dir).get("placing") else PRIORITY_KEYS
        blob = (self.policy_dir / TORCHSCRIPT).read_bytes()
        self._blob, self.groups, self.actors = _start_actors(
            blob, self.num_agents, num_actors, num_cpus, num_threads, keys=self.keys
        )
        self.calls = 0
        self.agent_calls = 0

    def __call__(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        if len(obs["jobs"]) != self.num_agents:
            raise ValueError(f"{len(obs['jobs'])} agents observed; these actors serve {self.num_agents}")
        futures = [
            actor.logits.remote({k: obs[k][g] for k in self.keys})
            for actor, g in zip(self.actors, self.groups, strict=True)
        ]
        self.calls += 1
        self.agent_calls += self.num_agents
        return np.concatenate(ray.get(futures), axis=0)

    def scheduler(self, *, name: str = "marl-ray", **kwargs: Any) -> PriorityAgents:  # type: ignore[override]
        """The priority agents asking these actors (settings from the policy's metadata)."""
        from marl.deploy.priority_export import load_priority_policy

        local = load_priority_policy(self.policy_dir, num_agents=self.num_agents, name=name, **kwargs)
        local.scorer = self
        return local


def deploy_policy(
    policy_dir: str | Path,
    *,
    num_agents: int | None = None,
    num_actors: int | None = None,
    num_cpus: float | None = None,
    name: str = "marl-ray",
) -> tuple[MarlScheduler | PriorityAgents, RayActorPolicy]:
    """(scheduler, actor policy) for ``policy_dir`` of either kind; call ``shutdown()`` on the policy
    when done. Priority agents need ``num_agents`` (their count is the deployment's choice)."""
    from marl.deploy.priority_export import is_priority_policy

    if is_priority_policy(policy_dir):
        if num_agents is None:
            raise ValueError(f"{policy_dir} holds priority agents: pass num_agents (e.g. one per rack)")
        policy: RayActorPolicy = RayActorScorer(policy_dir, num_agents, num_actors=num_actors, num_cpus=num_cpus)
    else:
        policy = RayActorPolicy(policy_dir, num_agents, num_actors=num_actors, num_cpus=num_cpus)
    return policy.scheduler(name=name), policy
