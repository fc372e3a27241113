"""``marlsched check-leak``: does a scheduler read lengths it should not know (:mod:`cluster_sim.leak_check`)?"""

from __future__ import annotations

import argparse

from cluster_sim.leak_check import DEFAULT_CLUSTER, DEFAULT_WORKLOAD, check_length_leak
from experiments.simulate import MorePolicies


def add_check_leak_command(subparsers) -> None:
    p = subparsers.add_parser(
        "check-leak",
        help="check that a scheduler reads no job's length (run it with lengths hidden: the same decisions?)",
        description=(
            "Run each scheduler twice on one workload: as it is, and seeing every job's length and remaining time "
            "multiplied by a seeded random factor while the simulation runs on the true ones. A scheduler that "
            "reads no length (a real one may use requests, tenant, wait, attained service and finished jobs' "
            "history) finishes every job at the same second; one that reads them is named, with where it called "
            "remaining_time. Exit status 1 where any scheduler reads lengths, 3 where none does but no two jobs ever "
            "waited at once, so nothing was checked (the check needs a queue)."
        ),
    )
    p.add_argument(
        "--policy",
        required=True,
        action=MorePolicies,
        help="schedulers, comma-separated, as simulate takes them (marl:DIR, FILE:Class); or give --policy again",
    )
    p.add_argument("--cluster", default=DEFAULT_CLUSTER, help=f"cluster preset or YAML (default {DEFAULT_CLUSTER})")
    p.add_argument(
        "--workload", default=DEFAULT_WORKLOAD, help=f"a workload on which jobs wait (default {DEFAULT_WORKLOAD})"
    )
    p.add_argument("--seed", type=int, default=0, help="the workload's and the hidden factors' seed (default 0)")
    p.set_defaults(func=check_leak_command)


def check_leak_command(args: argparse.Namespace) -> int:
    from experiments.simulate import make_scheduler_by_name, split_policies

    leaks = unchecked = 0
    for name in split_policies(args.policy):
        report = check_length_leak(
            lambda name=name: make_scheduler_by_name(name, args.seed),
            cluster=args.cluster,
            workload=args.workload,
            seed=args.seed,
        )
        print(report, flush=True)
        leaks += report.reads_lengths
        unchecked += report.inconclusive
    return 1 if leaks else 3 if unchecked else 0
