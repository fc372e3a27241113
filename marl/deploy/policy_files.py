"""Reading the files of an exported policy folder, with errors that name the file and the fix.

A copied or half-synced policy folder is the usual way these files break (a truncated ``policy.pt``, a
``metadata.json`` cut mid-way); the loaders say which file, what is wrong with it and what to do, in one
line, instead of a deserialiser's traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def load_torchscript(path: str | Path):
    """A TorchScript module from ``path`` on the CPU; FileNotFoundError or ValueError naming the file."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; {FIX}")
    try:
        return torch.jit.load(str(path), map_location="cpu")
    except (RuntimeError, ValueError, EOFError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{path}: not a readable TorchScript policy ({reason[:160]}); {FIX}") from None


__all__ = ["load_torchscript", "read_json"]


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
