"""`marlsched simulate`: replay one workload on one cluster under one or more schedulers."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from cluster_sim.out_folder import check_out_folder, folder_lock
from cluster_sim.protocol import check_fits
from cluster_sim.results import SimResult, write_atomic
from cluster_sim.sim_presets import restart_phrase
from cluster_sim.simulator import SimulationStalled, Simulator
from interference.cli import int_at_least

SUMMARY_COLUMNS = (
    ("avg_jct", "avg JCT (s)", "{:.0f}"),
    ("p50_jct", "p50 (s)", "{:.0f}"),
    ("p95_jct", "p95 (s)", "{:.0f}"),
    ("p99_jct", "p99 (s)", "{:.0f}"),
    ("avg_queue_delay", "waiting (s)", "{:.0f}"),
    ("preemptions_per_job", "preempt/job", "{:.2f}"),
    ("makespan", "makespan (s)", "{:.0f}"),
    ("gpu_utilization", "util", "{:.3f}"),
    ("mean_slowdown", "slowdown", "{:.3f}"),
    ("jobs_completed", "done", "{}"),
    ("wall_seconds", "wall (s)", "{:.1f}"),
)


def add_simulate_command(subparsers) -> None:
    from cluster_sim.policies import combination_syntax, policy_names
    from cluster_sim.sim_presets import SIM_PRESETS
    from cluster_sim.workload_spec import workload_syntax
    from topology import PRESETS

    p = subparsers.add_parser(
        "simulate",
        help="replay a workload on a cluster under heuristic or learned schedulers",
        description="Replay a workload on a simulated GPU cluster and report JCT, queueing and utilisation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"cluster presets: {', '.join(PRESETS)} (or a YAML file)\n"
            f"policies: {', '.join(policy_names())}, {combination_syntax()},\n"
            "          marl:POLICY_DIR[,key=value...] (a trained policy, any kind, e.g. marl:DIR,num_agents=8;\n"
            "          topdrl:, dl2:, metaplace: for one of that kind),\n"
            "          MODULE_OR_FILE.py:ClassName[,key=value...] (your own scheduler class),\n"
            "          MODULE_OR_FILE.py:function (your own scheduler as one function of the view)\n"
            "workloads (KIND:ARG[,OPTION=VALUE...]):\n"
            + "".join(f"  {syntax}\n" for syntax in workload_syntax().values())
            + "  every kind also takes ,max_jobs=N ,max_gpus=N ,arrival_scale=F ,load=F (a trace's window offers F x\n"
            "  the cluster's GPUs while it lasts; synthetic's load is its long-run rate, window_load=F the window\n"
            "  form) ,apps=DIR (jobs train Pollux's measured applications) and ,start= ,end= as seconds from the\n"
            "  trace's first arrival or as dates (start=2017-11-01,end=2017-11-03)\n"
            "presets (--preset NAME; a flag given beside it wins):\n"
            + "".join(f"  {name}: {preset.about}\n" for name, preset in SIM_PRESETS.items())
        ),
    )
    p.add_argument("--cluster", default="small", help="preset name or YAML file (default: small)")
    p.add_argument("--workload", default="synthetic:2000", help="workload spec (default: synthetic:2000)")
    p.add_argument(
        "--policy",
        default="fifo",
        action=MorePolicies,
        help="scheduler name; comma-separate several to compare them, or give --policy again (default: fifo)",
    )
    p.add_argument(
        "--seed",
        type=int_at_least(0, "a seed"),
        default=0,
        help="seed for the workload generator and randomised policies (default: 0)",
    )
    p.add_argument(
        "--preset",
        choices=list(SIM_PRESETS),
        default=None,
        help="a paper's simulator settings (interference, restart and start costs, Sia's per-application "
        "restart costs and calibration), as a run config's `preset:` sets them; the flags below override it",
    )
    p.add_argument(
        "--interference",
        default=None,
        help="none (default, or the preset's), oracle (ground truth), learned (a trained predictor), or a mode a "
        "plugin registered",
    )
    p.add_argument(
        "--interference-model",
        default=None,
        help="learned: the model file from `interference train`; oracle: gavel:PATH of Gavel's measured pairs "
        "(without it GPU sharing is parametric)",
    )
    p.add_argument(
        "--restart-cost", type=float, default=None, help="seconds a resumed job stalls (default 30; or the preset's)"
    )
    p.add_argument(
        "--start-cost",
        type=float,
        default=None,
        help="seconds a job stalls at its first start (default 0, or the preset's; Pollux's simulator charges 30)",
    )
    p.add_argument(
        "--app-restart-costs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each application's own restart cost on every allocation, Sia's (default off, or the preset's)",
    )
    p.add_argument(
        "--calibration",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Sia's per-application calibration slowdowns (default off, or the preset's)",
    )
    p.add_argument("--no-perf-model", action="store_true", help="every placement runs at ideal speed")
    p.add_argument(
        "--gpu-sharing",
        action="store_true",
        help="two single-GPU jobs may share a GPU (needs --interference); the pack-* schedulers use it",
    )
    p.add_argument("--out", default=None, help="results folder (metrics.json, jobs.csv per policy)")
    p.add_argument(
        "--plot",
        default=None,
        metavar="DIR",
        help="write the plots `marlsched run` writes into DIR (JCT CDF, queue and utilisation over time, average "
        "JCT, and, with several policies, each one's reduction against the first)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run_simulate)


def simulator_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings of :data:`~cluster_sim.sim_presets.PRESET_KEYS`: each flag given, else the preset's,
    else simulate's default."""
    from cluster_sim.sim_presets import PRESET_KEYS, SIMULATE_DEFAULTS, resolve_settings

    return resolve_settings(args.preset, {k: getattr(args, k) for k in PRESET_KEYS}, SIMULATE_DEFAULTS)


def simulator_from_args(args: argparse.Namespace) -> Simulator:
    """The simulator the arguments describe; warns (stderr) when a paper's workload runs without its settings and
    when ``load=`` squeezes a window into one burst."""
    from cluster_sim.build import build_simulator as build
    from cluster_sim.sim_presets import preset_warning
    from cluster_sim.traces.window import burst_warning

    settings = simulator_settings(args)
    warning = preset_warning(args.workload, settings)
    if warning:
        print(f"marlsched simulate: warning: {warning}", file=sys.stderr)
    sim = build(
        args.cluster,
        args.workload,
        seed=args.seed,
        interference_data=args.interference_model,
        perf_model=not args.no_perf_model,
        gpu_sharing=args.gpu_sharing,
        **settings,
    )
    warning = burst_warning(sim.jobs)
    if warning:
        print(f"marlsched simulate: warning: {warning}", file=sys.stderr)
    return sim


def make_scheduler_by_name(name: str, seed: int, **options):
    """A heuristic by name (``options`` to its constructor), a trained policy's folder (``marl:POLICY_DIR``, any
    kind; ``topdrl:``, ``dl2:``, ``metaplace:`` for a folder of that kind; all run without RLlib), or
    ``MODULE_OR_FILE:ClassName[,key=value...]`` for a scheduler class of the user's own."""
    from cluster_sim.scheduler_spec import is_custom_spec, load_custom_scheduler

    if is_custom_spec(name):
        return load_custom_scheduler(name, seed=seed, **options)
    from cluster_sim.policies import get_policy

    return get_policy(name, seed=seed, **options)


def run_simulate(args: argparse.Namespace) -> int:
    names = split_policies(args.policy)
    if not names:
        raise ValueError(f"--policy {args.policy!r} names no scheduler; e.g. --policy fifo,tiresias,qssf")
    if args.plot:  # before the simulations, not after them
        _check_plot_folder(Path(args.plot), Path(args.out) if args.out else None)
    sim = simulator_from_args(args)
    schedulers = [make_scheduler_by_name(n, args.seed) for n in names]
    _refuse_shared_names(names, [s.name for s in schedulers])
    for scheduler in schedulers:  # one that cannot run on this cluster is said before any simulation
        check_fits(scheduler, sim.topo)
    if not args.out:
        return _simulate(args, sim, schedulers)
    with folder_lock(args.out, "simulate"):
        _replace_earlier_results(Path(args.out))
        return _simulate(args, sim, schedulers)


SIMULATE_MANIFEST = "simulate.json"  # what a simulate wrote into its --out, so the next one can replace it


def _check_plot_folder(plot: Path, out: Path | None) -> None:
    """Refuse a ``--plot`` that cannot be a folder before anything runs. Outside ``--out`` it is created now;
    inside it (``--out R --plot R/plots``, as ``marlsched run`` lays its results out) only once ``--out`` has been
    checked and cleared of an earlier simulate's results, which it is then one of."""
    if out is None or not plot.resolve().is_relative_to(out.resolve()):
        check_out_folder(plot, "--plot")
        return
    for folder in (plot, *plot.parents):
        if folder.exists() and not folder.is_dir():
            raise ValueError(f"--plot {plot}: {folder} is a file; name a folder (a new one, or one simulate wrote)")


def _replace_earlier_results(out: Path) -> None:
    """Remove what an earlier ``simulate --out`` wrote here (its manifest lists it), so old and new results
    never mix; a folder holding anything else is refused rather than emptied."""
    manifest = out / SIMULATE_MANIFEST
    # an empty folder holds nothing to mix up (e.g. the --plot folder of a simulate that stopped before writing)
    entries = [p for p in out.iterdir() if p.name not in (".lock", SIMULATE_MANIFEST) and not _empty_folder(p)]
    if not manifest.is_file():
        if entries:
            names = ", ".join(sorted(p.name for p in entries)[:5])
            raise ValueError(f"--out {out} holds files that no simulate wrote ({names}); choose an empty folder")
        return
    written = set(json.loads(manifest.read_text()).get("written", []))
    stray = [p.name for p in entries if p.name not in written]
    if stray:
        raise ValueError(f"--out {out} holds files an earlier simulate did not write ({', '.join(sorted(stray)[:5])})")
    for p in entries:
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    print(f"replacing the results of an earlier simulate in {out}", file=sys.stderr)


def _simulate(args: argparse.Namespace, sim, schedulers: list) -> int:
    from topology.datacenter import CLUSTER_PRESETS, build_cluster

    if args.cluster not in CLUSTER_PRESETS:  # a file of the user's: how it was read, links in GB/s
        print(build_cluster(args.cluster).describe())
    results: list[SimResult] = []
    settings = simulator_settings(args)  # the title says them: `marlsched run`'s defaults differ (interference)
    title = f"jobs of a {sim.jobs.source}: workload on {sim.topo.name}, interference {settings['interference']}"
    title += ", GPU sharing" if args.gpu_sharing else ""
    title = (
        f"{title}, {restart_phrase(settings['restart_cost'], settings['app_restart_costs'], settings['start_cost'])}"
    )
    stalled: list[str] = []
    try:
        for sched in schedulers:
            try:
                result = sim.run(sched, progress=not args.quiet)
            except SimulationStalled as err:  # this scheduler's failure on this workload: the others still run
                print(f"marlsched simulate: {sched.name}: {err}; left out of the results", file=sys.stderr)
                stalled.append(sched.name)
                continue
            results.append(result)
            if args.out:
                out = Path(args.out) if len(schedulers) == 1 else Path(args.out) / _safe(sched.name)
                result.write(out)
    except BaseException as err:
        if results:  # what finished is shown, and kept where a rerun into the same --out replaces it
            print(summary_table([r.metrics() for r in results], title=f"{title} (stopped at {sched.name})"))
            if args.out:  # with which scheduler stopped it, why, and those that never ran
                later = [s.name for s in schedulers[schedulers.index(sched) + 1 :]]
                why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
                _write_manifest(args, stopped={"at": sched.name, "error": why, "not_run": later})
        raise
    if not results:
        return 1
    print(summary_table([r.metrics() for r in results], title=title))
    if args.plot:
        write_simulate_plots(check_out_folder(args.plot, "--plot"), args, results)
    if args.out and len(schedulers) > 1:
        write_atomic(Path(args.out) / "summary.json", json.dumps([r.metrics() for r in results], indent=2) + "\n")
    if args.out:
        _write_manifest(args)
    unfinished = [r.scheduler for r in results if r.metrics()["jobs_completed"] != len(sim.jobs)]
    if unfinished:
        print(f"warning: unfinished jobs under {', '.join(unfinished)}", file=sys.stderr)
    if stalled:
        print(f"stalled, left out: {', '.join(stalled)}", file=sys.stderr)
    return 1 if unfinished or stalled else 0


def _empty_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def _write_manifest(args: argparse.Namespace, stopped: dict | None = None) -> None:
    """``--out``'s record of what this simulate wrote (a later one replaces exactly that) and its provenance;
    ``stopped``: the scheduler whose run ended the command early, its error and the schedulers left unrun."""
    from experiments.provenance import result_provenance

    names = [p.name for p in Path(args.out).iterdir() if p.name not in (".lock", SIMULATE_MANIFEST)]
    command = shlex.join(["marlsched", *getattr(args, "argv", ["simulate", "..."])])
    doc = {
        "written": sorted(names),
        **({"stopped": stopped} if stopped else {}),
        "provenance": result_provenance(
            command, split_policies(args.policy), args.plugin, [args.workload], [args.interference_model or ""]
        ),
    }
    write_atomic(Path(args.out) / SIMULATE_MANIFEST, json.dumps(doc, indent=1) + "\n")


def write_simulate_plots(folder: Path, args: argparse.Namespace, results: list[SimResult]) -> None:
    """The plots of ``marlsched run`` for this one workload and seed (experiments.plots.write_plots), the
    first policy as the paired plot's baseline."""
    from experiments.plots import plot_results, workload_title

    figures = plot_results(folder, results, workload_name=workload_title(args.workload), seed=int(args.seed))
    print(f"plots: {', '.join(str(folder / f) for f in figures)}")


def _refuse_shared_names(given: list[str], names: list[str]) -> None:
    """Two schedulers of one name would write one results folder and one row of the table: refused, naming both."""
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            j = first[name]
            raise ValueError(
                f"--policy: {given[j]!r} and {given[i]!r} are both named {name!r}, so their results would share one "
                f"folder and one row; name one apart (FILE:Class,...,name=OTHER or marl:DIR,name=OTHER), or drop one"
            )
        first[name] = i


class MorePolicies(argparse.Action):
    """``--policy`` given again adds its schedulers to those given before (``--policy a --policy b`` is
    ``--policy a,b``) instead of silently replacing them."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        given = f"_{self.dest}_given"  # the first --policy replaces the default, each later one adds
        more = f"{getattr(namespace, self.dest)},{values}" if hasattr(namespace, given) else values
        setattr(namespace, self.dest, more)
        setattr(namespace, given, True)


def split_policies(text: str) -> list[str]:
    """Comma-separated scheduler names; ``key=value`` items after a name are its options (``mine.py:Mine,k=2,fifo``
    and ``qssf,name=mine,fifo`` are two schedulers each)."""
    names: list[str] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if names and "=" in item:
            names[-1] += "," + item
        else:
            names.append(item)
    return names


def summary_table(rows: list[dict], title: str = "") -> str:
    """A fixed-width table of the headline metrics, one row per scheduler."""
    header = ["policy"] + [label for _, label, _ in SUMMARY_COLUMNS]
    body = [[str(r["scheduler"])] + [fmt.format(r[key]) for key, _, fmt in SUMMARY_COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    lines = [title] if title else []
    for row in [header, *body]:
        cells = (c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        lines.append("  ".join(cells))
    if any(r["mean_slowdown"] < 1 for r in rows):  # reads as a bug unless said: the reference is the trace's type
        lines.append(
            "slowdown: JCT over the job's run time in the workload, on the type its times are given for (V100 for "
            "Philly-like traces, T4 for Pollux's and Sia's workloads); below 1 where jobs ran on a faster type or an "
            "elastic scheduler gave them more GPUs"
        )
    return "\n".join(lines)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
