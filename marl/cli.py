"""`marlsched train` (every learned scheduler; `train-priority` is the same), `tune-priority`, `export-program`,
`upgrade-policy` and `record-rounds`; experiments.cli registers them (:func:`add_train_commands`).

Heavy modules (torch, ray) load inside the commands so that `marlsched --help` starts fast.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import textwrap
from functools import partial
from pathlib import Path

__all__ = ["add_train_commands", "main", "run_export_program", "run_train", "run_tune_priority"]


def add_train_commands(subparsers) -> None:
    """Register ``train``, ``train-priority``, ``tune-priority``, ``export-program``, ``upgrade-policy`` and
    ``record-rounds`` on an argparse subparsers
    object (each sets ``func``)."""
    from marl.training.recipes import recipes_table

    for command, about in (
        ("train", "train a learned scheduler (an agent and an algorithm, named in the config) and export it"),
        ("train-priority", "the same as `marlsched train` (kept for older scripts; configs without agent: train "
         "the priority agents with PPO)"),
    ):  # fmt: skip
        intro = (
            "Train the learned scheduler a YAML config names: `agent:` (default priority, marlsched's per-partition "
            "agents) and `algo:` (default: the agent's first below); the rest of the file is that algorithm's "
            "settings, each key checked with its line. Writes the trained policy to OUT/policy (usable as "
            "`simulate --policy marl:OUT/policy`) with its progress and learning curve."
        )
        if command == "train-priority":
            intro = "The same command as `marlsched train`, kept for older scripts. " + intro
        p = subparsers.add_parser(
            command,
            help=about,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            description=(
                textwrap.fill(intro, 100, break_on_hyphens=False) + "\n\nagent / algo:\n" + recipes_table() + "\n\n"
                + textwrap.fill(
                    "An agent of your own is one more spec (in marl/agents/, or a package's marlsched.agents entry "
                    "point): see docs/extending.md.", 100,
                )
            ),
        )  # fmt: skip
        p.add_argument("--config", required=True, help="training config YAML (agent:, algo: and their settings)")
        p.add_argument("--out", required=True, help="run folder to create (OUT/policy is the trained policy)")
        p.add_argument("--iterations", type=int, default=None, help="iterations or rounds (overrides the config)")
        p.add_argument(
            "--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
            help="replace one setting of the config, checked as the file's are (a dotted key, a YAML value; "
            "repeatable): --set dagger_rounds=0, --set ppo.lr=1e-3",
        )  # fmt: skip
        p.add_argument(
            "--address",
            default=None,
            help="Ray cluster to train on (auto, HOST:PORT; default: the config's ray.address, then RAY_ADDRESS, "
            "else Ray in-process); algo ppo",
        )
        p.add_argument("--resume", action="store_true", help="continue a killed training in --out (algo ppo or appo)")
        p.add_argument(
            "--no-eval", action="store_true",
            help="skip what runs after training, for a quick try: the final evaluation against the heuristics and "
            "(ppo, appo) the config's select and tune stages",
        )  # fmt: skip
        p.add_argument("--quiet", action="store_true", help="no per-iteration lines")
        p.set_defaults(func=run_train)

    u = subparsers.add_parser(
        "tune-priority",
        help="select a priority policy's preemption margin on the training period and write it into its metadata",
        description=(
            "Replay fixed windows of the config's training period (never the held-out weeks) with the policy "
            "at each hysteresis factor e (a waiting job must promise e times less remaining time to preempt) "
            "and write the factor with the lowest paired average JCT into POLICY/metadata.json."
        ),
    )
    u.add_argument("--policy", required=True, help="priority policy folder (e.g. OUT/policy of marlsched train)")
    u.add_argument("--config", required=True, help="the training config: its env gives cluster, trace and period")
    # defaults: the config's tune section, else 2 4 8 16 31 on 7-day windows 3.5 days apart at load 0.9
    own = "the config's tune section, else"
    u.add_argument("--factors", type=float, nargs="+", default=None, help=f"candidates (default: {own} 2 4 8 16 31)")
    u.add_argument("--days", type=float, default=None, help=f"window length in days (default: {own} 7)")
    u.add_argument("--stride", type=float, default=None, help=f"days between window starts (default: {own} 3.5)")
    u.add_argument("--load", type=float, default=None, help=f"offered load of every window (default: {own} 0.9)")
    u.add_argument("--workers", type=int, default=None, help="parallel simulations (default: one per CPU)")
    u.set_defaults(func=run_tune_priority)

    e = subparsers.add_parser(
        "export-program",
        help="add the torch.export program (policy.pt2) to policy folders that carry only TorchScript",
        description=(
            "Write policy.pt2, the folder's network as a torch.export program, beside its TorchScript policy.pt "
            "(deprecated in recent torch); the loaders read it where TorchScript is missing or unreadable. "
            "Folders written by this version already carry it. Kinds: priority, rounds, sia-remaining, dl2, topdrl."
        ),
    )
    e.add_argument("folders", nargs="+", help="policy folders (e.g. experiments/policies/philly-small)")
    e.add_argument(
        "--force", action="store_true",
        help="write the program again where a folder has one (with this torch, where another release wrote it)",
    )  # fmt: skip
    e.set_defaults(func=run_export_program)

    g = subparsers.add_parser(
        "upgrade-policy",
        help="bring policy folders written by an older marlsched to the current folder schema, in place",
        description=(
            "Give each folder what the current schema has and it lacks: format_version and provenance in "
            "metadata.json (the command and config the folder recorded, its torch version; its code version was "
            "never recorded and is marked so) and the torch.export program (policy.pt2) beside TorchScript alone. "
            "Weights are untouched and every file is replaced atomically; a current folder is left as it is."
        ),
    )
    g.add_argument("folders", nargs="+", help="policy folders (e.g. experiments/policies/philly-small)")
    g.set_defaults(func=run_upgrade_policy)

    r = subparsers.add_parser(
        "record-rounds",
        help="write a priority policy's network inputs, scores and decisions of some rounds to an .npz",
        description=(
            "Run a priority policy on a cluster and workload and write, for ROUNDS rounds in which its agents had a "
            "choice, the arrays its network was given (in its argument order, with every column's name), its scores "
            "and the jobs marlsched preempted and started: the reference for a scheduler that calls the exported "
            "network itself (experiments/examples/exported_policy.py checks one against it with torch alone)."
        ),
    )
    r.add_argument("folder", help="priority policy folder (e.g. experiments/policies/default-small)")
    r.add_argument("--cluster", default="small", help="preset name or YAML file (default: small)")
    r.add_argument("--workload", default="synthetic:1000,window_load=1.2", help="workload spec (default: %(default)s)")
    r.add_argument("--rounds", type=int, default=50, help="rounds to write (default: 50)")
    r.add_argument("--skip", type=int, default=0, help="rounds with a choice to pass first (default: 0)")
    r.add_argument("--seed", type=int, default=0, help="simulation seed (default: 0)")
    r.add_argument("--out", required=True, help="the .npz to write")
    r.set_defaults(func=run_record_rounds)


def run_train(args: argparse.Namespace) -> int:
    """``marlsched train --config``: the agent and algorithm the config names (:mod:`marl.training.recipes`)."""
    from marl.training.recipes import POLICY, TrainRequest, train

    command = f"marlsched train --config {args.config} --out {args.out}"
    if args.iterations is not None:
        command += f" --iterations {args.iterations}"
    command += "".join(f" --set {shlex.quote(text)}" for text in args.sets)
    if args.no_eval:
        command += " --no-eval"
    request = TrainRequest(
        config=Path(args.config), out=Path(args.out), iterations=args.iterations, address=args.address,
        resume=args.resume, evaluate=False if args.no_eval else None, sets=tuple(args.sets), command=command,
        log=(lambda msg: None) if args.quiet else partial(print, flush=True),
    )  # fmt: skip
    train(request)
    print(f"policy: {Path(args.out) / POLICY} (run it with: {simulate_hint(Path(args.out) / POLICY)})")
    return 0


def simulate_hint(folder: Path) -> str:
    """The ``simulate`` command that runs a trained policy on the cluster it was trained on, on its training trace
    after the spans that trained and selected it (Philly's: the report period) where the folder records them."""
    from marl.deploy.registry import read_metadata, trained_cluster, trained_on

    meta = read_metadata(folder)[1]
    cluster = trained_cluster(meta)
    workload = _held_out_workload(meta)
    trained = trained_on(meta)
    interference = ""
    if trained is not None and trained.interference not in (None, "none"):  # simulated as it was trained
        interference = f" --interference {trained.interference}"
        if trained.interference_data:
            interference += f" --interference-model {shlex.quote(trained.interference_data)}"
    costs = ""  # the stalls it trained with, where they are not simulate's defaults (30 s restart, no start cost)
    env = _recorded_env(meta)[1]
    for key, default in (("restart_cost", 30.0), ("start_cost", 0.0)):
        value = env.get(key)
        if isinstance(value, int | float) and float(value) != default:
            costs += f" --{key.replace('_', '-')} {float(value):g}"
    return (
        f"marlsched simulate{f' --cluster {shlex.quote(cluster)}' if cluster else ''}"
        f"{f' --workload {shlex.quote(workload)}' if workload else ''}{interference}{costs} --policy marl:{folder}"
    )


def _recorded_env(meta: dict) -> tuple[dict, dict]:
    """The config a folder records and its ``env`` section (the config itself where it has none)."""
    trained = meta.get("trained") or {}
    config = trained.get("config") or meta.get("config") or (meta.get("provenance") or {}).get("config") or {}
    env = config.get("env", config) if isinstance(config, dict) else {}
    return (config if isinstance(config, dict) else {}), (env if isinstance(env, dict) else {})


def _held_out_workload(meta: dict) -> str | None:
    """A window of the recorded training trace that neither trained nor selected the policy, at the load it
    trained at (0.9 where it records none), or None."""
    from cluster_sim.traces.periods import PERIODS, on_philly_calendar, trace_date

    config, env = _recorded_env(meta)
    trace, end = env.get("trace"), env.get("train_end")
    if not isinstance(trace, str):
        return None
    select = config.get("select") or {}
    load = env.get("load") if isinstance(env.get("load"), int | float) else 0.9
    if on_philly_calendar(trace):
        report = PERIODS["report"]
        return f"{trace},start={report.first},end={report.end},load={load:g}"
    if not isinstance(end, int | float):
        return None
    after = max(float(end), float(select.get("end") or 0.0))
    return f"{trace},start={trace_date(after, trace).removesuffix(' s')},load={select.get('load', 0.9)}"


def run_tune_priority(args: argparse.Namespace) -> int:
    from marl.training.priority_train import load_config
    from marl.training.priority_tune import TUNE_DEFAULTS, tune_hysteresis

    cfg = load_config(args.config)
    base = cfg["tune"] or TUNE_DEFAULTS  # the config's tune section, where it has one, gives the defaults
    opts = {k: base[k] if getattr(args, k) is None else getattr(args, k) for k in ("factors", "days", "stride", "load")}
    command = f"marlsched tune-priority --policy {args.policy} --config {args.config}"
    for flag in ("factors", "days", "stride", "load"):
        if getattr(args, flag) is not None:
            value = getattr(args, flag)
            command += f" --{flag} " + (" ".join(f"{f:g}" for f in value) if flag == "factors" else f"{value:g}")
    tune_hysteresis(args.policy, cfg["env"], **opts, workers=args.workers, command=command)
    return 0


def run_export_program(args: argparse.Namespace) -> int:
    from marl.deploy.registry import add_program

    for folder in args.folders:
        program = Path(folder) / "policy.pt2"
        if program.is_file() and not args.force:  # a shipped folder stays as it was committed
            print(f"{program}: present, left as it is (--force writes it again)")
            continue
        err = add_program(folder)
        print(f"{program}: written (largest difference from the network {err:.1e})")
    return 0


def run_upgrade_policy(args: argparse.Namespace) -> int:
    from marl.deploy.registry import upgrade_folder

    for folder in args.folders:
        changed = upgrade_folder(folder)
        print(f"{folder}: " + ("; ".join(changed) if changed else "current, left as it is"))
    return 0


def run_record_rounds(args: argparse.Namespace) -> int:
    from marl.deploy.recorded_rounds import record_rounds

    if Path(args.out).is_dir():
        raise ValueError(f"--out {args.out} is a folder; name the .npz to write, e.g. {Path(args.out) / 'rounds.npz'}")
    if args.rounds < 1 or args.skip < 0:
        raise ValueError(f"--rounds {args.rounds}, --skip {args.skip}: record at least 1 round, skip 0 or more")
    counts = record_rounds(args.folder, args.cluster, args.workload, args.out, rounds=args.rounds, skip=args.skip,
                           seed=args.seed)  # fmt: skip
    print(f"{args.out}: {counts['rounds']} rounds, {counts['preemptions']} preemptions, {counts['starts']} starts")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m marl.cli train-priority|tune-priority|train ...`` (the same commands as ``marlsched ...``)."""
    parser = argparse.ArgumentParser(prog="marlsched", description="Train the scheduler agents.")
    add_train_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        print(f"marlsched {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
