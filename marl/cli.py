"""`marlsched train`, `train-priority`, `tune-priority` and `export`; experiments.cli registers them
(:func:`add_train_commands`).

Heavy modules (torch, ray) load inside the commands so that `marlsched --help` starts fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_train_commands", "main", "run_export", "run_train", "run_train_priority", "run_tune_priority"]


def add_train_commands(subparsers) -> None:
    """Register ``train`` and ``export`` on an argparse subparsers object (each sets ``func``)."""
    p = subparsers.add_parser(
        "train",
        help="train the multi-agent policy: imitation warm start, then PPO on Ray RLlib, then evaluation",
        description=(
            "Train the shared HGNN scheduler policy from a YAML config (see experiments/configs/marl_small.yaml). "
            "Writes checkpoints, progress.csv, TensorBoard logs, learning_curve.png, the exported policy and "
            "eval.json/comparison.md into --out. A config with `agent: topdrl` trains the published TopDRL scheduler "
            "instead (marl/baselines; e.g. experiments/configs/topdrl_small.yaml): progress.csv, learning_curve.png, "
            "policy/ (usable as --policy topdrl:OUT/policy) and evaluation/; `agent: dl2` trains DL2 (e.g. "
            "experiments/configs/dl2_pollux.yaml; --policy dl2:OUT/policy), `agent: metaplace` the meta-RL placement "
            "(experiments/configs/metaplace_philly.yaml; --policy metaplace:OUT/policy)."
        ),
    )
    p.add_argument("--config", help="training config YAML (not needed with --resume)")
    p.add_argument("--out", help="run folder to create (results, checkpoints, policy)")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    p.add_argument("--iterations", type=int, default=None, help="total PPO iterations (overrides the config)")
    p.add_argument("--address", default=None, help="Ray cluster address (overrides ray.address; 'auto' in a job)")
    p.add_argument("--no-eval", action="store_true", help="skip the final evaluation against the heuristics")
    p.add_argument("--quiet", action="store_true", help="no per-iteration lines")
    p.set_defaults(func=run_train)

    e = subparsers.add_parser(
        "export",
        help="export a trained policy to TorchScript (+ ONNX if installed) with metadata.json",
        description=(
            "Export a checkpoint (a run folder, one of its checkpoints/iter_* folders, or its warm_start folder) "
            "to a policy folder usable with `simulate --policy marl:POLICY_DIR` without RLlib."
        ),
    )
    e.add_argument("--checkpoint", required=True, help="run folder or checkpoint folder")
    e.add_argument("--out", required=True, help="policy folder to write")
    e.add_argument("--no-onnx", action="store_true", help="TorchScript only")
    e.set_defaults(func=run_export)

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


def run_train(args: argparse.Namespace) -> int:
    from marl.training.config import config_agent, load_train_config
    from marl.training.train import resume_config, train

    if args.config and config_agent(args.config) is not None:
        return _run_train_baseline(args)
    if args.resume:
        if args.config or (args.out and Path(args.out).resolve() != Path(args.resume).resolve()):
            raise ValueError("--resume DIR continues the run in DIR with its own config; drop --config/--out")
        cfg = resume_config(args.resume)
        out = args.resume
    else:
        if not args.config or not args.out:
            raise ValueError("train needs --config FILE.yaml and --out DIR (or --resume DIR)")
        if (Path(args.out) / "state.json").exists():
            raise ValueError(f"{args.out} already holds a run; use --resume {args.out} or another --out")
        cfg = load_train_config(args.config)
        out = args.out
    if args.iterations is not None and args.iterations < 1:
        raise ValueError(f"--iterations must be >= 1, got {args.iterations}")
    log = (lambda msg: None) if args.quiet else print
    summary = train(
        cfg,
        out,
        resume=bool(args.resume),
        iterations=args.iterations,
        address=args.address,
        evaluate=False if args.no_eval else None,
        log=log,
    )
    print(f"run folder: {summary['out']} ({summary.get('iterations', 0)} PPO iterations)")
    return 0


def _run_train_baseline(args: argparse.Namespace) -> int:
    """``marlsched train --config`` of a published learned scheduler (``agent: topdrl`` or ``dl2``)."""
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
        raise ValueError(f"{args.config}: agent {agent!r} is not one marlsched trains; choose agent: "
                         f"{' or '.join(trainers)}, or drop the key to train marlsched's own agents")  # fmt: skip
    if args.resume or not args.out:
        raise ValueError(f"{args.config}: a {agent} run needs --config and --out (it does not resume)")
    if args.address:
        raise ValueError(f"{args.config}: a {agent} run trains in local processes; drop --address")
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

    train_priority(args.config, args.out)
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


def run_export(args: argparse.Namespace) -> int:
    from marl.deploy.export import export_policy_dir

    meta = export_policy_dir(args.checkpoint, args.out, onnx=not args.no_onnx)
    files = [meta["files"]["torchscript"], *meta["files"]["onnx"], "metadata.json"]
    print(f"policy folder: {args.out} ({', '.join(files)})")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m marl.cli train|export ...`` (the same commands as ``marlsched train|export``)."""
    parser = argparse.ArgumentParser(prog="marlsched", description="Train and export the MARL scheduler policy.")
    add_train_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:
        print(f"marlsched {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
