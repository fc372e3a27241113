"""The DAgger loop of the imitation trainers: round 0 on the teacher's states, then rounds on the policy's own.

Each round plays its windows in worker processes with the current network (None in round 0: the teacher acts),
records what the agent sees with the teacher's label (a privileged one, such as the true remaining time, which
only training reads), aggregates every round's rows and fits the network again on all of them. What is recorded
and how the network is fitted are the agent's (``collect`` and ``fit``); the rounds, the aggregation, the
progress rows and the log lines are this loop's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from marl.training.worker_map import worker_map

Chunk = dict[str, np.ndarray]  # one window's rows, column by column (the same columns in every window)


def dagger(
    rounds: int,
    tasks: Callable[[int], Sequence[tuple]],
    collect: Callable[[tuple], Chunk | None],
    fit: Callable[[int, Chunk], tuple[Any, dict[str, Any]]],
    *,
    describe: Callable[[tuple], str],
    teacher: str,
    workers: int,
    log: Callable[[str], None],
    started: float | None = None,
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """Round 0, then ``rounds`` DAgger rounds. ``tasks(rnd)`` gives the round's windows as tuples;
    ``collect((*task, state))`` plays one in a worker (``state``: the network's weights, None in round 0) and
    returns its rows, or None where the window is too quiet or recorded nothing; ``fit(rnd, data)`` fits on
    every row so far and returns the network (with a ``state_dict``) and its figures. Returns the last network,
    one progress row per round and the last round's figures (arrays included)."""
    started = time.perf_counter() if started is None else started
    chunks: list[Chunk] = []
    progress: list[dict[str, Any]] = []
    net: Any = None
    figures: dict[str, Any] = {}
    with worker_map(workers) as run:
        for rnd in range(rounds + 1):
            state = None if net is None else net.state_dict()
            round_tasks = list(tasks(rnd))
            used = quiet = new = 0
            for task, chunk in zip(round_tasks, run(collect, [(*t, state) for t in round_tasks]), strict=True):
                if chunk is None:
                    quiet += 1
                    log(f"round {rnd}: {describe(task)} too quiet for the load or nothing recorded, left out")
                    continue
                used += 1
                size = len(next(iter(chunk.values())))
                new += size
                chunks.append(chunk)
                log(f"round {rnd}: {describe(task)}, {size} rows ({time.perf_counter() - started:.0f} s)")
            if not chunks:
                raise ValueError(
                    f"no row recorded on the {len(round_tasks)} training windows; lower the load or record more"
                )
            data = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
            net, figures = fit(rnd, data)
            row = {
                "round": rnd, "collected_by": teacher if rnd == 0 else "policy", "windows": used,
                "quiet_windows": quiet, "new_rows": new, "rows": len(next(iter(data.values()))),
                **{k: v for k, v in figures.items() if not isinstance(v, np.ndarray)},
                "seconds": round(time.perf_counter() - started, 1),
            }  # fmt: skip
            progress.append(row)
            said = f"round {rnd}: {row['rows']} rows"
            if "holdout_corr" in row:
                corr, alone = row["holdout_corr"], row["holdout_corr_history"]
                said += f"; held-out correlation {corr:.3f} (history alone {alone:.3f})"
            log(said)
    return net, progress, figures


__all__ = ["Chunk", "dagger"]
