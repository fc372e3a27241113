"""``marlsched interference train|eval|predict``.

The project's CLI calls :func:`add_interference_commands` with its subparsers; ``python -m
interference.cli`` runs the same commands on their own.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from interference.features import FEATURE_SOURCES, PROFILE_COLUMNS
from interference.gavel_jobs import SPLITS
from interference.pairs_csv import OUTPUT_COLUMNS, REQUIRED
from interference.pairs_csv import __doc__ as PAIRS_DOC

# torch, scipy and the training code load inside the commands, so `marlsched --help` starts fast

TRAIN_DOC = """Fit the learned interference predictor to measured pairs of jobs sharing one GPU.

Sources (--data, repeatable): gavel:PATH, Gavel's measured tables (26 job types on K80, P100, V100; no
profile columns); pairs:FILE, your own measurements in the columns of `marlsched interference predict
--help` plus measured norm_a, norm_b (a bare path is a pairs file where it ends in .csv, else Gavel's). A model
fitted on pairs that carry solo profile columns (gpu_util,
mem_util, mem_gb) uses them for jobs that have them; one fitted without them ignores them. Beyond the
range of what it was fitted on (descriptors, GPU datasheet figures, profile columns) the model's answers
move toward a prior with no fitted part (1.0, or time slicing where gpu_util is known); `predict` says so.

How to measure a pair: run each job alone on one GPU of the type and note its samples/s after warm-up
(solo_sps), logging `nvidia-smi --query-gpu=utilization.gpu,utilization.memory,memory.used
--format=csv,noheader,nounits -lms 500 -i GPU` for a minute (medians: gpu_util %, mem_util %, mem_gb =
MiB / 1024); then run the two together on that GPU, once per pair, and divide each job's samples/s by its
solo figure (norm_a, norm_b). A few dozen pairs over the jobs you run fit the profile path.
"""


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _threads(args: argparse.Namespace) -> None:
    import torch

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)


def _gpu_specs(args: argparse.Namespace) -> None:
    if getattr(args, "gpu_specs", None):
        from interference.gpu_specs import load_gpu_specs

        specs = load_gpu_specs(args.gpu_specs)
        _say(f"GPU types from {args.gpu_specs}: {', '.join(s.name for s in specs)}")


def _warn_memory_rule(queries, y: np.ndarray, fitted: np.ndarray) -> None:
    """Name measured pairs that the memory rule overrides: two jobs whose ``mem_gb`` exceed their GPU's memory
    cannot share it (factor 0.05), yet these ran together, so the GPU's memory or the jobs' figures are wrong."""
    from interference.composition import INFEASIBLE_GPU_FACTOR

    forced = (fitted == INFEASIBLE_GPU_FACTOR) & (y > INFEASIBLE_GPU_FACTOR)
    if not forced.any():
        return
    types = sorted({q.job.gpu_type for q, f in zip(queries, forced, strict=True) if f})
    _say(
        f"warning: {int(forced.sum())} of the {len(y)} measured samples are of pairs whose mem_gb add up to more than "
        f"their GPU's memory ({', '.join(types)}), which the model answers with {INFEASIBLE_GPU_FACTOR} (they cannot "
        f"share the GPU), though they ran together at {float(y[forced].mean()):.2f} on average: describe the card "
        "with its memory in a YAML file (--gpu-specs FILE, e.g. 'V100-32GB: {fp32_tflops: 15.7, mem_bw_gbs: 900, "
        "mem_gb: 32, pcie_gbs: 15.8}') and name it in gpu_type, or leave mem_gb empty"
    )


def cmd_train(args: argparse.Namespace) -> int:
    from interference.evaluation import metrics
    from interference.training import TrainConfig, fit_queries, load_training_data

    _threads(args)
    _gpu_specs(args)
    queries, y, sources, gavel = load_training_data(args.data)
    default = TrainConfig()
    cfg = TrainConfig(
        members=args.members or default.members,
        steps=args.steps or default.steps,
        type_rank=default.type_rank if args.type_rank is None else args.type_rank,
        seed=args.seed,
    )
    kinds = {"pairs": "measured", "gavel": "of Gavel's"}
    what = ", ".join(f"{s['samples'] // 2} {kinds.get(s['kind'], s['kind'])} pairs ({s['path']})" for s in sources)
    _say(f"training on {what} ({cfg.members} ensemble members)")
    # the structure, then the measured types' residual and their side of pairs with a new job
    total = cfg.steps * (3 if cfg.type_rank else 1)
    progress = lambda s, loss: _say(f"step {s + 1}/{total} loss {loss:.5f}")  # noqa: E731
    data = sources[0]["path"] if len(sources) == 1 and gavel is not None else sources
    model = fit_queries(queries, y, cfg, progress=progress, meta={"data": data})
    fitted = model.throughput_factors(queries)
    fit_metrics = metrics(fitted, y)
    model.meta["fit_in_sample"] = fit_metrics
    _warn_memory_rule(queries, y, fitted)
    profiled = model.params.profile_fitted
    _say(
        f"profile columns fitted: {', '.join(profiled)}"
        if profiled
        else "profile columns fitted: none (no training pair carried them; predict will not use them)"
    )
    own = np.concatenate([np.full(s["samples"], s["kind"] == "pairs") for s in sources])
    if args.calibrate and gavel is not None:
        from interference.evaluation import calibrate

        _say("calibrating its doubt on Gavel's held-out folds (12 refits with fewer members; --no-calibrate skips)")
        model = calibrate(gavel, model, cfg, log=_say)
    if args.calibrate and own.any():
        from interference.evaluation import calibrate_on_own_pairs

        _say("calibrating its doubt on your pairs, 5 random folds held out in turn (--no-calibrate skips)")
        model = calibrate_on_own_pairs(model, queries, y, own, cfg, log=_say)
    if args.calibrate and model.params.novelty_std:
        sigma = model.params.novelty_std
        _say(
            f"std beyond the ensemble's: both types measured {sigma[0]:.3f}, one new {sigma[1]:.3f}, "
            f"both new {sigma[2]:.3f}"
        )
    if args.provenance is not None:  # the command as given, the code and library versions, the data's SHA-256
        command = shlex.join(["marlsched", *getattr(args, "argv", sys.argv[1:])])
        model.meta["provenance"] = args.provenance(command, args.data)
    model.save(args.out)
    _say(
        f"wrote {args.out} (in-sample MAE {fit_metrics['mae']:.4f} on {fit_metrics['n']} samples, "
        f"{model.meta['train_seconds']} s); held-out accuracy: marlsched interference eval"
    )
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from interference.evaluation import config_from_meta, cross_validate, metrics, parity_plot, write_json
    from interference.gavel_data import load_gavel_pairs
    from interference.learned import LearnedInterference
    from interference.training import gavel_queries

    _threads(args)
    _gpu_specs(args)
    model = LearnedInterference.load(args.model)
    if (args.data is None) == (args.pairs is None):
        raise ValueError("eval needs one of --data gavel:PATH (held-out folds) or --pairs FILE (measured pairs)")
    out = Path(args.out)
    if args.pairs is not None:
        return _eval_pairs_file(model, args.pairs, out)
    if args.data.startswith("pairs:") or args.data.lower().endswith(".csv"):  # measured pairs, not Gavel's tables
        raise ValueError(
            f"--data {args.data}: eval's --data holds Gavel's tables (gavel:PATH), refitted per fold; score the "
            f"model on measured pairs with --pairs {args.data.removeprefix('pairs:')}"
        )
    pairs = load_gavel_pairs(args.data)
    cfg = config_from_meta(model.meta, args.seed)
    if args.steps:
        cfg = replace(cfg, steps=args.steps)
    out.mkdir(parents=True, exist_ok=True)
    cv = cross_validate(pairs, args.split, cfg, log=_say)
    result = cv["result"]
    queries, y, _ = gavel_queries(pairs)
    result["model"] = str(args.model)
    result["model_in_sample"] = metrics(model.throughput_factors(queries), y)
    write_json(out / "eval.json", result)
    title = (  # three short lines: the plot's title is 5 inches wide
        f"{args.split}, n={result['n']}: MAE {result['mae']:.3f} (mean predictor {result['mean_predictor_mae']:.3f})\n"
        f"Spearman {result['spearman']:.2f}; partner ranking: pairwise order accuracy "
        f"{result['pairwise_order_accuracy']:.2f},\nper-job Spearman {result['per_job_spearman']:.2f}"
    )
    parity_plot(out / "parity.png", cv["pred"], cv["y"], cv["gpu"], title)
    doubt = f"coverage of the std {result['coverage']:.2f} (calibrated {result['coverage_calibrated']:.2f})"
    alone = f"the fitted structure alone: MAE {result['structure_alone']['mae']:.3f}"
    _say(f"{title.replace(chr(10), ' ')}\n{alone}; {doubt}\nwrote {out / 'eval.json'} and {out / 'parity.png'}")
    return 0


def _eval_pairs_file(model, path: str, out: Path) -> int:
    """``eval --pairs``: the model on measured pairs from any source, beside the no-slowdown answer and the
    utilisation reference."""
    from interference.evaluation import evaluate_pairs_file, parity_plot, write_json

    ev = evaluate_pairs_file(model, path)
    result = ev["result"]
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "eval.json", result)
    lines = []
    for name in ("model", "no_slowdown", "safe_prior", "utilisation_reference"):
        if name in result:
            m = result[name]
            lines.append(
                f"{name}: MAE {m['mae']:.3f}, bias {m['bias']:+.3f}, Spearman {m['spearman']:.2f}, "
                f"partner pairwise {m['pairwise_order_accuracy']:.2f}"
                + (f", coverage {m['coverage']:.2f}" if "coverage" in m else "")
            )
    o = result["out_of_range"]
    if o["n"]:
        lines.append(
            f"out of range ({o['n']} of {result['model']['n']} samples): MAE {o['mae']:.3f} (safe prior "
            f"{o['prior_mae']:.3f}), coverage {o['coverage']:.2f}"
        )
    title = f"{Path(path).name}: " + lines[0] + f", n={result['model']['n']}"
    parity_plot(out / "parity.png", ev["pred"], ev["y"], np.full(len(ev["y"]), "pairs"), title)
    _say("\n".join(lines) + f"\nwrote {out / 'eval.json'} and {out / 'parity.png'}")
    return 0


def cmd_predict(args: argparse.Namespace) -> int:
    from interference.learned import LearnedInterference
    from interference.pairs_csv import read_pairs_csv, write_predictions

    _gpu_specs(args)
    model = LearnedInterference.load(args.model)
    rows, header, a, b, level = read_pairs_csv(args.pairs)
    pa = model.predict_pairs(a, b, level)
    pb = model.predict_pairs(b, a, level)
    write_predictions(args.out, rows, header, pa.factor, pb.factor, pa.std, pb.std, pa.out_of_range, pa.ood)
    for line in ood_warnings(model, pa.out_of_range, pa.ood, a, b):
        _say(line)
    _say(f"wrote {len(rows)} predictions to {args.out} (mean factor of A {np.mean(pa.factor):.3f})")
    return 0


def ood_warnings(model, out_of_range: np.ndarray, ood: list[str], a, b) -> list[str]:
    """What ``predict`` tells the user about pairs beyond the fitted range, naming the inputs."""
    lines = []
    fitted = model.params.profile_fitted if model.guarded else list(PROFILE_COLUMNS)
    unused = [c for c in PROFILE_COLUMNS if c not in fitted and not (np.isnan(getattr(a, c)).all()
                                                                      and np.isnan(getattr(b, c)).all())]  # fmt: skip
    if unused:
        lines.append(
            f"note: the model was not fitted on profile column(s) {', '.join(unused)} (none of its training pairs "
            "carried them), so it does not use them; pairs with them count as out of range, and where both jobs' "
            "gpu_util is given the answer moves to time slicing, min(1, 100 / (u_a + u_b)). To use them, train on "
            "pairs you measured with them: marlsched interference train --data pairs:FILE (see --help)"
        )
    n_out = int(out_of_range.sum())
    if n_out:
        where = ", ".join(str(i + 2) for i in np.flatnonzero(out_of_range)[:10])
        counts: dict[str, int] = {}
        for names in ood:
            for name in {part.split(":", 1)[1] for part in names.split(";") if part}:
                counts[name] = counts.get(name, 0) + 1
        inputs = ", ".join(
            f"{k}{f' [{FEATURE_SOURCES[k]}]' if k in FEATURE_SOURCES else ''} ({v})"
            for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        lines.append(
            f"warning: {n_out} of {len(out_of_range)} pairs have a job outside the range the model was fitted on "
            f"(lines {where}{', ...' if n_out > 10 else ''}; columns out_of_range, ood): {inputs}; their answers "
            "and std move toward the prior (1.0, no interference, or time slicing where both gpu_util are given)"
        )
    return lines


def int_at_least(low: int, what: str = "an integer") -> Callable[[str], int]:
    """An argparse type: ``what`` (an integer) >= ``low``, refused with the value given (a seed, a count)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"{what} is an integer >= {low}, got {text!r}")
        return value

    return parse


_count = int_at_least(1, "a count")


def _check_out(args: argparse.Namespace) -> None:
    """``--out`` before any work: eval writes a folder, train and predict a file (never one of their inputs)."""
    out = Path(args.out)
    folder = args.interference_command == "eval"
    if folder and out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; eval writes a folder (eval.json, parity.png): name a folder")
    if not folder and out.is_dir():
        raise ValueError(f"--out {out} is a folder; name the file to write, e.g. {out / 'predictor.json'}")
    if not folder and getattr(args, "pairs", None) and out.resolve() == Path(args.pairs).resolve():
        raise ValueError(f"--out {out} is the --pairs file it reads; name another file")
    parent = out if folder else out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out {out}: cannot create {parent} ({err.strerror}); choose another --out") from None


def _guard(fn):
    """Turn input errors into one clear line and exit status 2 instead of a traceback."""

    def run(args: argparse.Namespace) -> int:
        try:
            _check_out(args)
            return fn(args)
        except (ValueError, FileNotFoundError, KeyError) as e:
            msg = e.args[0] if isinstance(e, KeyError) and e.args else e
            print(f"marlsched interference {args.interference_command}: error: {msg}", file=sys.stderr)
            raise SystemExit(2) from None  # bad input: exit 2, as every marlsched command

    return run


def add_interference_commands(
    subparsers: argparse._SubParsersAction, provenance: Callable[[str, list[str]], dict] | None = None
) -> argparse.ArgumentParser:
    """Register ``interference`` with sub-commands train, eval and predict; each sets ``func``. ``provenance``:
    given the command line and the ``--data`` sources, what a trained predictor records of how it was made (the
    caller's, which knows the code version; this package sits below the one that reads it)."""
    p = subparsers.add_parser(
        "interference", help="co-location interference: train, evaluate and query the learned predictor"
    )
    sub = p.add_subparsers(dest="interference_command", required=True, metavar="{train,eval,predict}")

    t = sub.add_parser(
        "train",
        help="fit the contention model to measured GPU-sharing pairs (Gavel's tables and/or your own)",
        description=TRAIN_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "--data",
        required=True,
        action="append",
        help="gavel:PATH (a Gavel throughput JSON or its folder) or pairs:FILE (your measured pairs CSV); "
        "repeat to train on several, e.g. --data gavel:PATH --data pairs:FILE",
    )
    t.add_argument("--seed", type=int, default=0, help="seed of the ensemble's initial weights and batches (default 0)")
    t.add_argument("--out", required=True, help="model file to write (JSON)")
    t.add_argument("--steps", type=_count, default=None, help="optimiser steps per stage (default: TrainConfig's)")
    t.add_argument("--members", type=_count, default=None, help="ensemble members (default: TrainConfig's)")
    t.add_argument(
        "--calibrate",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="widen the predicted std by the held-out errors of pairs with new job types (default on)",
    )
    t.add_argument(
        "--type-rank",
        type=int,
        default=None,
        help="rank of the residual of measured job types (default: TrainConfig's; 0: descriptors only)",
    )
    t.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: the network is tiny, more threads only add overhead)",
    )
    t.set_defaults(func=_guard(cmd_train), provenance=provenance)

    e = sub.add_parser(
        "eval",
        help="held-out accuracy of the model's configuration on Gavel's pairs",
        description=(
            "How well a trained predictor answers what it was not fitted on: with --data, its configuration refitted "
            "on each fold of Gavel's pairs and scored on the fold held out (--split); with --pairs, the model as "
            "it is on measured pairs of another source. Writes eval.json and a parity plot."
        ),
    )
    e.add_argument("--model", required=True, help="the trained predictor's JSON (interference train --out)")
    e.add_argument("--data", default=None, help="gavel:PATH: held-out folds of Gavel's pairs (refits per fold)")
    e.add_argument(
        "--pairs",
        default=None,
        help="a pairs CSV (as for predict) with measured norm_a,norm_b: the model as it is, on another source",
    )
    e.add_argument(
        "--split",
        choices=SPLITS,
        default="random",
        help="random: pairs held out at random; leave-model-out: every pair of a model family (default: random)",
    )
    e.add_argument("--out", required=True, help="folder for eval.json and parity.png")
    e.add_argument("--seed", type=int, default=None, help="fold seed (default: the model's training seed)")
    e.add_argument("--steps", type=_count, default=None, help="override the training steps per fold")
    e.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    e.set_defaults(func=_guard(cmd_eval))

    r = sub.add_parser(
        "predict",
        help="predict normalised throughputs of job pairs given by descriptors",
        description=PAIRS_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    r.add_argument("--model", required=True)
    r.add_argument("--pairs", required=True, help="CSV with columns " + ", ".join(REQUIRED) + " (see above)")
    r.add_argument("--out", required=True, help="CSV to write: input columns + " + ", ".join(OUTPUT_COLUMNS))
    for command in (t, e, r):
        command.add_argument(
            "--gpu-specs",
            default=None,
            metavar="FILE",
            help="YAML of datasheet figures for GPU types beyond the built-in ones (or a card's other memory size), "
            "e.g. 'L40S: {fp32_tflops: 91.6, mem_bw_gbs: 864, mem_gb: 48, pcie_gbs: 31.5}'",
        )
    r.set_defaults(func=_guard(cmd_predict))
    return p


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="marlsched")
    add_interference_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
