"""Train the single-agent Gymnasium environment with Stable-Baselines3, then evaluate it in the simulator.

    pip install -e ".[sb3]"
    python experiments/examples/sb3_single_agent.py --steps 5000 --out results/sb3
    marlsched simulate --cluster small --workload synthetic:2000,window_load=0.9 \
        --policy experiments/examples/sb3_single_agent.py:SB3Scheduler,model=results/sb3,qssf,tiresias

One agent scores every job of the cluster (:class:`marl.env.standard_envs.SingleAgentSchedEnv`); its action
is a residual on QSSF's scores, so SB3's PPO starts at QSSF. Training writes ``model.zip`` (SB3's PPO) and
``env_config.json`` (the environment it saw) into ``--out``. :class:`SB3Scheduler` reads both and runs the
trained policy's mean action through the same agents as the environment.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.results import write_atomic
from marl.env.priority_agents import PriorityAgents
from marl.env.priority_env import PriorityEnvConfig

DEFAULT_ENV: dict[str, Any] = {
    "cluster": "small",
    "workload": "synthetic:2000,window_load=0.9",
    "interference": "none",
    "interference_data": None,
}


class SB3Scheduler(PriorityAgents):
    """A policy trained by :func:`train` as a marlsched scheduler (``model``: the training ``--out``)."""

    def __init__(self, model: str, name: str = "sb3-ppo") -> None:
        from stable_baselines3 import PPO

        from marl.env.standard_envs import prior_scores

        folder = Path(model)
        env = PriorityEnvConfig.from_dict(json.loads((folder / "env_config.json").read_text()))
        self.sb3 = PPO.load(folder / "model.zip", device="cpu")

        def scorer(obs: dict[str, np.ndarray]) -> np.ndarray:
            public = {k: v for k, v in obs.items() if k in self.sb3.observation_space.spaces}
            action, _ = self.sb3.predict(public, deterministic=True)
            return prior_scores(obs, self.layout) + np.asarray(action, dtype=np.float32)

        super().__init__(scorer, num_agents=1, slots=env.slots, hysteresis=env.hysteresis, name=name)


def train(steps: int, out: Path, env_config: dict[str, Any], seed: int = 0) -> Path:
    """PPO (Stable-Baselines3 defaults, smaller rollouts) on :class:`marl.env.standard_envs.SingleAgentSchedEnv`."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger

    from marl.env.standard_envs import SingleAgentSchedEnv

    env = SingleAgentSchedEnv({**env_config, "seed": seed})
    # a small initial spread: QSSF's scores differ by tenths, so unit noise would be a random order
    model = PPO("MultiInputPolicy", env, n_steps=256, batch_size=64, n_epochs=4, seed=seed, verbose=0,
                policy_kwargs={"log_std_init": -2.0})  # fmt: skip
    model.set_logger(Logger(folder=None, output_formats=[]))  # SB3's own would leave an empty folder in /tmp per run
    t0 = time.perf_counter()
    model.learn(total_timesteps=steps, progress_bar=False)
    out.mkdir(parents=True, exist_ok=True)
    model.save(out / "model.zip")
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
