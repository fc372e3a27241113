"""Select the exported iterate on the select period, after training: a policy no better than its start ships its start.

PPO's last iterate is not always its best, and on a cluster where the untrained agents already are the best
heuristic (``gavel-las`` on mixed GPUs) a few iterations can leave the agents worse than where they started.
This step replays fixed windows of the select period (:data:`cluster_sim.traces.periods.PERIODS`, 2017-10-15 ..
2017-11-01: never trained on, never reported on) with every candidate: the warm start (``OUT/warm_start``),
each snapshot (``OUT/snapshots/iter-NNN``, ``ppo.snapshot_every``) and the last iterate (``OUT/policy``). The
criterion is paired, since the window dominates a run's average JCT: each candidate's average JCT over the warm
start's on the same window, averaged over the windows. The lowest wins, ties to the earlier iterate, so the warm
start stays unless an iterate beats it. The winner becomes ``OUT/policy`` with the table in its ``metadata.json``
(``selected``), so the choice can be checked.

A training config with a ``select:`` section (keys of :data:`SELECT_DEFAULTS`) runs this step at the end of
``marlsched train``, before the margin selection of a ``tune:`` section.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.traces.periods import PERIODS, on_philly_calendar, refuse_report_period, span_windows, trace_seconds
from marl.deploy.policy_files import METADATA, atomic_folder
from marl.env.priority_env import PriorityEnvConfig
from marl.training.priority_tune import run_window, window_table

SELECT_DEFAULTS: dict[str, Any] = {"days": 2.0, "stride": 2.0, "load": 0.9, "workers": None}
# keys without a default: the span the windows are drawn from (dates or seconds of the training trace); left out,
# the Philly trace's select period, which another trace (counting from its own start) has to replace with its own
SELECT_SPAN: tuple[str, ...] = ("start", "end")
Log = Callable[[str], None]


def candidates_of(out: str | Path) -> dict[str, Path]:
    """The iterates a training in ``out`` left, in training order: label (``warm start``, ``iter-NNN``,
    ``last``) -> policy folder."""
    out = Path(out)
    found = {"warm start": out / "warm_start"}
    found |= {p.name: p for p in sorted((out / "snapshots").glob("iter-*")) if (p / METADATA).is_file()}
    found["last"] = out / "policy"
    missing = [str(p) for p in found.values() if not (p / METADATA).is_file()]
    if missing:
        raise FileNotFoundError(f"no policy folder at {', '.join(missing)}; select after a training that wrote them")
    return found


def select_windows(
    trace: str, days: float, stride: float, load: float, start: Any = None, end: Any = None
) -> list[str]:
    """The select stage's windows of ``trace``: the Philly select period's, or those of ``start``..``end`` (dates or
    seconds); an error saying what to give where the trace is not on Philly's calendar and no span is given."""
    if start is None and end is None:
        if not on_philly_calendar(trace):
            sel = PERIODS["select"]
            raise ValueError(
                f"select: without start and end the windows are the Philly trace's select period ({sel.first}.."
                f"{sel.end}), and {trace.split(',')[0]} counts its seconds from its own first arrival; give "
                "select: {start: DATE, end: DATE}, days after the training span and before the windows you report on"
            )
        return PERIODS["select"].windows(trace, days, stride, load)
    if start is None or end is None:
        raise ValueError("select: give both start and end (dates like 2017-10-15 or seconds from the trace's start)")
    first, last = trace_seconds(start, trace), trace_seconds(end, trace)
    refuse_report_period("select", first, last, trace)  # an iterate chosen there would make its figures selection ones
    return span_windows(trace, first, last, days, stride, load, f"select: the span {start}..{end}")


def select_iterate(
    out: str | Path,
    env: Mapping[str, Any],
    *,
    days: float = 2.0,
    stride: float = 2.0,
    load: float = 0.9,
    workers: int | None = None,
    start: Any = None,
    end: Any = None,
    command: str = "",
    log: Log = print,
) -> dict[str, Any]:
    """Run every candidate of the training in ``out`` on the select period's windows and make the best
    ``OUT/policy`` (see the module docstring; ``start``, ``end``: :func:`select_windows`); returns the record
    written into its metadata."""
    out = Path(out)
    found = candidates_of(out)
    cfg = PriorityEnvConfig.from_dict(env)
    specs = select_windows(cfg.trace, days, stride, load, start, end)
    labels = list(found)
    tasks = [(str(found[c]), dict(env), s, None) for s in specs for c in labels]
    t0 = time.perf_counter()
    log(f"selecting the iterate: {len(specs)} select windows x {len(labels)} candidates = {len(tasks)} simulations")
    if len(specs) < 3:
        log(
            f"  warning: {len(specs)} select window(s): a choice on so few is mostly their own noise (a window's "
            "figures move by more than an iterate's); a longer select span or a shorter stride gives more"
        )
    table = window_table(run_window, tasks, labels, workers, log, specs)
    ratio = (table / table[:, :1]).mean(axis=0)
    best = int(np.argmin(ratio))  # the first of equals: the earlier iterate
    chosen = labels[best]
    record = {
        "command": command,
        "criterion": "mean over the select windows of avg JCT / the warm start's on the window; ties: earlier",
        "windows": specs,
        "candidates": labels,
        "avg_jct": table.round(1).tolist(),
        "mean_ratio": ratio.round(5).tolist(),
        "chosen": chosen,
        "minutes": round((time.perf_counter() - t0) / 60.0, 2),
    }
    log("  ".join(f"{c} {r - 1:+.2%}" for c, r in zip(labels, ratio, strict=True)) + f"  -> {chosen}")
    if chosen == "warm start" and len(labels) > 1:
        origin = json.loads((found[chosen] / METADATA).read_text()).get("warm_start")
        untrained = not origin or "untrained" in str(origin)
        what = f"the network it started from ({origin})"
        if untrained:
            what = "the untrained agents (decision for decision)"
        log(f"  no iterate beat the warm start on the select windows: {out / 'policy'} is a copy of {found[chosen]}, "
            f"{what}; train longer or on more windows to move it")  # fmt: skip
    policy = out / "policy"
    if chosen != "last":  # the last iterate stays at hand as a snapshot of its iteration, to evaluate or choose later
        done = json.loads((policy / METADATA).read_text()).get("trained", {}).get("iterations")
        keep = out / "snapshots" / f"iter-{int(done):03d}" if done else None
        if keep is not None and not keep.exists():
            with atomic_folder(keep) as tmp:
                shutil.copytree(policy, tmp, dirs_exist_ok=True)
            log(f"  the last iterate is kept as {keep}")
    with atomic_folder(policy) as tmp:
        for item in found[chosen].iterdir():
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, tmp / item.name)
        meta = json.loads((tmp / METADATA).read_text())
        meta["selected"] = record
        (tmp / METADATA).write_text(json.dumps(meta, indent=2) + "\n")
    return record


__all__ = ["SELECT_DEFAULTS", "SELECT_SPAN", "candidates_of", "select_iterate", "select_windows"]
