"""Training the placing priority agents on the average JCT: evolution strategies on the type head, paired.

The placing agents (:class:`~marl.env.priority_agents.PriorityAgents` with ``placing``, network
:class:`~marl.models.priority_net.PlacingPriorityNet`) start at their prior: QSSF's order, each job started on
its fastest type and moved up when a type ``migrate`` faster has room, or at a policy folder (``--init``: a
placing policy, or a priority policy whose order head it takes). ES moves the last layer of the (job, GPU
type) head (``params last``; ``last+order`` adds the order head's last layer): a few dozen numbers that
shift where jobs start and when they move. The loop is :func:`marl.training.es.evolve` on the round
scorer's windows (:func:`marl.training.rounds_es.search`): every candidate θ ± σε plays the same drawn 1-day
training window of 2017-10-01..23 on ``small-hetero`` (the workload cancels within each pair), θ plays three
2-day windows of 2017-10-25..31 every ``eval_every`` iterations, and the folder keeps the θ that did best
there, the warm start included.

    marlsched train --config experiments/configs/placing_es_small_hetero.yaml --out results/placing-es
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.nn.utils import vector_to_parameters

from marl.deploy.policy_files import load_network
from marl.deploy.priority_export import read_priority_metadata, save_priority_policy
from marl.models.priority_net import NetScorer, PlacingPriorityNet
from marl.training.rounds_es import RoundsESConfig, plot_es, search

PARAMS = ("last", "last+order")


@dataclass
class PlacingESConfig(RoundsESConfig):
    """The round scorer's windows and ES settings, with the placing agents' own."""

    PARAM_CHOICES = PARAMS

    hidden: int = 64
    params: str = "last"
    sigma: float = 0.5  # the head's inputs have norm ~0.5, so type scores move by ~0.25: past the move margin
    lr: float = 0.1
    num_agents: int = 4
    factor: float = 31.0  # preemption margin ln F
    migrate: float = 0.1823  # move margin (ln 1.2); < 0: never move

    def margin(self) -> float | None:
        return None if self.migrate < 0 else float(self.migrate)


def moved(net: PlacingPriorityNet, params: str) -> list[torch.nn.Parameter]:
    """The parameters ES searches over."""
    out = [net.place[-1].weight, net.place[-1].bias]
    if params == "last+order":
        out += [net.score[-1].weight, net.score[-1].bias]
    return out


def initial_network(cfg: PlacingESConfig) -> PlacingPriorityNet:
    """The warm start: a placing policy's network, a priority policy's order head, or the untrained network."""
    torch.manual_seed(cfg.seed)
    if not cfg.init:
        return PlacingPriorityNet(cfg.hidden)
    meta = read_priority_metadata(cfg.init)
    net = PlacingPriorityNet(int(meta["hidden"]))
    state = load_network(cfg.init).state_dict()
    net.load_state_dict(state) if meta.get("placing") else net.load_order_head(state)
    return net


def _play(job: tuple) -> float:
    """Average JCT of one window under the agents with ``theta`` in the moved parameters."""
    from cluster_sim.build import build_simulator
    from marl.env.priority_agents import PriorityAgents

    state, params, theta, cfg, spec = job
    torch.set_num_threads(1)
    net = PlacingPriorityNet(state["hidden"])
    net.load_state_dict(state["weights"])
    vector_to_parameters(torch.as_tensor(np.asarray(theta), dtype=torch.float32), moved(net, params))
    data = cfg.interference_data if cfg.interference == "oracle" and cfg.interference_data else None
    sim = build_simulator(cfg.cluster, spec, seed=0, interference=cfg.interference, interference_data=data)
    agents = PriorityAgents(NetScorer(net.eval()), num_agents=cfg.num_agents, hysteresis=float(np.log(cfg.factor)),
                            placing=True, migrate=cfg.margin())  # fmt: skip
    return float(sim.run(agents).metrics()["avg_jct"])


def train(cfg: PlacingESConfig, out: str | Path, *, command: str = "", log=print) -> dict:
    """ES from the warm start; writes the selected network as a placing policy folder (``marl:DIR``)."""
    started = time.perf_counter()
    net = initial_network(cfg)
    state = {"hidden": net.hidden, "weights": net.state_dict()}
    record = search(cfg, moved(net, cfg.params), state, _play, started=started, command=command, log=log)
    meta = {
        "agents": {"hysteresis": float(np.log(cfg.factor)), "num_agents": cfg.num_agents, "migrate": cfg.margin()},
        "warm_start": cfg.init or "untrained: QSSF's order, each job on its fastest type, moved up past migrate",
        "training": "evolution strategies on the average JCT (marl.training.placing_es)",
        **record,
    }
    folder = save_priority_policy(net, out, meta)
    plot_es(record["progress"], Path(folder) / "learning_curve.png")
    return meta
