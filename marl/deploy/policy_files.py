"""Reading the files of an exported policy folder, with errors that name the file and the fix.

A copied or half-synced policy folder is the usual way these files break (a truncated ``policy.pt``, a
``metadata.json`` cut mid-way); the loaders say which file, what is wrong with it and what to do, in one
line, instead of a deserialiser's traceback.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

METADATA = "metadata.json"
FORMAT = "marlsched-policy"
# 2: one schema for every kind (format_version, agent, provenance); 1: folders written before, which load alike
FORMAT_VERSION = 2
FIX = "copy the policy folder again (a file may be truncated) or train it again (its metadata.json holds the command)"


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON object from ``path``; ValueError naming the file when it is not one."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({type(e).__name__}: {e}); {FIX}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(doc).__name__}; {FIX}")
    return doc


@contextlib.contextmanager
def torchscript_quietly() -> Iterator[None]:
    """TorchScript without torch's notice that it is deprecated (2.14 on): the folders carry the same network as a
    ``torch.export`` program, which the loaders read where TorchScript is gone, so the notice asks nothing of a user."""
    with warnings.catch_warnings():
        for category in (FutureWarning, DeprecationWarning):  # torch has used both
            warnings.filterwarnings("ignore", r".*torch\.jit\.\w+` is deprecated", category)
        yield


def load_torchscript(path: str | Path):
    """A TorchScript module from ``path`` on the CPU; FileNotFoundError or ValueError naming the file."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; {FIX}")
    try:
        with torchscript_quietly():
            return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError, EOFError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path}: not a readable TorchScript policy ({reason[:160]}); {FIX}") from None


_PROGRAMS: dict[str, Any] = {}  # architecture -> its last exported program (a few networks per process)
_KEEP_PROGRAMS = 8
_SAME = 1e-5  # a reused program further than this from the module on the check inputs is exported again


def _architecture(module, example: tuple, dynamic_shapes: tuple) -> str:
    """What a traced program depends on besides the weights' values: the modules and their plain settings,
    the tensors' names, shapes and dtypes, the example's shapes and the free dimensions."""
    parts = [f"{type(module).__module__}.{type(module).__qualname__}", repr(module), repr(dynamic_shapes)]
    for name, sub in module.named_modules():
        plain = sorted((k, repr(v)) for k, v in vars(sub).items()
                       if not k.startswith("_") and isinstance(v, bool | int | float | str | tuple | None))  # fmt: skip
        parts.append(f"{name}:{type(sub).__qualname__}:{plain}")
    parts += [f"{k}:{tuple(v.shape)}:{v.dtype}" for k, v in module.state_dict(keep_vars=True).items()]
    parts += [f"{tuple(x.shape)}:{x.dtype}" if hasattr(x, "shape") else repr(x) for x in example]
    return "\n".join(parts)


def _with_weights(program, module):
    """``program`` carrying ``module``'s current parameters and buffers (new tensors: the program's old ones
    may be another module's own)."""
    import torch

    state = dict(module.named_parameters()) | dict(module.named_buffers())
    for store in (program.state_dict, program.constants):
        for key, old in store.items():
            if key in state:
                new = state[key].detach().clone()
                if isinstance(old, torch.nn.Parameter):
                    new = torch.nn.Parameter(new, requires_grad=old.requires_grad)
                store[key] = new
    return program


def _program_error(program, module, check: tuple) -> float:
    got, want = program.module()(*check), module(*check)
    got, want = (got, want) if isinstance(got, tuple | list) else ((got,), (want,))
    return max(float((a - b).abs().max()) for a, b in zip(got, want, strict=True))


def save_program(module, example: tuple, dynamic_shapes: tuple, path: str | Path, check: tuple) -> float:
    """``module``'s forward exported with ``torch.export`` (the sizes named in ``dynamic_shapes`` left free)
    and written to ``path`` through a temporary file; returns its largest difference from the module on
    ``check``, inputs of other sizes than ``example``. TorchScript is deprecated in recent torch releases;
    this program is what loads when TorchScript no longer does (:func:`load_network`).

    Tracing takes seconds; a training run exports the same network with new weights many times (each
    selected iteration, each seed of a determinism check), so the last program of each architecture is
    kept and given the new weights, and traced again if it then differs from the module on ``check``."""
    import torch

    path = Path(path)
    key = _architecture(module, example, dynamic_shapes)
    with torch.no_grad():
        err = None
        if key in _PROGRAMS:
            program = _with_weights(_PROGRAMS[key], module)
            err = _program_error(program, module, check)
        if err is None or err > _SAME:
            program = _with_weights(torch.export.export(module, example, dynamic_shapes=dynamic_shapes), module)
            err = _program_error(program, module, check)
    _PROGRAMS.pop(key, None)
    _PROGRAMS[key] = program
    while len(_PROGRAMS) > _KEEP_PROGRAMS:
        del _PROGRAMS[next(iter(_PROGRAMS))]
    # torch.export names the archive's top folder after the file: written under the file's own name in a
    # temporary folder beside it, then renamed into place
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=f".{path.name}.") as tmp:
        torch.export.save(program, str(Path(tmp) / path.name))
        os.replace(Path(tmp) / path.name, path)
    return err


def _eval_only(module):
    """An exported program's module with ``train()``/``eval()`` that do nothing (the program refuses them):
    it was traced in eval mode and has no other, and callers set eval mode on whatever network they get."""
    import types

    module.train = types.MethodType(lambda self, mode=True: self, module)
    module.eval = types.MethodType(lambda self: self, module)
    return module


def _read_program(source):
    """``torch.export.load`` of a path or buffer as an eval-only module, without the traceback torch logs on a
    damaged archive before it raises (the caller names the file in one line)."""
    import logging

    import torch

    logger = logging.getLogger("torch.export")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return _eval_only(torch.export.load(source).module())
    finally:
        logger.setLevel(level)


def program_torch(meta: Mapping[str, Any]) -> str | None:
    """The torch release that wrote a folder's ``policy.pt2``, as its metadata records it (None: not recorded)."""
    libraries = (meta.get("provenance") or {}).get("libraries") or {}
    trained = meta.get("trained") or {}
    return meta.get("program_torch") or libraries.get("torch") or meta.get("torch") or trained.get("torch")


def _release(version: str) -> tuple[str, ...]:
    return tuple(version.split("+")[0].split(".")[:2])


def load_program(path: str | Path, written_by: str | None = None):
    """A ``torch.export`` program from ``path`` as a callable module; errors name the file and the fix: where
    ``written_by`` (the torch that wrote it) is another release than this torch and torch names a version in its
    refusal, the release: torch reads programs of its own serialisation schema only (2.13 and 2.14 read each
    other's; 2.3 and 2.13 do not)."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; {FIX}")
    try:
        return _read_program(str(path))
    except Exception as e:  # the loader raises many kinds (zip, pickle, version) on a damaged or foreign file
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if written_by and _release(written_by) != _release(torch.__version__) and "version" in reason.lower():
            raise ValueError(
                f"{path}: written by torch {written_by}, which this torch {torch.__version__} cannot read "
                f"({reason[:120]}); load it with torch {'.'.join(_release(written_by))}, or write it again with this "
                f"torch from the folder's TorchScript: marlsched export-program {path.parent} --force"
            ) from None
        raise ValueError(f"{path}: not a readable torch.export program ({reason[:160]}); {FIX}") from None


TORCHSCRIPT = "policy.pt"
PROGRAM = "policy.pt2"


def _read_network(folder: Path):
    """(the file read, its network): ``policy.pt``, or ``policy.pt2`` where that is missing or unreadable."""
    script, program = folder / TORCHSCRIPT, folder / PROGRAM
    if script.is_file():
        try:
            return script, load_torchscript(script)
        except ValueError as e:
            if not program.is_file():
                raise
            net = load_program(program, _written_by(folder))  # names policy.pt2 if it is unreadable as well
            warnings.warn(f"{e}; reading {PROGRAM}, the same network", stacklevel=3)
            return program, net
    if program.is_file():
        return program, load_program(program, _written_by(folder))
    raise FileNotFoundError(f"{script}: missing, and no {PROGRAM} beside it; {FIX}")


def _written_by(folder: Path) -> str | None:
    """:func:`program_torch` of ``folder``'s metadata, None where it cannot be read (its own error comes later)."""
    try:
        return program_torch(read_json(folder / METADATA))
    except (OSError, ValueError):
        return None


def load_network(folder: str | Path):
    """A policy folder's network: its TorchScript ``policy.pt`` or, where that is missing or cannot be read
    (a torch without TorchScript), its ``torch.export`` program ``policy.pt2``; both compute the same."""
    return _read_network(Path(folder))[1]


def network_file(folder: str | Path) -> Path:
    """The file of ``folder`` that :func:`load_network` reads (to ship its bytes, e.g. to Ray actors)."""
    return _read_network(Path(folder))[0]


def network_from_bytes(blob: bytes, name: str):
    """The network in the bytes of a policy file called ``name`` (``policy.pt`` or ``policy.pt2``)."""
    import io

    import torch

    if name == PROGRAM:
        return _read_program(io.BytesIO(blob))
    with torchscript_quietly():
        return torch.jit.load(io.BytesIO(blob), map_location="cpu")


@contextlib.contextmanager
def atomic_folder(folder: str | Path) -> Iterator[Path]:
    """A temporary folder to write a policy into, renamed to ``folder`` (replacing it) only when the block
    ends without an error: a reader never sees a half-written policy."""
    folder = Path(folder)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, folder)


def not_a_policy_folder(folder: str | Path) -> FileNotFoundError:
    """The error for a folder without ``metadata.json``, naming what it is where it is something else: a
    training run's folder (its policy is ``OUT/policy``) or an interference model's."""
    folder = Path(folder)
    hint = ""
    if (folder / "policy" / METADATA).is_file():
        hint = f"; it is a training run's folder: its policy is {folder / 'policy'}"
    elif (folder / "model.json").is_file():
        hint = (
            "; it holds an interference model, not a scheduler: give its model.json to "
            f"--interference learned --interference-model {folder / 'model.json'}"
        )
    return FileNotFoundError(f"{folder} is not a policy folder (no {METADATA}){hint}")


def read_network_metadata(
    folder: str | Path,
    agent: str,
    columns: Mapping[str, Iterable[str]] | Callable[[dict[str, Any]], Mapping[str, Iterable[str]]],
    retrain: str,
) -> dict[str, Any]:
    """``folder``'s metadata, checked to be ``agent``'s (a folder written before kinds were recorded passes) with
    this version's input ``columns`` (key -> names, or a function of the metadata giving them: inputs that depend
    on the agent's settings); else an error naming the file, what differs and ``retrain``, what makes the folder
    again. The one check every network policy's loader makes."""
    path = Path(folder) / METADATA
    if not path.is_file():
        raise not_a_policy_folder(folder)
    meta = read_json(path)
    if meta.get("agent", agent) != agent and not _loads_alike(meta.get("agent"), agent):
        raise ValueError(f"{path}: agent {meta.get('agent')!r} is not {agent!r}; {retrain}")
    for key, names in (columns(meta) if callable(columns) else columns).items():
        if list(meta.get(key, ())) != list(names):
            raise ValueError(f"{path}: {key} {meta.get(key)} differ from this version's {list(names)}; {retrain}")
    return meta


def _loads_alike(found: Any, agent: str) -> bool:
    """Whether the agent ``found`` loads with ``agent``'s loader: a spec of one's own that reuses a built-in
    agent's network and loop writes that agent's folders under its own name."""
    from marl.agents import AGENTS

    theirs, ours = AGENTS.get(str(found)), AGENTS.get(agent)
    return theirs is not None and ours is not None and theirs.loader == ours.loader


def _largest_difference(got: Any, want: Any, mask: Any = None) -> float:
    """The largest absolute difference of two outputs (tensors or tuples of them), on ``mask`` where given (the
    first output's entries that mean something: a padded slot's score is no output)."""
    got, want = (got, want) if isinstance(got, tuple | list) else ((got,), (want,))
    diffs = [(a - b).abs() for a, b in zip(got, want, strict=True)]
    if mask is not None:
        diffs[0] = diffs[0][mask]
    return max(float(d.max()) for d in diffs)


def save_network_folder(
    net: Any,
    folder: str | Path,
    agent: str,
    meta: Mapping[str, Any],
    example: tuple,
    program_of: Callable[[Any, Path], float],
    *,
    mask: Any = None,
    extra_files: Iterable[str] = (),
    also: Callable[[Path, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The one writer of a learned network's policy folder, whatever its agent: ``policy.pt`` (TorchScript),
    ``policy.pt2`` (the same network as a ``torch.export`` program, written by ``program_of``), ``metadata.json``
    (:func:`write_metadata`, with each export's largest difference from the module: on ``example``, ``mask``
    selecting the first output's entries that count) and ``extra_files``; ``also(tmp, doc)`` writes what else
    the folder holds (progress, plots, a predictor). All of it atomically (:func:`atomic_folder`). Returns the
    metadata written."""
    import torch

    net = net.eval()
    with torch.no_grad(), torchscript_quietly():
        scripted = torch.jit.script(net)
        err = _largest_difference(scripted(*example), net(*example), mask)
    doc = {k: v for k, v in meta.items() if k not in ("format", "format_version", "agent", "extra_files")}
    with atomic_folder(folder) as tmp:
        scripted.save(str(tmp / TORCHSCRIPT))
        doc |= {"export_max_abs_diff": err, "program_max_abs_diff": program_of(net, tmp / PROGRAM)}
        doc = write_metadata(tmp, agent, doc, extra_files)
        if also is not None:
            also(tmp, doc)
    return doc


_RECIPE: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("marlsched_recipe", default=None)


@contextlib.contextmanager
def training_recipe(agent: str, algo: str) -> Iterator[None]:
    """While ``marlsched train`` runs an agent's algorithm: the folders written record that agent (a spec of one's
    own that reuses another agent's loop writes its own kind, not the loop's) and a provenance config that names
    ``agent`` and ``algo``, so that it feeds back to ``marlsched train --config`` as it stands."""
    token = _RECIPE.set((agent, algo))
    try:
        yield
    finally:
        _RECIPE.reset(token)


def write_metadata(folder: Path, agent: str, meta: Mapping[str, Any], extra_files: Iterable[str] = ()) -> dict:
    """Write ``folder/metadata.json`` in the one schema of every policy folder: format, its version, the agent kind
    (the recipe's, inside :func:`training_recipe`), the kind's own keys (``meta``) and the provenance that rebuilds
    it; copy ``extra_files`` (progress, plots) beside it. Returns the document."""
    recipe = _RECIPE.get()
    if recipe is not None:
        agent = recipe[0]
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "agent": agent, **meta}
    doc["provenance"] = provenance(doc)
    (folder / METADATA).write_text(json.dumps(doc, indent=2) + "\n")
    for name in extra_files:
        src = Path(name)
        if src.is_file():
            (folder / src.name).write_bytes(src.read_bytes())
    return doc


def provenance(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What rebuilds a folder: the command and config that trained it (where the trainer keeps them), the code
    version and the versions of the libraries that computed it."""
    trained = meta.get("trained") or {}
    config = meta.get("config") or trained.get("config")
    recipe = _RECIPE.get()
    if recipe is not None and isinstance(config, Mapping):  # a config that `marlsched train --config` reads back
        rest = {k: v for k, v in config.items() if k not in ("agent", "algo")}
        config = {"agent": recipe[0], "algo": recipe[1], **rest}
    return {
        "command": meta.get("command") or trained.get("command"),
        "config": config,
        "code_version": code_version(),
        "libraries": library_versions(),
        "machine": machine(),
        **({"agent_package": pkg} if recipe is not None and (pkg := agent_package(recipe[0])) else {}),
    }


def agent_package(agent: str) -> str | None:
    """The installed package (``NAME VERSION``) that announces ``agent`` (None for marlsched's own): its decision
    code shapes every decision a folder of that agent makes."""
    from marl.agents import AGENTS, PACKAGES

    return PACKAGES.get(agent) if agent in AGENTS else None


@functools.cache
def code_version() -> str:
    """The git commit of this checkout (``+dirty`` with uncommitted changes or files git does not ignore and does
    not hold: a module of one's own), else the installed package version."""
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode == 0:
            dirty = subprocess.run(
                ["git", "-C", str(repo), "status", "--porcelain"],  # new files not yet added count too
                capture_output=True, text=True, timeout=5,
            ).stdout.strip()  # fmt: skip
            return head.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return f"marlsched {importlib.metadata.version('marlsched')}"
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.cache
def machine() -> str:
    """The CPU that computed a result: floating-point results (a fitted model, a network) can differ in their last
    digits between CPUs of other instruction sets with the same code, seed and library versions."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return f"{platform.machine()} {model or platform.processor()}".strip()


@functools.cache
def library_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("numpy", "torch", "torch_geometric", "ray"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "METADATA",
    "PROGRAM",
    "TORCHSCRIPT",
    "agent_package",
    "atomic_folder",
    "code_version",
    "library_versions",
    "load_network",
    "load_program",
    "load_torchscript",
    "machine",
    "network_file",
    "network_from_bytes",
    "not_a_policy_folder",
    "program_torch",
    "provenance",
    "read_json",
    "save_program",
    "write_metadata",
]
