"""Deployment: agents grouped into a few Ray actors, each answering its agents in one batched forward pass.

:class:`RayActorScorer` is the ``scorer`` of :class:`marl.env.priority_agents.PriorityAgents`: it splits the
agents into ``num_actors`` groups (default: one per CPU that Ray has), sends each actor the stacked job
sets of its agents, waits for all actors, and puts the scores back in agent order, so the simulator applies
the agents' decisions exactly as with in-process inference. One actor per agent would cost a process and a
Ray call per agent at every round; grouping keeps the calls to one per actor and lets each actor use a
batched forward pass. Actors are created with ``max_restarts=-1`` and ``max_task_retries=-1``: an actor
that dies (a crashed process, a lost node) is restarted from the same policy bytes and its pending call is
retried, so an episode loses no decision. The policy travels as bytes in the actors' arguments, so actors
on other nodes need no shared disk, and actors are spread over the nodes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import ray
import torch

from marl.deploy.local_ray import init_ray, without_known_noise
from marl.deploy.policy_files import TORCHSCRIPT, network_file, network_from_bytes
from marl.env.priority_agents import PriorityAgents
from marl.models.inference import cpu_inference, subnormals_flushed

PRIORITY_KEYS: tuple[str, ...] = ("jobs", "parts")  # the priority network's inputs, in order


@ray.remote(max_restarts=-1, max_task_retries=-1)
class PolicyActor:
    """The policy of a group of agents: the network loaded from its file's bytes (TorchScript, or the
    ``torch.export`` program where TorchScript is not read), single-threaded batched inference."""

    def __init__(
        self,
        policy_bytes: bytes,
        agents: list[int],
        num_threads: int = 1,
        keys: tuple[str, ...] = PRIORITY_KEYS,
        file_name: str = TORCHSCRIPT,
    ) -> None:
        cpu_inference(num_threads)
        self.agents = list(agents)
        self.keys = tuple(keys)
        self.module = network_from_bytes(policy_bytes, file_name).eval()
        self.calls = 0
        self.decisions = 0
        self.busy_s = 0.0

    def logits(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The network's scores for B agents' observations stacked on a leading axis: (B, N) of priority
        agents, (B, N * (1 + T)) of placing ones."""
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
        """Its agents, process id (changes when the actor is restarted), and since its last (re)start the calls
        and agent decisions it served and the seconds spent in inference; the node it runs on."""
        return {
            "agents": self.agents,
            "pid": os.getpid(),
            "calls": self.calls,
            "decisions": self.decisions,
            "busy_s": self.busy_s,
            "node_id": ray.get_runtime_context().get_node_id(),
        }


class RayActorScorer:
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
        from marl.deploy.priority_export import read_priority_metadata
        from marl.deploy.registry import policy_kind
        from marl.models.priority_net import PLACING_INPUTS

        if policy_kind(policy_dir) != "priority":
            raise ValueError(f"{policy_dir} is not a priority-agent policy folder (no agent: priority in its metadata)")
        self.policy_dir = Path(policy_dir)
        self.num_agents = int(num_agents)
        self.keys = PLACING_INPUTS if read_priority_metadata(policy_dir).get("placing") else PRIORITY_KEYS
        path = network_file(self.policy_dir)
        # no Ray yet: start it in-process (or connect to RAY_ADDRESS), as the commands do; shutdown() stops it
        self._started_ray = init_ray(None, None, 100 * 1024**2, log=lambda line: None)
        with without_known_noise():  # Ray's caveat on restarting actors with stored arguments (KNOWN_NOISE)
            self._blob, self.groups, self.actors = _start_actors(
                path.read_bytes(), self.num_agents, num_actors, num_cpus, num_threads, keys=self.keys,
                file_name=path.name,
            )  # fmt: skip
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

    def info(self) -> list[dict[str, Any]]:
        """:meth:`PolicyActor.info` of every actor (``self.actors``, the actor handles, in agent order), with
        ``restarts``: how many times Ray has restarted it (its counters start again at each restart; None
        where this Ray does not say)."""
        infos = ray.get([a.info.remote() for a in self.actors])
        for actor, info in zip(self.actors, infos, strict=True):
            info["restarts"] = _restarts(actor)
        return infos

    def shutdown(self) -> None:
        """Stop the actors, and Ray too where this scorer started it."""
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def scheduler(self, *, name: str = "marl-ray", **kwargs: Any) -> PriorityAgents:
        """The priority agents asking these actors (settings from the policy's metadata), loaded through the
        registry as in process, so that they declare what they were trained on and the simulation warns alike."""
        from marl.deploy.registry import load_policy

        local = load_policy(self.policy_dir, kind="priority", name=name, num_agents=self.num_agents, **kwargs)
        local.scorer = self
        return local


def _start_actors(
    blob: bytes, num_agents: int, num_actors: int | None, num_cpus: float | None, num_threads: int, **kwargs: Any
) -> tuple[Any, list[np.ndarray], list[Any]]:
    """(object ref of the policy bytes, agent groups, actors): agents split into contiguous groups, one
    actor each, by default one per CPU that Ray has, spread over the nodes."""
    nodes = _node_cpus()
    cpus = max(1.0, sum(nodes))
    n = int(num_actors) if num_actors is not None else int(cpus)
    if n < 1:
        raise ValueError(f"num_actors={num_actors} must be >= 1")
    n = min(n, num_agents)
    per_actor = actor_cpus(nodes, n, num_cpus)
    groups = [g.astype(np.int64) for g in np.array_split(np.arange(num_agents), n)]
    # Held for the actors' lifetime: a restarted actor re-reads its constructor arguments from here.
    ref = ray.put(blob)
    actors = [
        PolicyActor.options(num_cpus=per_actor, scheduling_strategy="SPREAD").remote(
            ref, g.tolist(), num_threads, **kwargs
        )
        for g in groups
    ]
    _wait_started(actors, per_actor, nodes)
    return ref, groups, actors


def _node_cpus() -> list[float]:
    """The CPUs of each live node of the Ray cluster."""
    return [float(n["Resources"].get("CPU", 0.0)) for n in ray.nodes() if n.get("Alive")]


def actor_cpus(nodes: list[float], n: int, num_cpus: float | None = None) -> float:
    """CPUs to reserve for each of ``n`` actors on nodes with these CPU counts: ``num_cpus`` where given (an
    error naming what fits when the nodes cannot hold ``n`` actors of that size), else the cluster's CPUs
    shared out, but no more than lets all ``n`` be placed: an actor larger than every node, or one size too
    many for the nodes to pack, would wait for resources forever."""

    def fits(size: float) -> bool:
        return sum(int(c / size + 1e-9) for c in nodes) >= n

    if num_cpus is not None:
        if num_cpus <= 0:
            raise ValueError(f"num_cpus={num_cpus} must be > 0")
        if not fits(num_cpus):
            largest = max([c / k for c in nodes for k in range(1, n + 1) if fits(c / k)] or [0.0])
            raise ValueError(
                f"{n} actors of num_cpus={num_cpus} do not fit on this Ray cluster's nodes (CPUs per node: "
                f"{', '.join(f'{c:g}' for c in nodes)}): give num_cpus <= {largest:.4g} or fewer actors (num_actors)"
            )
        return float(num_cpus)
    share = max(1.0, sum(nodes)) / n
    sizes = [share] + [c / k for c in nodes for k in range(1, n + 1)]
    # the largest size no larger than the even share at which every actor finds a node (always one: c / n)
    return max((s for s in sizes if s <= share and fits(s)), default=share)


STARTUP_TIMEOUT_S = 300.0


def _wait_started(actors: list[Any], per_actor: float, nodes: list[float]) -> None:
    """Return once every actor has started; a clear error (not an endless wait in the first round) when some
    have not after :data:`STARTUP_TIMEOUT_S`, e.g. when other work holds the CPUs they were sized for."""
    _, pending = ray.wait([a.info.remote() for a in actors], num_returns=len(actors), timeout=STARTUP_TIMEOUT_S)
    if pending:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        raise RuntimeError(
            f"{len(pending)} of {len(actors)} policy actors ({per_actor:g} CPUs each) did not start within "
            f"{STARTUP_TIMEOUT_S:.0f} s on nodes with {', '.join(f'{c:g}' for c in nodes)} CPUs: other work holds "
            "them (`ray status` shows what is pending); give a smaller num_cpus or fewer actors (num_actors)"
        )


def _restarts(actor: Any) -> int | None:
    """How many times Ray restarted ``actor`` (its GCS record), or None where this Ray release does not say."""
    try:
        from ray._private import state

        return int(state.actors(actor_id=actor._actor_id.hex())["NumRestarts"])
    except Exception:  # a private table whose shape Ray may change: the count is only informative
        return None


def deploy_policy(
    policy_dir: str | Path,
    *,
    num_agents: int,
    num_actors: int | None = None,
    num_cpus: float | None = None,
    name: str = "marl-ray",
) -> tuple[PriorityAgents, RayActorScorer]:
    """(scheduler, actor scorer) for the priority policy in ``policy_dir`` over ``num_agents`` agents (their
    count is the deployment's choice, e.g. one per rack); call ``shutdown()`` on the scorer when done."""
    policy = RayActorScorer(policy_dir, num_agents, num_actors=num_actors, num_cpus=num_cpus)
    return policy.scheduler(name=name), policy
