"""Throughput of the priority agents' training environment: environment steps/s and agent steps/s.

1. One process: the environment of a training config (default ``experiments/configs/marl_philly.yaml``;
   ``marl_hetero_placing.yaml`` for the placing agents) stepped by its network (freshly initialised: a
   forward pass costs the same whatever the weights), with the share of time in the network and in the
   environment (simulation, observations, the agents' decisions, the reference schedule at each reset).
2. RLlib: the same environment and network sampled by 1 and 2 EnvRunners at once (``--runners``), as PPO
   samples them; the scaling from 1 to 2 runners is printed. ``--envs 1 2 4``: one EnvRunner stepping that
   many environments together (``ppo.num_envs_per_env_runner``; their agents scored in one network pass).

3. Training (``--train N``): N iterations of the config's training with each RLlib algorithm of ``--algos``
   (``ppo``: sample a batch, then update; ``appo``: the runners sample while the learner updates), with env
   steps/s over the iterations after the first (which holds Ray's and the runners' start).

``--steps`` counts the steps of each environment: every runner takes as many as a lone runner, so each
covers the same part of its episodes.

``--json FILE`` writes the figures: ``one_process`` (``env_steps_per_s``, ``first_reset_s``, ...) and ``rllib``
keyed by runner count (``rllib["2"]["env_steps_per_s"]``), ``rllib_envs`` keyed by environments per runner, and
``training`` keyed by algorithm.

    python experiments/benchmarks/env_throughput.py [--config FILE] [--steps 1000] [--runners 1 2]
        [--envs 1 2 4] [--train 4 --algos ppo appo] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def one_process(config: str, steps: int, seed: int = 0) -> dict[str, Any]:
    """Env steps/s of one environment stepped by its network in this process, and the network's share."""
    import torch

    from marl.env.priority_env import PriorityEnv
    from marl.models.priority_net import NetScorer, PlacingPriorityNet, PriorityNet
    from marl.training.priority_train import load_config

    cfg = load_config(config)
    env = PriorityEnv(cfg["env"])
    torch.manual_seed(seed)
    placing = env.layout.placing
    hidden = int(cfg["model"]["hidden"])
    net = PlacingPriorityNet(hidden, env.layout.interference) if placing else PriorityNet(hidden)
    scorer = NetScorer(net, placing=placing, skip_padding=True)  # as the env runners score
    keys = list(env.layout.shapes())
    t0 = time.perf_counter()
    obs, _ = env.reset(seed=seed)
    reset_s = time.perf_counter() - t0
    net_s, done, n = 0.0, False, 0
    t0 = time.perf_counter()
    while n < steps:
        if done:
            obs, _ = env.reset()
        t1 = time.perf_counter()
        batch = {k: np.stack([obs[a][k] for a in env.agents]) for k in keys}
        scores = scorer(batch)
        net_s += time.perf_counter() - t1
        obs, _, term, _, _ = env.step({a: scores[i] for i, a in enumerate(env.agents)})
        done = bool(term["__all__"])
        n += 1
    wall = time.perf_counter() - t0
    return {
        "agents": len(env.agents), "placing": placing, "env_steps": n, "wall_s": wall,
        "env_steps_per_s": n / wall, "agent_steps_per_s": n * len(env.agents) / wall,
        "network_share": net_s / wall, "first_reset_s": reset_s,
    }  # fmt: skip


def rllib_sampling(
    config: str, steps: int, runners: int, seed: int = 0, address: str | None = None, envs: int | None = None
) -> dict:
    """Env steps/s of ``runners`` EnvRunners sampling at once, ``steps`` each (in-process Ray, or the cluster
    at ``address``); ``envs``: environments per runner (None: the config's), ``steps`` over all of them."""
    import ray

    from marl.deploy.local_ray import start_local_ray, stop_algorithm, without_known_noise
    from marl.training.priority_train import load_config, ppo_config

    cfg = load_config(config)
    cfg["seed"] = seed
    cfg["ppo"] = {**cfg["ppo"], "num_env_runners": runners, "num_cpus_per_env_runner": 1}
    if envs is not None:
        cfg["ppo"]["num_envs_per_env_runner"] = envs
    if address:
        ray.init(address=address, log_to_driver=False)
    else:  # as the training command starts it: its workers' threads, quiet
        start_local_ray(max(2, runners), int(cfg["ray"]["object_store_mb"]) * 1024**2)
    try:
        with without_known_noise():
            algo = ppo_config(cfg).build_algo()
        try:
            group = algo.env_runner_group
            group.foreach_env_runner(lambda r: r.sample(num_timesteps=50), local_env_runner=False)  # warm up
            t0 = time.perf_counter()
            counts = group.foreach_env_runner(
                lambda r: sum(ep.env_steps() for ep in r.sample(num_timesteps=steps)), local_env_runner=False
            )
            wall = time.perf_counter() - t0
            nodes = group.foreach_env_runner(lambda r: ray.get_runtime_context().get_node_id(), local_env_runner=False)
        finally:
            stop_algorithm(algo)
    finally:
        ray.shutdown()
    if len(counts) < runners:
        raise RuntimeError(f"{runners - len(counts)} of {runners} EnvRunners failed (see Ray's worker logs)")
    total = int(sum(counts))
    return {"runners": runners, "envs_per_runner": int(cfg["ppo"]["num_envs_per_env_runner"]), "env_steps": total,
            "wall_s": wall, "env_steps_per_s": total / wall, "runner_nodes": len(set(nodes))}  # fmt: skip


def training(config: str, iterations: int, algo: str, seed: int = 0) -> dict:
    """Env steps/s of ``iterations`` training iterations of ``config`` with RLlib's ``algo`` (in-process Ray)."""
    import tempfile

    from marl.training.priority_train import load_config, train_priority

    cfg = load_config(config)
    cfg.update(seed=seed, algo=algo, tune=None)
    cfg["ppo"] = {**cfg["ppo"], "iterations": iterations, "time_budget_min": 1e9, "snapshot_every": 0,
                  "checkpoint_every": 0}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="marlsched-train-throughput-") as out:
        rows = train_priority(cfg, out, log=lambda line: print(f"  {algo}: {line}", flush=True))["rows"]
    later = rows[1:] or rows
    steps = later[-1]["env_steps"] - (rows[0]["env_steps"] if len(rows) > 1 else 0)
    minutes = later[-1]["minutes"] - (rows[0]["minutes"] if len(rows) > 1 else 0.0)
    return {"algo": algo, "iterations": len(rows), "env_steps": int(rows[-1]["env_steps"]),
            "env_steps_per_s": steps / max(60.0 * minutes, 1e-9)}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "experiments" / "configs" / "marl_philly.yaml"))
    ap.add_argument("--steps", type=int, default=1000, help="steps of each environment per measurement")
    ap.add_argument("--runners", type=int, nargs="*", default=[1, 2], help="EnvRunner counts to sample with")
    ap.add_argument(
        "--envs", type=int, nargs="*", default=[], help="environments per EnvRunner to sample with (1 runner)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the figures to this file")
    ap.add_argument("--train", type=int, default=0, metavar="N", help="also train N iterations with each algorithm")
    ap.add_argument("--algos", nargs="*", default=["ppo", "appo"], choices=["ppo", "appo"])
    args = ap.parse_args(argv)
    print(f"== one process: {args.config}, {args.steps} steps", flush=True)
    one = one_process(args.config, args.steps, args.seed)
    for key, value in one.items():
        print(f"  {key:24s} {value:.3f}" if isinstance(value, float) else f"  {key:24s} {value}", flush=True)
    rows = []
    for k in args.runners:
        print(f"== RLlib, {k} EnvRunner(s), {args.steps} steps each", flush=True)
        rows.append(rllib_sampling(args.config, args.steps, k, args.seed))
        print(f"  env steps/s {rows[-1]['env_steps_per_s']:.1f} ({rows[-1]['env_steps']} steps in "
              f"{rows[-1]['wall_s']:.1f} s)", flush=True)  # fmt: skip
    if len(rows) > 1:
        for r in rows[1:]:
            print(f"  {r['runners']} runners / {rows[0]['runners']}: "
                  f"{r['env_steps_per_s'] / rows[0]['env_steps_per_s']:.2f}x")  # fmt: skip
    by_envs = []
    for e in args.envs:
        print(f"== RLlib, 1 EnvRunner stepping {e} environment(s), {args.steps} steps in all", flush=True)
        by_envs.append(rllib_sampling(args.config, args.steps, 1, args.seed, envs=e))
        rate, first = by_envs[-1]["env_steps_per_s"], by_envs[0]
        ratio = f" ({rate / first['env_steps_per_s']:.2f}x with {first['envs_per_runner']})" if by_envs[1:] else ""
        print(f"  env steps/s {rate:.1f}{ratio}", flush=True)
    trained = {}
    for algo in args.algos if args.train else []:
        print(f"== training, {algo}, {args.train} iterations", flush=True)
        trained[algo] = training(args.config, args.train, algo, args.seed)
        print(f"  env steps/s {trained[algo]['env_steps_per_s']:.1f} (after the first iteration)", flush=True)
    if args.json is not None:
        figures = {"config": args.config, "steps": args.steps, "one_process": one,
                   "rllib": {str(r["runners"]): r for r in rows},
                   "rllib_envs": {str(r["envs_per_runner"]): r for r in by_envs}, "training": trained}  # fmt: skip
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
