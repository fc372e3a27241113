"""`marlsched run CONFIG`: one experiment from one YAML file, on in-process Ray or an existing Ray cluster.

Steps: copy the config into the results folder; train the priority agents where the config asks (via
:mod:`marl.training.priority_train`; a killed training starts again); evaluate every scheduler on every seed as
one Ray task each;
measure agent-count scaling where the config asks; write ``metrics.csv``, ``report.md`` and the plots.

Resuming: every finished evaluation task leaves ``tasks/<scheduler>__seed<N>/`` (written to a temporary
folder and renamed, so a folder that exists is complete); a rerun with the same ``--out`` skips those and
runs only the rest. ``state.json`` records, per invocation, how many tasks ran and how many were reused.

Ray tasks receive absolute paths (workers may run in another directory or on another node; a multi-node
cluster needs the traces and the results folder at the same paths on every node, or a shared disk). The
task returns its results to the driver, which writes them, so workers need no access to ``--out``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cluster_sim.out_folder import LOCK_FILE, folder_lock
from cluster_sim.results import write_atomic
from cluster_sim.simulator import SimulationStalled
from cluster_sim.workload_spec import WorkloadSpecError
from experiments.provenance import result_provenance
from experiments.run_config import (
    MARL,
    MARL_WARM_START,
    ExperimentConfig,
    PriorityTrainSection,
    TrainSection,
    absolute_spec,
    load_experiment_config,
    workload_error,
)
from experiments.tasks import (
    CONFIG_FILE,
    STATE_FILE,
    TASKS_DIR,
    TRAIN_DIR,
    evaluate,
    finished,
    task_id,
    write_task,
)
from marl.deploy.local_ray import init_ray as start_or_connect

Log = Callable[[str], None]


def add_run_command(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="run an experiment from a YAML config: train, compare schedulers over seeds on Ray, report, plot",
        description=(
            "Run one experiment (see experiments/configs/quickstart.yaml): train the MARL policy where the config "
            "asks, evaluate every scheduler over several seeds as parallel Ray tasks, and write config.yaml, "
            "metrics.csv, report.md and PNG plots into --out. Rerun with the same --out to resume a killed run."
        ),
    )
    p.add_argument("config", help="experiment config YAML")
    p.add_argument("--out", default=None, help="results folder (default: results/<config name>)")
    p.add_argument(
        "--address",
        default=None,
        help="Ray cluster address, e.g. 127.0.0.1:6379 or 'auto' (default: ray.address of the config, then "
        "RAY_ADDRESS as set by `ray job submit`, else Ray starts in-process)",
    )
    p.add_argument(
        "--workload",
        action="append",
        default=None,
        metavar="LABEL",
        help="run only this workload of the config's `workloads:` (repeatable; default results folder "
        "results/<config name>-<labels>)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        dest="sets",
        metavar="KEY=VALUE",
        help="replace one setting of the config, checked as the file's are (a dotted key, a YAML value; "
        "repeatable): --set seeds=[0], --set train.ppo.iterations=2; the results folder keeps the config it ran",
    )
    p.add_argument("--quiet", action="store_true", help="no per-task progress lines (the results table still prints)")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    cfg = load_experiment_config(args.config, workloads=args.workload, sets=args.sets)
    warn_unpublished_settings(cfg)
    name = cfg.name + "".join(f"-{w}" for w in args.workload or [])
    out = Path(args.out) if args.out else Path("results") / name
    log: Log = (lambda msg: None) if args.quiet else (lambda msg: print(msg, flush=True))
    command = shlex.join(["marlsched", *getattr(args, "argv", ["run", str(args.config)])])  # as given
    summary = run_experiment(cfg, out, address=args.address, log=log, command=command)
    print(f"results: {out}/report.md ({summary['tasks_run']} runs done now, {summary['tasks_reused']} reused)")
    return 0


def warn_unpublished_settings(cfg: ExperimentConfig) -> None:
    """On stderr (even with --quiet): each paper's workload the config runs with other settings than its
    paper's, and the ``preset:`` that sets them."""
    from cluster_sim.sim_presets import PRESET_KEYS, preset_warning

    settings = {k: getattr(cfg, k) for k in PRESET_KEYS}
    for label, spec in cfg.workload_specs.items():
        warning = preset_warning(spec, settings)
        if warning:
            print(f"marlsched run: warning: {cfg.source}: {label or 'workload'}: {warning}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------- Ray


def ray_address(cfg: ExperimentConfig, address: str | None) -> str | None:
    """--address, else the config's, else RAY_ADDRESS (set inside `ray job submit`); None: in-process."""
    return address or cfg.ray.address or os.environ.get("RAY_ADDRESS") or None


def init_ray(cfg: ExperimentConfig, address: str | None, log: Log) -> bool:
    """Connect to a cluster or start Ray in-process; returns whether this call started (and must stop) it."""
    return start_or_connect(ray_address(cfg, address), cfg.ray.num_cpus, cfg.ray.object_store_mb * 1024**2, log)


# ---------------------------------------------------------------------------------------------- tasks


def task_specs(cfg: ExperimentConfig, out: Path) -> list[dict[str, Any]]:
    """One self-contained spec (absolute paths) per scheduler x workload x seed."""
    from cluster_sim.plugins import absolute_target
    from cluster_sim.policy_folders import split_folder_name
    from cluster_sim.scheduler_spec import absolute_custom_spec, is_custom_spec

    cluster = cfg.cluster
    if isinstance(cluster, str) and Path(cluster).is_file():
        cluster = os.path.abspath(cluster)
    specs = []
    for name in cfg.schedulers:
        if name in (MARL, MARL_WARM_START):
            from marl.training.priority_train import WARM_START_DIR

            folder = "policy" if name == MARL else WARM_START_DIR
            policy = f"marl:{(out / TRAIN_DIR / folder).resolve()}"
        elif split_folder_name(name):
            prefix, folder = split_folder_name(name)
            policy = f"{prefix}:{os.path.abspath(folder)}"
        elif is_custom_spec(name):
            policy = absolute_custom_spec(name)
        else:
            policy = name
        policy_name, options = cfg.policy_of(name)
        if options or policy_name != name:
            policy = policy_name
        for (label, workload), seed in itertools.product(cfg.workload_specs.items(), cfg.seeds):
            specs.append({
                "id": task_id(name, seed, label),
                "scheduler": name,
                "policy": policy,
                "options": options,
                "seed": int(seed),
                "cluster": cluster,
                "workload_label": label,
                "workload": absolute_spec(workload),
                "interference": cfg.interference,
                "interference_data": absolute_spec(cfg.interference_data) if cfg.interference_data else None,
                "restart_cost": cfg.restart_cost,
                "start_cost": cfg.start_cost,
                "app_restart_costs": cfg.app_restart_costs,
                "calibration": cfg.calibration,
                "perf_model": cfg.perf_model,
                "timeline_points": cfg.timeline_points,
                "plugins": [absolute_target(t) for t in cfg.plugins],
                "cwd": os.getcwd(),  # where dotted plugin modules are found
            })  # fmt: skip
    return specs


def run_tasks(cfg: ExperimentConfig, out: Path, specs: list[dict[str, Any]], log: Log) -> int:
    """Run the unfinished specs as Ray tasks, writing each as it completes; returns how many ran."""
    import ray

    from experiments.report import warning_key

    todo = [s for s in specs if not finished(out, s)]
    for stale in (out / TASKS_DIR).glob(".*.tmp"):  # a run killed while writing
        shutil.rmtree(stale, ignore_errors=True)
    log(f"evaluation: {len(specs)} runs ({len(specs) - len(todo)} finished before, {len(todo)} to run)")
    if not todo:
        return 0
    remote = ray.remote(evaluate)
    slots = node_slots()
    pending = {
        remote.options(
            num_cpus=cfg.ray.task_cpus, max_retries=1, scheduling_strategy=_on_node(slots[i % len(slots)])
        ).remote(s): s
        for i, s in enumerate(todo)
    }
    t0 = time.perf_counter()
    done, first = 0, 0.0
    warned: set[str] = set()
    stalled: list[dict[str, Any]] = []  # scheduler, workload, seed, reason: kept in state.json and the report
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            spec = pending.pop(ready[0])
            try:
                res = ray.get(ready[0])
            except Exception as err:  # a workload that only its run can refuse: named at its key and line
                if isinstance(getattr(err, "cause", None), WorkloadSpecError):
                    raise workload_error(cfg, spec["workload_label"], err.cause) from None
                if isinstance(getattr(err, "cause", None), SimulationStalled):  # this run's: the others go on
                    stalled.append({"scheduler": spec["scheduler"], "workload": spec["workload_label"],
                                    "seed": spec["seed"], "reason": str(err.cause)})  # fmt: skip
                    print(f"marlsched run: {_run_name(spec)}: {err.cause}", file=sys.stderr)
                    continue
                raise
            write_task(out, spec, res)
            done += 1
            m = res["metrics"]
            for text in m.get("warnings", []):  # a task's worker prints nothing the user sees: said here, once
                if warning_key(text) not in warned:  # the same warning on another workload: said once
                    warned.add(warning_key(text))
                    on = f"{spec['workload_label']}: " if spec.get("workload_label") else ""
                    print(f"marlsched run: warning: {on}{text}", file=sys.stderr)
            elapsed = time.perf_counter() - t0
            if done == 1:  # the first run holds the workers' start: the rate is measured from its end
                first, eta = elapsed, "ETA from the next run"
            else:
                eta = f"ETA {(elapsed - first) / (done - 1) * (len(todo) - done):.0f} s"
            log(
                f"[{done}/{len(todo)}] {_run_name(spec)}: avg JCT {m['avg_jct']:.0f} s, "
                f"{m['jobs_completed']}/{m['jobs_total']} jobs, {m['wall_seconds']:.1f} s "
                f"({m['task_cpu_seconds']:.1f} s CPU) on host {res['host']}, worker pid {res['pid']}"
                f"  (elapsed {elapsed:.0f} s, {eta})"
            )
    finally:
        # stopped early (an error, Ctrl-C in a notebook) on a Ray that outlives the run: its unfinished tasks
        # would go on computing what nobody collects; a rerun redoes them
        for ref in pending:
            ray.cancel(ref)
    if stalled:  # the report compares every scheduler on the same runs: it waits for a config without them
        names = sorted({s["scheduler"] for s in stalled})
        raise RunsStalled(
            f"{len(stalled)} of {len(todo)} runs stalled ({', '.join(names)}; each said above); the other {done} are "
            f"written in {out / TASKS_DIR} and a rerun into the same --out reuses them. Take the stalled scheduler "
            "out of `schedulers:` (or fix it) and rerun for the report",
            stalled,
        )
    return done


class RunsStalled(SimulationStalled):
    """Runs of a ``marlsched run`` whose scheduler stalled: ``runs`` holds each one's scheduler, workload, seed and
    reason (the folder's state.json keeps them, and the report of the config without them lists them)."""

    def __init__(self, message: str, runs: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.runs = runs


def _run_name(spec: dict[str, Any]) -> str:
    """One run as the progress lines name it: scheduler, workload where the config has several, seed."""
    on = f" on {spec['workload_label']}" if spec["workload_label"] else ""
    return f"{spec['scheduler']}{on} seed {spec['seed']}"


def node_slots() -> list[str]:
    """Alive nodes with CPUs, each listed once per CPU and interleaved (a, b, a, b, a for 3 + 2 CPUs).

    Tasks go to these nodes in turn. Ray's SPREAD strategy is best-effort: just after connecting, the
    driver's node may not yet see the other nodes' resources and keeps short tasks to itself.
    """
    import ray

    nodes = [(n["NodeID"], int(n.get("Resources", {}).get("CPU", 0))) for n in ray.nodes() if n.get("Alive")]
    nodes = [(node, cpus) for node, cpus in nodes if cpus > 0]
    most = max((cpus for _, cpus in nodes), default=0)
    return [node for c in range(most) for node, cpus in nodes if cpus > c] or [""]


def _on_node(node_id: str) -> Any:
    """Prefer ``node_id``; run elsewhere if that node is gone (soft affinity)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=True) if node_id else "DEFAULT"


# ---------------------------------------------------------------------------------------------- run


# what may change between invocations into one folder: more (or fewer) seeds, schedulers and agent counts reuse
# what every other setting measured, since a task is one scheduler x workload x seed and a scaling row one count
EXTENDABLE = frozenset({"seeds", "schedulers", "baselines", "scaling.agents"})


def _prepare_out(cfg: ExperimentConfig, out: Path) -> dict[str, Any]:
    """Create ``out`` with the config copy, or check that it holds this same experiment (resume), or this one
    with other seeds, schedulers or agent counts (:data:`EXTENDABLE`: what was measured is reused), or nothing
    measured yet (a start that failed before any result: the corrected config takes its place)."""
    out.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    path = out / CONFIG_FILE
    foreign = sorted(entry.name for entry in out.iterdir() if entry.name not in (CONFIG_FILE, STATE_FILE, LOCK_FILE))
    if foreign and not path.is_file():
        raise ValueError(
            f"--out {out} holds files that no run wrote ({', '.join(foreign[:5])}); choose an empty folder, or the "
            "folder of this experiment to resume it"
        )
    if path.is_file() and (changed := _changed_keys(yaml.safe_load(path.read_text()), yaml.safe_load(text))):
        measured = any(entry.name not in (CONFIG_FILE, STATE_FILE, LOCK_FILE) for entry in out.iterdir())
        if measured and not set(changed) <= EXTENDABLE:
            raise ValueError(
                f"{out} holds another experiment: its {CONFIG_FILE} differs from {cfg.source} in "
                f"{', '.join(changed)}; only {', '.join(sorted(EXTENDABLE))} may change between runs into one "
                f"folder (what was measured is reused); use another --out, or delete {out}"
            )
    write_atomic(path, text)
    state_path = out / STATE_FILE
    return json.loads(state_path.read_text()) if state_path.is_file() else {"invocations": []}


def _changed_keys(old: Any, new: Any, at: str = "") -> list[str]:
    """The dotted keys whose values differ between two configs (a whole list counts as one value)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [k for key in dict.fromkeys([*old, *new])
                for k in _changed_keys(old.get(key), new.get(key), f"{at}.{key}" if at else str(key))]  # fmt: skip
    return [] if old == new else [at or "<the whole config>"]


def train_if_asked(cfg: ExperimentConfig, out: Path, log: Log) -> dict[str, Any] | None:
    """Train the policy the ``marl`` scheduler evaluates; skipped once done (a killed training resumes from
    its last checkpoint, ``train/checkpoint``)."""
    if cfg.train_config is None or MARL not in cfg.schedulers:
        return None
    run_dir = out / TRAIN_DIR
    done_marker = run_dir / "done.json"
    if done_marker.is_file() and (run_dir / "policy" / "metadata.json").is_file():
        log(f"training: finished before ({run_dir})")
        return json.loads(done_marker.read_text())
    if isinstance(cfg.train_config, PriorityTrainSection):
        return _train_priority(cfg, cfg.train_config, run_dir, log)
    return _train_recipe(cfg, cfg.train_config, run_dir, log)


def _train_recipe(cfg: ExperimentConfig, section: TrainSection, run_dir: Path, log: Log) -> dict[str, Any]:
    """Any other agent or algorithm, trained in this process as `marlsched train` would (the policy in
    ``run_dir/policy``), and its done marker; a killed training starts again."""
    from marl.agents import AGENTS
    from marl.training.recipes import POLICY, TrainRequest, run_recipe

    spec = AGENTS[section.agent]
    algorithm = spec.algorithm(section.algo)
    shutil.rmtree(run_dir / POLICY, ignore_errors=True)  # a killed run's half is not resumed
    log(f"training: starting {section.name} ({spec.about}) in {run_dir}")
    t0 = time.perf_counter()
    request = TrainRequest(config=Path(cfg.source), out=run_dir, evaluate=False, command=f"marlsched run {cfg.source}",
                           log=log)  # fmt: skip
    run_dir.mkdir(parents=True, exist_ok=True)
    run_recipe(spec, algorithm, section.settings, request)
    info = {"agent": spec.name, "algo": algorithm.name, "train_s": time.perf_counter() - t0}
    write_atomic(run_dir / "done.json", json.dumps(info, indent=2) + "\n")
    return info


def _train_priority(cfg: ExperimentConfig, section: PriorityTrainSection, run_dir: Path, log: Log) -> dict[str, Any]:
    """The priority agents' PPO into ``run_dir`` (files made absolute), and its done marker."""
    from marl.training.priority_train import train_priority

    conf = dict(section.config)
    env = dict(conf["env"])  # absolute files: Ray's env runners may start in another directory
    for key in ("trace", "interference_data", "workload"):
        if env.get(key):
            env[key] = absolute_spec(env[key])
    conf["env"] = env
    log(f"training: starting {section.name} (priority agents, PPO) in {run_dir}")
    summary = train_priority(conf, run_dir, log=log, command=f"marlsched run {cfg.source}", resume=True)
    # train_s: the whole training's, a killed run's time up to its checkpoint included
    info = {"iterations": summary["iterations"], "train_s": 60.0 * summary["minutes"],
            "resumed_after": summary["resumed_after"]}  # fmt: skip
    if summary.get("selected"):  # which iterate the select stage shipped (the warm start where none beat it)
        info["selected"] = summary["selected"]["chosen"]
    write_atomic(run_dir / "done.json", json.dumps(info, indent=2) + "\n")
    return info


def check_workloads(cfg: ExperimentConfig) -> None:
    """Build each workload once per seed before anything runs or is written: what only building it reads (a trace
    file's rows, a plugin kind's own file, whether a window offers its load) is refused at the config's key and
    line before the first run, not after the runs of the workloads listed before it."""
    from cluster_sim.build import build_cluster
    from cluster_sim.workload_spec import parse_workload_spec

    gpus = build_cluster(cfg.cluster).view.num_gpus
    for label, spec in cfg.workload_specs.items():
        for seed in cfg.seeds:
            try:
                parse_workload_spec(spec, cluster_gpus=gpus, seed=seed)
            except (ValueError, FileNotFoundError) as err:  # a spec's, a trace file's row, a plugin loader's
                raise workload_error(cfg, label, err) from None


def run_experiment(
    cfg: ExperimentConfig, out: str | Path, *, address: str | None = None, log: Log = print, command: str | None = None
) -> dict:
    """The whole experiment into ``out`` (resuming what a previous invocation finished), holding the folder
    against a second command writing it at the same time. ``command``: the command line, for the provenance
    (default: ``marlsched run CONFIG``)."""
    out = Path(out)
    check_workloads(cfg)
    with folder_lock(out, "run", scratch=(CONFIG_FILE, STATE_FILE)):
        return _run_experiment(cfg, out, address=address, log=log, command=command or f"marlsched run {cfg.source}")


def _run_experiment(cfg: ExperimentConfig, out: Path, *, address: str | None, log: Log, command: str) -> dict:
    import ray

    from experiments.report import write_report

    state = _prepare_out(cfg, out)
    t0 = time.perf_counter()
    started = init_ray(cfg, address, log)
    try:
        train_info = train_if_asked(cfg, out, log)
        specs = task_specs(cfg, out)
        before = sum(finished(out, s) for s in specs)
        try:
            ran = run_tasks(cfg, out, specs, log)
        except RunsStalled as err:  # kept, so that the report of the config without them can say so
            state["invocations"].append({"started_at": time.time() - (time.perf_counter() - t0),
                                         "wall_s": time.perf_counter() - t0, "stalled": err.runs})  # fmt: skip
            write_atomic(out / STATE_FILE, json.dumps(state, indent=2) + "\n")
            raise
        except KeyboardInterrupt:  # what it finished is kept: say so, so that the folder's history has it
            state["invocations"].append({
                "started_at": time.time() - (time.perf_counter() - t0), "wall_s": time.perf_counter() - t0,
                "interrupted": True, "tasks_run": sum(finished(out, s) for s in specs) - before,
            })  # fmt: skip
            write_atomic(out / STATE_FILE, json.dumps(state, indent=2) + "\n")
            raise
        scaling = None
        if cfg.scaling_config is not None:
            from experiments.scaling import run_scaling

            scaling = run_scaling(cfg, out, log)
        cluster_info = {"nodes": sum(1 for n in ray.nodes() if n.get("Alive")), **ray.cluster_resources()}
        at = ray_address(cfg, address)
        at = ray.get_runtime_context().gcs_address if at == "auto" else at  # the cluster auto found, by its address
    finally:
        if started:
            ray.shutdown()
    state["invocations"].append({
        "started_at": time.time() - (time.perf_counter() - t0),
        "wall_s": time.perf_counter() - t0,
        "tasks_run": ran,
        "tasks_reused": len(specs) - ran,
        "ray": {"address": at, "nodes": cluster_info["nodes"], "CPU": cluster_info.get("CPU")},
        "provenance": result_provenance(
            command, [cfg.policy_of(label)[0] for label in cfg.schedulers], cfg.plugins, cfg.workload_specs.values(),
            [cfg.interference_data or "", *(str(v) for n in cfg.schedulers for v in cfg.policy_of(n)[1].values())],
        ),
    })  # fmt: skip
    write_atomic(out / STATE_FILE, json.dumps(state, indent=2) + "\n")
    # the results table prints even with --quiet, as simulate's does: it is the command's answer
    tried = [r for inv in state["invocations"] for r in inv.get("stalled", [])]
    stalled = [r for r in tried if r["scheduler"] not in cfg.schedulers]
    write_report(cfg, out, specs, train_info=train_info, scaling=scaling, stalled=stalled,
                 log=lambda msg: print(msg, flush=True))  # fmt: skip
    log(f"done in {time.perf_counter() - t0:.0f} s")
    return {"out": str(out), "tasks_run": ran, "tasks_reused": len(specs) - ran}
