"""Train the single-agent Gymnasium environment with Stable-Baselines3, then evaluate it in the simulator.

    pip install -e ".[sb3]"
    python experiments/examples/sb3_single_agent.py --steps 5000 --out results/sb3
    marlsched simulate --cluster experiments/configs/clusters/small-64.yaml --workload synthetic:300,load=10 \
        --policy experiments/examples/sb3_single_agent.py:SB3Scheduler,model=results/sb3,fifo,tiresias

Training writes ``model.zip`` (SB3's PPO) and ``env_config.json`` (the environment it saw) into ``--out``.
:class:`SB3Scheduler` reads both and schedules through the same coordinator as the environment, taking
the most likely allowed action of the trained policy at every step.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.results import write_atomic
from marl.deploy.scheduler import MarlScheduler
from marl.env.obs_layout import ObsLayout
from marl.env.placement_config import EnvConfig

DEFAULT_ENV: dict[str, Any] = {
    "cluster": "experiments/configs/clusters/small-64.yaml",
    "workload": "synthetic:300,load=10",
    "queue_slots": 3,
    "placements": ["consolidate", "closest-gpus", "spread"],
    "reward_scale": 36000.0,
}


class SB3Scheduler(MarlScheduler):
    """A policy trained by :func:`train` as a marlsched scheduler (``model``: the training ``--out``)."""

    def __init__(self, model: str, name: str = "sb3-ppo") -> None:
        import torch
        from stable_baselines3 import PPO

        folder = Path(model)
        env = EnvConfig.from_dict(json.loads((folder / "env_config.json").read_text()))
        self.sb3 = PPO.load(folder / "model.zip", device="cpu")
        layout = ObsLayout(**json.loads((folder / "layout.json").read_text()))

        def policy_fn(batch: dict[str, np.ndarray]) -> np.ndarray:
            obs = {**batch, "action_mask": batch["action_mask"].astype(np.int8)}
            with torch.no_grad():
                tensor, _ = self.sb3.policy.obs_to_tensor(obs)
                return self.sb3.policy.get_distribution(tensor).distribution.logits.numpy()

        super().__init__(
            policy_fn,
            layout,
            num_agents=1,
            placements=env.placements,
            partition_unit=env.partition_unit,
            queue_order=env.queue_order,
            name=name,
        )


def train(steps: int, out: Path, env_config: dict[str, Any], seed: int = 0) -> Path:
    """PPO (Stable-Baselines3 defaults, smaller rollouts) on :class:`marl.env.standard_envs.SingleAgentSchedEnv`."""
    from stable_baselines3 import PPO

    from marl.env.standard_envs import SingleAgentSchedEnv

    env = SingleAgentSchedEnv({**env_config, "seed": seed})
    model = PPO("MultiInputPolicy", env, n_steps=256, batch_size=64, n_epochs=4, seed=seed, verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps, progress_bar=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "model.zip")
    layout = env.env.layout
    write_atomic(out / "layout.json", json.dumps({k: getattr(layout, k) for k in ("G", "S", "R", "Q", "C")}) + "\n")
    write_atomic(out / "env_config.json", json.dumps(env_config, indent=2) + "\n")
    print(f"trained {steps} steps in {time.perf_counter() - t0:.1f} s -> {out}")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=5000, help="environment steps to train (default 5000)")
    ap.add_argument("--out", default="results/sb3", help="folder for model.zip and env_config.json")
    ap.add_argument("--cluster", default=DEFAULT_ENV["cluster"])
    ap.add_argument("--workload", default=DEFAULT_ENV["workload"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    train(args.steps, Path(args.out), {**DEFAULT_ENV, "cluster": args.cluster, "workload": args.workload}, args.seed)


if __name__ == "__main__":
    main()
