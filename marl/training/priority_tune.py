"""Select the priority agents' preemption margin (hysteresis) on the training period, after training.

Training explores with score noise, which lowers the *effective* margin a waiting job needs to displace
a running one; the deployed policy is deterministic, so the margin it was trained with
(``env.hysteresis``, QSSF's ln 31) is not the one it should run with. This step replays fixed
windows of the training period (never the held-out weeks) once per candidate factor ``e`` (hysteresis
``ln e``: a waiting job must promise ``e`` times less remaining time) and writes the best into the
policy's ``metadata.json``, with every window's figures, so the choice can be checked.

The criterion is paired, since the window dominates a run's average JCT: each window's average JCT is
divided by that window's mean over all factors, and the factor with the lowest mean ratio wins.

A training config with a ``tune:`` section (keys of :data:`TUNE_DEFAULTS`) runs this step at the end of
``marlsched train-priority``, so one command yields the policy as shipped; it also runs on its own:

    marlsched tune-priority --policy experiments/policies/philly-small --config experiments/configs/marl_philly.yaml
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.traces.periods import span_windows, window_label
from marl.deploy.policy_files import not_a_policy_folder
from marl.env.priority_env import PriorityEnvConfig
from marl.training.worker_map import worker_map

FACTORS = (2.0, 4.0, 8.0, 16.0, 31.0)
TUNE_DEFAULTS: dict[str, Any] = {"factors": list(FACTORS), "days": 7.0, "stride": 3.5, "load": 0.9, "workers": None}
Log = Callable[[str], None]


def training_windows(env: PriorityEnvConfig, days: float, stride: float, load: float) -> list[str]:
    """Workload specs of ``days``-long windows every ``stride`` days of the training period at ``load``."""
    try:
        return span_windows(env.trace, env.train_start, env.train_end, days, stride, load, "the training period")
    except ValueError as err:
        raise ValueError(f"{err}; pass a smaller --days") from None


def run_window(task: tuple[str, Mapping[str, Any], str, float | None]) -> float:
    """Average JCT of the policy in a folder on one window, under the training environment's settings, with
    hysteresis ``ln factor`` (None: the folder's own margin)."""
    from cluster_sim.build import build_simulator
    from marl.deploy.priority_export import load_priority_policy

    policy_dir, env, spec, factor = task
    cfg = PriorityEnvConfig.from_dict(env)
    sim = build_simulator(
        cfg.cluster,
        spec,
        seed=0,
        interference=cfg.interference,
        interference_data=cfg.interference_data,  # the predictor file in learned mode
        restart_cost=cfg.restart_cost,
    )
    sched = load_priority_policy(policy_dir, num_agents=cfg.num_agents)
    if factor is not None:
        sched.hysteresis = float(np.log(factor))
    return float(sim.run(sched).jct.mean())


def window_table(
    fn: Callable[[Any], float],
    tasks: Sequence[Any],
    columns: Sequence[str],
    workers: int | None,
    log: Log,
    windows: Sequence[str] = (),
) -> np.ndarray:
    """``fn`` (one simulation's average JCT) over ``tasks``, window by window and ``columns`` within each, in worker
    processes, each result logged (with the window's spec as dates, where ``windows`` gives them); the (windows,
    columns) table. Spawned, not forked: it runs at the end of training, in a process whose Ray threads a fork
    would copy."""
    jct = np.empty(len(tasks))
    with worker_map(workers or os.cpu_count() or 1) as run:
        for i, v in enumerate(run(fn, tasks)):
            jct[i] = v
            w, c = divmod(i, len(columns))
            where = f" ({window_label(windows[w])})" if w < len(windows) else ""
            log(f"[{i + 1}/{len(tasks)}] window {w}{where} {columns[c]}: avg JCT {v:,.0f} s")
    return jct.reshape(-1, len(columns))


def tune_hysteresis(
    policy_dir: str | Path,
    env: dict[str, Any],
    *,
    factors: Sequence[float] = FACTORS,
    days: float = 7.0,
    stride: float = 3.5,
    load: float = 0.9,
    workers: int | None = None,
    command: str = "",
    log: Log = print,
) -> dict[str, Any]:
    """Run every factor on every training window, write the best into ``policy_dir``; returns the record."""
    policy_dir = Path(policy_dir)
    path = policy_dir / "metadata.json"
    if not path.is_file():
        raise not_a_policy_folder(policy_dir)
    if not factors or min(factors) < 1.0:
        raise ValueError(f"factors must be >= 1 (1: no margin), got {list(factors)}")
    cfg = PriorityEnvConfig.from_dict(env)
    specs = training_windows(cfg, days, stride, load)
    tasks = [(str(policy_dir), env, s, float(f)) for s in specs for f in factors]
    t0 = time.perf_counter()
    log(f"{len(specs)} windows x {len(factors)} factors = {len(tasks)} simulations")
    table = window_table(run_window, tasks, [f"factor {f:g}" for f in factors], workers, log, specs)
    ratio = (table / table.mean(axis=1, keepdims=True)).mean(axis=0)
    best = int(np.argmin(ratio))
    record = {
        "command": command,
        "criterion": "mean over windows of avg JCT / the window's mean over factors",
        "windows": specs,
        "factors": [float(f) for f in factors],
        "avg_jct": table.round(1).tolist(),
        "mean_ratio": ratio.round(5).tolist(),
        "factor": float(factors[best]),
        "minutes": round((time.perf_counter() - t0) / 60.0, 2),
    }
    meta = json.loads(path.read_text())
    meta.setdefault("agents", {})["hysteresis"] = float(np.log(factors[best]))
    meta["tuned"] = record
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, path)
    log("factor  " + "  ".join(f"{f:>8g}" for f in factors) + "\nratio   " + "  ".join(f"{r:8.4f}" for r in ratio))
    log(f"hysteresis ln {factors[best]:g} = {np.log(factors[best]):.4f} written to {path}")
    return record
