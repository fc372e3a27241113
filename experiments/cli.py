"""The `marlsched` command line."""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from pathlib import Path

from experiments.own_code import is_ours


def predictor_provenance(command: str, data: list[str]) -> dict:
    """What ``marlsched interference train`` records in the predictor it writes, as results record theirs."""
    from experiments.provenance import result_provenance

    return result_provenance(command, [], (), data)


def build_parser() -> argparse.ArgumentParser:
    """The ``marlsched`` parser with every subcommand (the CLI reference page is rendered from it)."""
    from experiments.check_leak import add_check_leak_command
    from experiments.run import add_run_command
    from experiments.simulate import add_simulate_command
    from interference.cli import add_interference_commands
    from marl.cli import add_train_commands

    parser = argparse.ArgumentParser(
        prog="marlsched",
        description="Schedule deep-learning training jobs on simulated GPU clusters: heuristics and MARL.",
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE_OR_FILE",
        help="import this module first (repeatable; before or after the command): it may register schedulers, "
        "placements, workload kinds or interference models (see experiments/examples/); a learned scheduler of "
        "your own is an agent spec (docs/extending.md)",
    )
    parser.add_argument(
        "--version", action=_Version, help="print the version and the code commit (as policy folders record it)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_simulate_command(sub)
    add_interference_commands(sub, provenance=predictor_provenance)
    add_train_commands(sub)
    add_run_command(sub)
    add_check_leak_command(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: the package version and the commit of this checkout, looked up only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        import importlib.metadata

        from marl.deploy.policy_files import code_version

        commit = code_version()
        try:
            version = importlib.metadata.version("marlsched")
        except importlib.metadata.PackageNotFoundError:  # run from a checkout that was not installed
            version = "(not installed)"
        print(f"marlsched {version}" + ("" if commit.startswith("marlsched") else f" ({commit})"))
        parser.exit()


SEEDED_COMMANDS = ("run", "train", "train-priority")  # commands whose results must repeat for a seed


def plugins_first(argv: list[str]) -> list[str]:
    """``argv`` with every ``--plugin X`` (or ``--plugin=X``) moved before the command, where the parser takes it:
    no command has an option of that name, so ``marlsched simulate --plugin FILE ...`` means the same."""
    plugins: list[str] = []
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--plugin":
            plugins += [arg, next(it, "")]
        elif arg.startswith("--plugin="):
            plugins.append(arg)
        else:
            rest.append(arg)
    return [*plugins, *rest]


def main(argv: list[str] | None = None) -> int:
    """Run ``marlsched`` with ``argv`` (default: the process's arguments); returns the exit code (2: a user error,
    said in one line; 130: interrupted)."""
    try:
        parser = build_parser()
    except ValueError as err:  # an installed package's agent spec that cannot be read: every command needs the table
        print(f"marlsched: error: {err}", file=sys.stderr)
        return 2
    args = parser.parse_args(plugins_first(sys.argv[1:] if argv is None else argv))
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as given, for results' provenance
    if argv is None and args.command in SEEDED_COMMANDS and "PYTHONHASHSEED" not in os.environ:
        # string hashing is salted per process; the trainer orders agents and batches through str sets and
        # dicts, so the command restarts itself, unsalted, to repeat bit for bit (workers: marl.deploy.local_ray)
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, "PYTHONHASHSEED": "0"})
    warnings.formatwarning = _format_warning
    try:
        if args.plugin:
            from cluster_sim.plugins import load_plugins

            load_plugins(args.plugin)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"marlsched {args.command}: interrupted. {_after_interrupt(args)}", file=sys.stderr)
        return 130  # the shell's code for a command stopped by Ctrl-C
    except Exception as err:
        from cluster_sim.simulator import SimulationStalled

        if isinstance(err, SimulationStalled):  # a scheduler that cannot finish the workload: not a crash
            print(f"marlsched {args.command}: {err}", file=sys.stderr)
            return 1
        # user errors (bad spec, missing file, unknown name) and any exception raised in the user's own code (a
        # plugin, a scheduler) end in one clear line; an exception of marlsched's own is a bug: its traceback
        if isinstance(err, (ValueError, FileNotFoundError, KeyError)) or _raised_in_user_code(err):
            print(f"marlsched {args.command}: error: {_one_line(err)}", file=sys.stderr)
            return 2
        raise


def _one_line(err: BaseException) -> str:
    """A user error as its message, with what the simulator noted (which scheduler, when) and, where code of the
    user's own raised it, that code's file and line; one raised in a Ray task (whose text is the worker's coloured
    traceback) as its cause's, said to come from a task."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException) and type(err).__name__.startswith("RayTaskError"):
        return f"{_said(cause, _user_frame(_frames(err)))} (raised in a Ray task)"
    return _said(err, _user_frame(_frames(err)))


def _said(err: BaseException, where: str | None) -> str:
    text = f"{type(err).__name__}: {err}" if where else str(err)  # marlsched's own messages say what went wrong
    return "; ".join([text, *getattr(err, "__notes__", ()), *([f"raised at {where}"] if where else [])])


def _raised_in_user_code(err: BaseException) -> bool:
    return _user_frame(_frames(err)) is not None


_TEXT_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _frames(err: BaseException) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of ``err``'s traceback, outermost first; for an error a Ray task raised (its cause
    arrives without a traceback) those of the worker's traceback text."""
    import traceback

    if type(err).__name__.startswith("RayTaskError"):  # its text is the worker's traceback
        return [(f, int(n), fn) for f, n, fn in _TEXT_FRAME.findall(str(err))]
    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(err.__traceback__)]


def _user_frame(frames: list[tuple[str, int, str]]) -> str | None:
    """``FILE, line N, in FUNC`` of the innermost of ``frames`` in code of the user's own (not marlsched's, not a
    library's, not Python's), or None where none is."""
    import sysconfig

    libraries = {Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "purelib", "platlib")}
    for filename, lineno, name in reversed(frames):
        if filename.startswith("<") or is_ours(filename):
            continue
        if any(Path(filename).resolve().is_relative_to(lib) for lib in libraries):
            continue
        return f"{filename}, line {lineno}, in {name}"
    return None


_python_format = warnings.formatwarning


def _format_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    """What a reader of the figures should know (a learned policy on another cluster than its own, jobs on
    estimated speeds), and any warning marlsched's own code gives, as one line; other libraries' warnings as
    Python prints them (their source line is theirs to read)."""
    from cluster_sim.protocol import SimulationWarning

    if issubclass(category, SimulationWarning) or is_ours(filename):
        return f"marlsched: warning: {message}\n"
    return _python_format(message, category, filename, lineno, line)


def _after_interrupt(args) -> str:
    """What an interrupted command kept and how to go on (every output is written atomically)."""
    out = getattr(args, "out", None)
    if args.command in ("train", "train-priority") and out:
        from marl.training.priority_train import CHECKPOINT_DIR

        if (Path(out) / "policy" / "metadata.json").is_file() and not (Path(out) / CHECKPOINT_DIR).is_dir():
            return f"The policy was written before the interrupt: {Path(out) / 'policy'} is complete."
        if (Path(out) / CHECKPOINT_DIR).is_dir():
            from marl.training.priority_train import iterations_saved

            kept = Path(out) / CHECKPOINT_DIR
            return (
                f"Its last checkpoint (after iteration {iterations_saved(kept)}: an iteration is saved after its "
                f"line) is kept in {kept}; add --resume to the same command to go on from it."
            )
        return (
            f"No checkpoint was kept in {out} (PPO and APPO keep one as they train, the other algorithms none); "
            "the same command starts the training again."
        )
    if args.command == "run" and out:
        return (
            f"What finished is kept in {out} (runs done, checkpoints); the same command resumes from there "
            "without redoing it."
        )
    return "Nothing half-written was left behind; run the command again to redo it."


if __name__ == "__main__":
    sys.exit(main())
