"""`marlsched train-priority`, `tune-priority`, `train` (the published learned schedulers) and `export-program`;
experiments.cli registers them (:func:`add_train_commands`).

Heavy modules (torch, ray) load inside the commands so that `marlsched --help` starts fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_train_commands", "main", "run_export_program", "run_train", "run_train_priority", "run_tune_priority"]


def add_train_commands(subparsers) -> None:
    """Register ``train``, ``train-priority``, ``tune-priority`` and ``export-program`` on an argparse subparsers
    object (each sets ``func``)."""
    p = subparsers.add_parser(
        "train",
        help="train a published learned scheduler (TopDRL, DL2, meta-RL placement) from a config with `agent:`",
        description=(
            "Train a published learned scheduler from a YAML config naming it: `agent: topdrl` (e.g. "
            "experiments/configs/topdrl_small.yaml; --policy topdrl:OUT/policy), `agent: dl2` (e.g. "
            "experiments/configs/dl2_pollux.yaml; --policy dl2:OUT/policy) or `agent: metaplace` "
            "(experiments/configs/metaplace_philly.yaml; --policy metaplace:OUT/policy). Writes progress.csv, "
            "learning_curve.png, policy/ and evaluation/ into --out. marlsched's own agents train with "
            "`marlsched train-priority`."
        ),
    )
    p.add_argument("--config", required=True, help="training config YAML with an agent: key")
    p.add_argument("--out", required=True, help="run folder to create (results, policy)")
    p.add_argument("--iterations", type=int, default=None, help="total iterations (overrides the config)")
    p.add_argument("--no-eval", action="store_true", help="skip the final evaluation against the heuristics")
    p.add_argument("--quiet", action="store_true", help="no per-iteration lines")
    p.set_defaults(func=run_train)

    t = subparsers.add_parser(
        "train-priority",
        help="train the preemptive priority agents (QSSF warm start, PPO on trace windows) and export them",
        description=(
            "Train the priority agents of marl.env.priority_agents on random windows of a trace with RLlib PPO; "
            "writes progress.csv, learning_curve.png and the exported policy folder OUT/policy, usable as "
            "`simulate --policy marl:OUT/policy` on any cluster."
        ),
    )
    t.add_argument("--config", required=True, help="YAML config (e.g. experiments/configs/marl_philly.yaml)")
    t.add_argument("--out", required=True, help="output folder")
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue a killed training in --out from its last checkpoint (OUT/checkpoint, same config)",
    )
    t.set_defaults(func=run_train_priority)

    u = subparsers.add_parser(
        "tune-priority",
        help="select a priority policy's preemption margin on the training period and write it into its metadata",
        description=(
            "Replay fixed windows of the config's training period (never the held-out weeks) with the policy "
            "at each hysteresis factor e (a waiting job must promise e times less remaining time to preempt) "
            "and write the factor with the lowest paired average JCT into POLICY/metadata.json."
        ),
    )
    u.add_argument("--policy", required=True, help="priority policy folder (e.g. OUT/policy of train-priority)")
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
    e.set_defaults(func=run_export_program)


def run_train(args: argparse.Namespace) -> int:
    """``marlsched train --config`` of a published learned scheduler (``agent: topdrl``, ``dl2``, ``metaplace``)."""
    from marl.baselines.dl2_train import load_dl2_config, train_dl2
    from marl.baselines.metaplace_train import load_metaplace_config, train_metaplace
    from marl.baselines.topdrl_train import load_topdrl_config, train_topdrl
    from marl.training.config import config_agent

    trainers = {
        "topdrl": (load_topdrl_config, train_topdrl),
        "dl2": (load_dl2_config, train_dl2),
        "metaplace": (load_metaplace_config, train_metaplace),
    }
    agent = config_agent(args.config)
    if agent not in trainers:
        raise ValueError(f"{args.config}: agent {agent!r} is not one marlsched train trains; choose agent: "
                         f"{' or '.join(trainers)} (marlsched's own agents: marlsched train-priority)")  # fmt: skip
    if (Path(args.out) / "policy").exists():
        raise ValueError(f"{args.out} already holds a trained policy; choose another --out")
    load, train = trainers[agent]
    cfg = load(args.config)
    command = f"marlsched train --config {args.config} --out {args.out}"
    if args.iterations is not None:
        if args.iterations < 1:
            raise ValueError(f"--iterations must be >= 1, got {args.iterations}")
        command += f" --iterations {args.iterations}"
    log = (lambda msg: None) if args.quiet else print
    summary = train(cfg, args.out, iterations=args.iterations, evaluate=False if args.no_eval else None,
                           command=command, log=log)  # fmt: skip
    print(f"run folder: {summary['out']} ({summary['iterations']} iterations, selected {summary['selected']})")
    return 0


def run_train_priority(args: argparse.Namespace) -> int:
    from marl.training.priority_train import train_priority

    command = f"marlsched train-priority --config {args.config} --out {args.out}"
    train_priority(args.config, args.out, command=command, resume=args.resume)
    return 0


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
    import marl.baselines.dl2
    import marl.baselines.topdrl  # noqa: F401  (they register their kinds)
    from marl.deploy.programs import add_program

    for folder in args.folders:
        err = add_program(folder)
        print(f"{Path(folder) / 'policy.pt2'}: written (largest difference from the network {err:.1e})")
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
