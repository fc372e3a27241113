"""A two-node Ray cluster on this machine (loopback, one CPU per node): the deployment spread over both
nodes, and RLlib rollouts with EnvRunners on both nodes against the same runners on one node.

1. ``marl_deploy_dc1k`` on the cluster: 32 agents of dc-1k on 2 actors, one per node; the episode must
   complete, with every decision equal to in-process inference.
2. ``env_throughput``'s sampling: 2 EnvRunners of ``marl_small.yaml`` on the two nodes (one each) and on
   one in-process node with 2 CPUs. Both use the same two cores of this machine, so the figures tell the
   cost of running across nodes (object transfer between raylets), not a speed-up.

    python experiments/benchmarks/two_node.py [--jobs 300] [--steps 1000]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from experiments.benchmarks import env_throughput, marl_deploy_dc1k
from experiments.local_cluster import local_cluster

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=300, help="jobs of the dc-1k deployment episode")
    ap.add_argument("--steps", type=int, default=1000, help="steps of each EnvRunner per rollout measurement")
    ap.add_argument("--config", default=str(REPO / "experiments" / "configs" / "marl_small.yaml"))
    args = ap.parse_args(argv)
    with local_cluster(nodes=2, cpus_per_node=1) as (address, env):
        os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")})
        print(f"== deployment on the two-node cluster at {address}", flush=True)
        deploy = marl_deploy_dc1k.main(["--address", address, "--jobs", str(args.jobs), "--actors", "2", "--check"])
        print(f"== RLlib rollouts: 2 EnvRunners over both nodes ({args.steps} steps per runner)", flush=True)
        both = env_throughput.rllib_sampling(args.config, args.steps, 2, None, 0, address=address)
    print(f"== RLlib rollouts: 2 EnvRunners on one node ({args.steps} steps per runner)", flush=True)
    one = env_throughput.rllib_sampling(args.config, args.steps, 2, None, 0)
    print(
        f"deployment: {deploy['jobs_completed']}/{deploy['jobs']} jobs, actors on {deploy['actor_nodes']} nodes, "
        f"{deploy['decisions_per_s']:.0f} decisions/s, identical to in-process: {deploy['identical_to_in_process']}"
    )
    print(f"rollouts, runners on {both['runner_nodes']} nodes: {both['env_steps_per_s']:.1f} env steps/s")
    print(f"rollouts, runners on {one['runner_nodes']} node:  {one['env_steps_per_s']:.1f} env steps/s")
    print(f"two nodes / one node: {both['env_steps_per_s'] / one['env_steps_per_s']:.2f}x")


if __name__ == "__main__":
    main()
