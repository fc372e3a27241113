"""A two-node Ray cluster on this machine (loopback, one CPU per node): the deployment spread over both
nodes, and RLlib rollouts with EnvRunners on both nodes against the same runners on one node.

1. Deployment: the shipped ``philly-small-dagger`` priority policy as 32 agents of dc-1k on 2 actors, one
   per node; the episode must complete, with every decision equal to in-process inference.
2. ``env_throughput``'s sampling: 2 EnvRunners of ``marl_philly.yaml`` on the two nodes (one each) and on
   one in-process node with 2 CPUs. Both use the same two cores of this machine, so the figures tell the
   cost of running across nodes (object transfer between raylets), not a speed-up.

    python experiments/benchmarks/two_node.py [--jobs 1000] [--steps 500]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from experiments.benchmarks import env_throughput
from experiments.local_cluster import local_cluster

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "experiments" / "policies" / "philly-small-dagger"


def deployment(address: str, jobs: int) -> dict[str, Any]:
    """32 agents on 2 actors over the cluster at ``address`` against in-process inference, decision for decision."""
    import ray

    from cluster_sim.build import build_simulator
    from marl.deploy.actors import deploy_policy
    from marl.deploy.priority_export import load_priority_policy

    # arrivals rated by the jobs' mean GPU-time (load=), so any job count keeps dc-1k at 0.9 (window_load= asks the
    # arrivals alone to offer 0.9 of 8,192 GPUs, which 1,000 jobs cannot)
    workload = f"synthetic:{jobs},load=0.9,gpu_scale=8"

    def sim():
        return build_simulator("dc-1k", workload, seed=0, interference="none", restart_cost=30.0)

    print(f"in-process reference: {workload} on dc-1k, 32 agents", flush=True)
    ref = sim().run(load_priority_policy(POLICY, num_agents=32), progress=True)
    ray.init(address=address, log_to_driver=False)
    try:
        sched, actors = deploy_policy(POLICY, num_agents=32, num_actors=2, num_cpus=0.5)
        try:
            print("the same episode served by 2 actors over both nodes", flush=True)
            t0 = time.perf_counter()
            res = sim().run(sched, progress=True)
            wall = time.perf_counter() - t0
            nodes = {s["node_id"] for s in actors.info()}
            calls = actors.agent_calls
        finally:
            actors.shutdown()
    finally:
        ray.shutdown()
    same = all(np.array_equal(getattr(res, k), getattr(ref, k)) for k in ("start", "end", "span"))
    return {"jobs": jobs, "jobs_completed": int(res.metrics()["jobs_completed"]), "actor_nodes": len(nodes),
            "decisions_per_s": calls / wall, "identical_to_in_process": same}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000, help="jobs of the dc-1k deployment episode")
    ap.add_argument("--steps", type=int, default=500, help="steps of each EnvRunner per rollout measurement")
    ap.add_argument("--config", default=str(REPO / "experiments" / "configs" / "marl_philly.yaml"))
    args = ap.parse_args(argv)
    with local_cluster(nodes=2, cpus_per_node=1) as (address, env):
        os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")})
        print(f"== deployment on the two-node cluster at {address}", flush=True)
        deploy = deployment(address, args.jobs)
        print(f"== RLlib rollouts: 2 EnvRunners over both nodes ({args.steps} steps per runner)", flush=True)
        both = env_throughput.rllib_sampling(args.config, args.steps, 2, 0, address=address)
    print(f"== RLlib rollouts: 2 EnvRunners on one node ({args.steps} steps per runner)", flush=True)
    one = env_throughput.rllib_sampling(args.config, args.steps, 2, 0)
    print(
        f"deployment: {deploy['jobs_completed']}/{deploy['jobs']} jobs, actors on {deploy['actor_nodes']} nodes, "
        f"{deploy['decisions_per_s']:.0f} decisions/s, identical to in-process: {deploy['identical_to_in_process']}"
    )
    print(f"rollouts, runners on {both['runner_nodes']} nodes: {both['env_steps_per_s']:.1f} env steps/s")
    print(f"rollouts, runners on {one['runner_nodes']} node:  {one['env_steps_per_s']:.1f} env steps/s")
    print(f"two nodes / one node: {both['env_steps_per_s'] / one['env_steps_per_s']:.2f}x")


if __name__ == "__main__":
    main()
