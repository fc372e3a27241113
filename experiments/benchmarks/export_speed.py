"""Time of writing each policy kind's ``torch.export`` program: the first export of an architecture in a
process (traced) and the next ones with new weights (the traced program refilled), as a training run writes
them at each selected iteration. Prints seconds and each program's largest difference from its network.

    python experiments/benchmarks/export_speed.py
    python experiments/benchmarks/export_speed.py --repeats 5 --hidden 32
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch


def _kinds(hidden: int) -> dict[str, tuple[Callable[[], torch.nn.Module], Callable]]:
    from marl.baselines import dl2, topdrl
    from marl.deploy import priority_export, remaining_policy, rounds_policy
    from marl.models.priority_net import PlacingPriorityNet, PriorityNet
    from marl.models.remaining_work import RemainingWorkNet
    from marl.models.rounds_scorer import PairScorer

    return {
        "priority": (lambda: PriorityNet(hidden), priority_export.save_program_of),
        "placing priority": (lambda: PlacingPriorityNet(hidden), priority_export.save_program_of),
        "round scorer": (lambda: PairScorer(hidden=hidden), rounds_policy.save_program_of),
        "remaining work": (lambda: RemainingWorkNet(hidden=hidden), remaining_policy.save_program_of),
        "dl2": (lambda: dl2.DL2Net(hidden=hidden), dl2.save_program_of),
        "topdrl": (lambda: topdrl.TopDRLNet(hidden=hidden), topdrl.save_program_of),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="exports of each kind with new weights")
    ap.add_argument("--hidden", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"{'kind':18s} {'first s':>8s} {'next s (median)':>16s} {'max diff':>9s}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (build, save) in _kinds(args.hidden).items():
            times, worst = [], 0.0
            for i in range(1 + args.repeats):
                torch.manual_seed(i)
                net = build().eval()
                start = time.perf_counter()
                worst = max(worst, save(net, Path(tmp) / f"{name.replace(' ', '-')}-{i}.pt2"))
                times.append(time.perf_counter() - start)
            nxt = sorted(times[1:])[len(times[1:]) // 2] if args.repeats else float("nan")
            print(f"{name:18s} {times[0]:8.2f} {nxt:16.2f} {worst:9.1e}", flush=True)


if __name__ == "__main__":
    main()
