"""The DAgger loop of the imitation trainers: round 0 on the teacher's states, then rounds on the policy's own.

Its log lines count rounds as ``round R/N`` (round 0 is the teacher's, so a run has N + 1 of them).

Each round plays its windows in worker processes with the current network (None in round 0: the teacher acts),
records what the agent sees with the teacher's label (a privileged one, such as the true remaining time, which
only training reads), aggregates every round's rows and fits the network again on all of them. What is recorded
and how the network is fitted are the agent's (``collect`` and ``fit``); the rounds, the aggregation, the
progress rows and the log lines are this loop's (a trainer whose rows say more gives ``report``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marl.training.worker_map import worker_map

# one window's rows, column by column (the same columns in every window): arrays, or lists of rows whose
# shapes differ (e.g. one entry per scheduling round)
Chunk = dict[str, np.ndarray | list]


@dataclass
class Round:
    """What one round did, for its progress row."""

    index: int
    collected_by: str  # the teacher's name in round 0, then "policy"
    chunks: list[Chunk]  # this round's windows' rows (the quiet ones left out)
    quiet: int  # windows too quiet for the load or that recorded nothing
    rows: int  # rows so far, every round's
    figures: dict[str, Any]  # what ``fit`` returned beside the network
    seconds: float


def join(chunks: list[Chunk]) -> Chunk:
    """The windows' rows, column by column, in the windows' order."""
    return {
        k: np.concatenate([c[k] for c in chunks])
        if isinstance(chunks[0][k], np.ndarray)
        else [row for c in chunks for row in c[k]]
        for k in chunks[0]
    }


def round_row(rnd: Round) -> tuple[dict[str, Any], str]:
    """The progress row and log line of a round: its windows and rows, and ``fit``'s scalar figures."""
    row = {
        "round": rnd.index, "collected_by": rnd.collected_by, "windows": len(rnd.chunks), "quiet_windows": rnd.quiet,
        "new_rows": sum(len(next(iter(c.values()))) for c in rnd.chunks), "rows": rnd.rows,
        **{k: v for k, v in rnd.figures.items() if not isinstance(v, np.ndarray)}, "seconds": rnd.seconds,
    }  # fmt: skip
    said = f"round {rnd.index}: {rnd.rows} rows"
    if "holdout_corr" in row:
        said += f"; held-out correlation {row['holdout_corr']:.3f} (history alone {row['holdout_corr_history']:.3f})"
    return row, said


def dagger(
    rounds: int,
    tasks: Callable[[int], Sequence[tuple]],
    collect: Callable[[tuple], Chunk | None],
    fit: Callable[[int, Chunk], tuple[Any, dict[str, Any]]],
    *,
    describe: Callable[[tuple], str],
    teacher: str,
    workers: int | Callable[..., Iterable],
    log: Callable[[str], None],
    started: float | None = None,
    report: Callable[[Round], tuple[dict[str, Any], str]] = round_row,
) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """Round 0, then ``rounds`` DAgger rounds. ``tasks(rnd)`` gives the round's windows as tuples;
    ``collect((*task, state))`` plays one in a worker (``state``: the network's weights, None in round 0) and
    returns its rows, or None where the window is too quiet or recorded nothing; ``fit(rnd, data)`` fits on
    every row so far and returns the network (with a ``state_dict``) and its figures. ``workers``: a number of
    processes, or a ``map`` to play the windows with (a trainer's own pool). ``report`` turns a round into its
    progress row and log line. Returns the last network (None for ``rounds < 0``: nothing was fitted), one
    progress row per round and the last round's figures (arrays included)."""
    started = time.perf_counter() if started is None else started
    chunks: list[Chunk] = []
    progress: list[dict[str, Any]] = []
    net: Any = None
    figures: dict[str, Any] = {}
    pool = worker_map(workers) if isinstance(workers, int) else contextlib.nullcontext(workers)
    with pool as run:
        for rnd in range(rounds + 1):
            state = None if net is None else net.state_dict()
            round_tasks = list(tasks(rnd))
            new: list[Chunk] = []
            played = zip(round_tasks, run(collect, [(*t, state) for t in round_tasks]), strict=True)
            for k, (task, chunk) in enumerate(played, 1):
                where = f"round {rnd}/{rounds}, window {k}/{len(round_tasks)}: {describe(task)}"
                if chunk is None:
                    log(f"{where} too quiet for the load or nothing recorded, left out")
                    continue
                new.append(chunk)
                size = len(next(iter(chunk.values())))
                log(f"{where}, {size} rows ({time.perf_counter() - started:.0f} s)")
            chunks += new
            if not chunks:
                raise ValueError(
                    f"no row recorded on the {len(round_tasks)} training windows; lower the load or record more"
                )
            data = join(chunks)
            log(
                f"round {rnd}/{rounds}: fitting on {len(next(iter(data.values())))} rows "
                f"({time.perf_counter() - started:.0f} s)"
            )
            net, figures = fit(rnd, data)
            row, said = report(
                Round(rnd, teacher if rnd == 0 else "policy", new, len(round_tasks) - len(new),
                      len(next(iter(data.values()))), figures, round(time.perf_counter() - started, 1))
            )  # fmt: skip
            progress.append(row)
            log(said)
    return net, progress, figures


__all__ = ["Chunk", "Round", "dagger", "join", "round_row"]
