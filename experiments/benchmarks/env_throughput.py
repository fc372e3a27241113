"""Throughput of the multi-agent training environment: environment steps/s and agent-steps/s.

1. One process: the environment of a training config (default ``experiments/configs/marl_small.yaml``)
   stepped by its policy network (freshly initialised; a forward pass costs the same whatever the
   weights), with the share of time in the simulation (``Simulator.advance``/``apply``), the
   coordinator (dispatch, candidates, features, interference predictions) and the network. With
   ``--envs N`` N copies step together and one forward pass scores all their agents, as an EnvRunner
   with ``ppo.num_envs_per_env_runner: N`` does.
2. RLlib: the same environment and network sampled by 1 and 2 EnvRunners at once (``--runners``), each
   stepping 1 or N environments, as PPO samples them; the scaling from 1 to 2 runners is printed.

``--steps`` counts the steps of each environment: N copies take N times as many steps as one, and every
runner takes as many as a lone runner. A step's cost depends on where the episode is (the first few
hundred steps, before the cluster fills, cost half of the later ones), so dividing a fixed total among
copies or runners would measure more of the cheap start for more of them and overstate the gain.

The simulator's interference is the ground truth (``oracle``) and the agents see its predictions, so no
predictor needs training first; ``--interference-model FILE`` uses a learned one for both instead.

    python experiments/benchmarks/env_throughput.py [--config FILE] [--steps 3000] [--envs 1 8] [--runners 1 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
GAVEL = REPO.parent / "shared" / "traces" / "gavel" / "simulation_throughputs.json"


def env_config(config: str, interference_model: str | None) -> tuple[Any, dict[str, Any]]:
    from marl.training.config import load_train_config

    cfg = load_train_config(config)
    env = cfg.env_config()
    if interference_model:
        env.update(interference="learned", interference_model=interference_model, predictor=None)
    else:
        env.update(interference="oracle", interference_model=f"gavel:{GAVEL}" if GAVEL.is_file() else None)
        env["predictor"] = None
    return cfg, env


class Timers:
    """Seconds spent in wrapped methods, by category (outermost call only, so nothing counts twice)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._depth = 0

    def wrap(self, owner: type, name: str, category: str) -> None:
        inner: Callable = getattr(owner, name)
        timers = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if timers._depth:
                return inner(*args, **kwargs)
            timers._depth += 1
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                timers.seconds[category] += time.perf_counter() - t0
                timers._depth -= 1

        setattr(owner, name, timed)


def one_process(config: str, steps: int, interference_model: str | None, seed: int, envs: int = 1) -> dict[str, float]:
    """``envs`` environments stepped together (``steps`` each), all their agents scored by one forward pass
    per step."""
    import torch

    from cluster_sim.simulator import Simulator
    from marl.env.coordinator import Coordinator
    from marl.env.obs_layout import OBS_KEYS
    from marl.env.placement_env import MarlSchedEnv
    from marl.training.train import module_spec_for

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    cfg, env_cfg = env_config(config, interference_model)
    spec, _ = module_spec_for(cfg, env_cfg)
    net = spec.build().net.eval()
    timers = Timers()
    for name in ("advance", "apply"):
        timers.wrap(Simulator, name, "simulation")
    for name in ("begin", "observe", "act", "end_round", "any_feasible", "batch"):
        timers.wrap(Coordinator, name, "coordinator")
    copies = [MarlSchedEnv({**env_cfg, "seed": seed + 1000 * i, "envs_per_runner": envs}) for i in range(envs)]
    agents = copies[0].possible_agents
    rng = np.random.default_rng(seed)
    obs = [env.reset(seed=seed + 1000 * i)[0] for i, env in enumerate(copies)]
    done_steps, episodes, net_s = 0, 0, 0.0
    t_start = time.perf_counter()
    while done_steps < steps * envs:
        batch = {k: torch.from_numpy(np.stack([o[a][k] for o in obs for a in agents])) for k in OBS_KEYS}
        t0 = time.perf_counter()
        with torch.no_grad():
            logits, _ = net(*(batch[k] for k in OBS_KEYS))
        net_s += time.perf_counter() - t0
        # sample every agent's action at once (inverse CDF), as RLlib's action distribution does
        cdf = torch.softmax(logits.double(), dim=1).cumsum(dim=1).numpy()
        u = rng.random(len(cdf)) * cdf[:, -1]
        choice = np.minimum((cdf < u[:, None]).sum(axis=1), cdf.shape[1] - 1).tolist()
        for i, env in enumerate(copies):
            actions = dict(zip(agents, choice[i * len(agents) : (i + 1) * len(agents)], strict=True))
            obs[i], _, term, _, _ = env.step(actions)
            if term["__all__"]:
                episodes += 1
                obs[i], _ = env.reset()
        done_steps += envs
    wall = time.perf_counter() - t_start
    shares = {k: v / wall for k, v in timers.seconds.items()}
    shares["network"] = net_s / wall
    shares["other"] = 1.0 - sum(shares.values())
    return {
        "envs": envs,
        "env_steps": done_steps,
        "env_steps_per_s": done_steps / wall,
        "agent_steps_per_s": done_steps * len(agents) / wall,
        "episodes": episodes,
        **{f"share_{k}": v for k, v in shares.items()},
    }


def rllib_sampling(
    config: str,
    steps: int,
    runners: int,
    interference_model: str | None,
    seed: int,
    address: str | None = None,
    envs: int = 1,
) -> dict:
    """Env steps/s of ``runners`` EnvRunners sampling at once, each stepping ``envs`` environments ``steps``
    times each (in-process Ray, or the cluster at ``address``)."""
    import ray

    from marl.training.train import build_ppo_config, module_spec_for, training_env_config

    cfg, env_cfg = env_config(config, interference_model)
    cfg = replace(cfg, ppo=replace(cfg.ppo, num_envs_per_env_runner=envs))
    spec, _ = module_spec_for(cfg, env_cfg)
    train_env = training_env_config(cfg)
    train_env.update({k: v for k, v in env_cfg.items() if k != "workload"})
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(
            num_cpus=max(2, runners), object_store_memory=100 * 1024**2, include_dashboard=False, log_to_driver=False
        )
    try:
        ppo = build_ppo_config(cfg, train_env, spec).env_runners(num_env_runners=runners, num_cpus_per_env_runner=1)
        algo = ppo.build_algo()
        try:
            per_runner = steps * envs
            group = algo.env_runner_group
            group.foreach_env_runner(lambda r: r.sample(num_timesteps=50), local_env_runner=False)  # warm up
            t0 = time.perf_counter()
            counts = group.foreach_env_runner(
                lambda r: sum(ep.env_steps() for ep in r.sample(num_timesteps=per_runner)), local_env_runner=False
            )
            wall = time.perf_counter() - t0
            nodes = group.foreach_env_runner(lambda r: ray.get_runtime_context().get_node_id(), local_env_runner=False)
        finally:
            algo.stop()
    finally:
        ray.shutdown()
    total = int(sum(counts))
    return {
        "runners": runners, "envs_per_runner": envs, "env_steps": total, "wall_s": wall,
        "env_steps_per_s": total / wall, "runner_nodes": len(set(nodes)),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(REPO / "experiments" / "configs" / "marl_small.yaml"))
    ap.add_argument("--steps", type=int, default=3000, help="steps of each environment per measurement")
    ap.add_argument("--envs", type=int, nargs="+", default=[1, 8], help="environments stepped together per process")
    ap.add_argument("--runners", type=int, nargs="*", default=[1, 2], help="EnvRunner counts to sample with")
    ap.add_argument("--interference-model", help="a learned predictor file (default: the ground truth)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    ones = []
    for n in args.envs:
        print(f"== one process: {args.config}, {n} environment(s) stepped together, {args.steps} steps", flush=True)
        ones.append(one_process(args.config, args.steps, args.interference_model, args.seed, envs=n))
        for key, value in ones[-1].items():
            print(f"  {key:24s} {value:.3f}" if isinstance(value, float) else f"  {key:24s} {value}", flush=True)
    for o in ones[1:]:
        print(f"  {o['envs']} envs / {ones[0]['envs']}: {o['env_steps_per_s'] / ones[0]['env_steps_per_s']:.2f}x")
    rows = []
    for n in args.envs:
        for k in args.runners:
            print(f"== RLlib, {k} EnvRunner(s) x {n} environment(s)", flush=True)
            rows.append(rllib_sampling(args.config, args.steps, k, args.interference_model, args.seed, envs=n))
            print(f"  env steps/s {rows[-1]['env_steps_per_s']:.1f} ({rows[-1]['env_steps']} steps in "
                  f"{rows[-1]['wall_s']:.1f} s)", flush=True)  # fmt: skip
    for n in args.envs:
        by_k = {r["runners"]: r["env_steps_per_s"] for r in rows if r["envs_per_runner"] == n}
        if len(by_k) > 1:
            k0 = min(by_k)
            for k in sorted(by_k)[1:]:
                print(f"  {n} env(s) per runner: {k} runners / {k0}: {by_k[k] / by_k[k0]:.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
