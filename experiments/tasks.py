"""One evaluation task of an experiment run (a scheduler on a workload and seed), and where a run keeps
its results: the names inside the results folder, how a task is written (atomically) and read back.

:mod:`experiments.run` schedules the tasks; :mod:`experiments.report` and :mod:`experiments.scaling`
read them. All three import from here, and none from another.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.protocol import BurstWindowWarning, SimulationWarning
from cluster_sim.results import write_atomic
from cluster_sim.traces.window import burst_warning
from experiments.own_code import is_ours

CONFIG_FILE = "config.yaml"
STATE_FILE = "state.json"
TASKS_DIR = "tasks"
TRAIN_DIR = "train"
PLOTS_DIR = "plots"


def task_id(scheduler: str, seed: int, workload: str = "") -> str:
    safe = "".join(c if c.isalnum() or c in "-_+" else "_" for c in scheduler)
    where = "".join(c if c.isalnum() or c in "-_+." else "_" for c in workload)
    return f"{safe}__{where}__seed{seed}" if workload else f"{safe}__seed{seed}"


def build_eval_simulator(spec: Mapping[str, Any]) -> Any:
    """The simulator of one task (ground-truth interference; same seed => same workload)."""
    from cluster_sim.build import build_simulator

    return build_simulator(
        spec["cluster"],
        spec["workload"],
        seed=spec["seed"],
        interference=spec["interference"],
        interference_data=spec["interference_data"],
        restart_cost=spec["restart_cost"],
        perf_model=spec["perf_model"],
        start_cost=spec.get("start_cost", 0.0),
        app_restart_costs=spec.get("app_restart_costs", False),
        calibration=spec.get("calibration", False),
    )


def evaluate(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Run one scheduler on one seed; returns metrics, JCTs and sampled timelines (plain data)."""
    import socket

    from experiments.simulate import make_scheduler_by_name

    cpu0 = time.process_time()
    if spec.get("cwd") and spec["cwd"] not in sys.path:
        sys.path.append(spec["cwd"])  # dotted plugin and scheduler modules resolve as in the driver
    if spec.get("plugins"):
        from cluster_sim.plugins import load_plugins

        load_plugins(spec["plugins"])
    label = spec["scheduler"]
    with warnings.catch_warnings(record=True) as caught:  # a worker's stderr is not the user's: kept with the run
        warnings.simplefilter("always", SimulationWarning)
        try:
            sim = build_eval_simulator(spec)
            if burst := burst_warning(sim.jobs):
                warnings.warn(burst, BurstWindowWarning, stacklevel=1)
            sched = make_scheduler_by_name(spec["policy"], spec["seed"], **spec.get("options", {}))
            result = sim.run(sched)
        except Exception as err:  # which of the config's runs: its label, workload and seed
            where = f" on {spec['workload_label']}" if spec.get("workload_label") else ""
            err.add_note(f"in the run of {label}{where}, seed {spec['seed']}")
            raise
    # what a reader of the figures should know: the simulation's warnings and any other of marlsched's own code (oracle
    # interference without the measured pairs), said by the run and in its report; a library's stay the worker's
    kept = [w for w in caught if issubclass(w.category, SimulationWarning) or is_ours(w.filename)]
    for w in caught:
        if not any(w is k for k in kept):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    metrics = result.metrics()
    # a warning that names the scheduler by its class's name names it by the config's label, as the tables do
    said = {str(w.message) for w in kept}
    if sched.name != label:
        said = {f"{label}: {t.removeprefix(sched.name + ': ')}" if t.startswith(sched.name + ": ") else t for t in said}
    metrics["warnings"] = sorted(said)
    metrics["scheduler"] = spec["scheduler"]
    metrics["workload"] = spec.get("workload_label", "")
    metrics["task_cpu_seconds"] = time.process_time() - cpu0  # setup + simulation, whatever else shares the CPU
    series = result.plot_series(spec["timeline_points"])
    return {
        "metrics": metrics,
        "seed": spec["seed"],
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "node_id": _node_id(),
        "jct": series["jct"],
        "timeline_t": series["t"],
        "utilization": series["utilization"],
        "queue": series["queue"],
        "jobs": result.job_rows(),  # jobs.csv: the driver writes it (the task may run on another node)
    }


def _node_id() -> str | None:
    """The Ray node this runs on (None outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # a worker without a runtime context: no node id to record
        return None


def write_task(out: Path, spec: Mapping[str, Any], res: Mapping[str, Any]) -> None:
    """Write one task's results into a temporary folder renamed into place (a present folder is complete)."""
    tasks = out / TASKS_DIR
    final = tasks / spec["id"]
    tmp = tasks / f".{spec['id']}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    np.savez_compressed(
        tmp / "series.npz", jct=res["jct"], t=res["timeline_t"], utilization=res["utilization"], queue=res["queue"]
    )
    info = {k: res[k] for k in ("seed", "host", "pid", "node_id")} | {"finished_at": time.time()}
    write_atomic(tmp / "metrics.json", json.dumps({**res["metrics"], **info}, indent=2) + "\n")
    if "jobs" in res:
        write_atomic(tmp / "jobs.csv", res["jobs"])  # one row per job, as simulate --out writes it
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)


def finished(out: Path, spec: Mapping[str, Any]) -> bool:
    folder = out / TASKS_DIR / spec["id"]
    return (folder / "metrics.json").is_file() and (folder / "series.npz").is_file()


def load_task(out: Path, spec: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    folder = out / TASKS_DIR / spec["id"]
    metrics = json.loads((folder / "metrics.json").read_text())
    with np.load(folder / "series.npz") as z:
        series = {k: z[k] for k in z.files}
    return metrics, series
