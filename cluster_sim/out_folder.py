"""One command at a time per output folder.

Two commands writing one folder at once would both run the same work and interleave their files. Each
command that writes a folder holds an exclusive ``flock`` on ``FOLDER/.lock`` while it runs; a second one
is refused at once, naming the holder. The operating system releases the lock when the holder exits,
however it exits (SIGKILL included), so a stale lock file never blocks anyone; a command that ends normally
leaves the file empty (the file itself stays: removing it would let two commands lock two different files).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".lock"


class FolderInUse(ValueError):
    """Another command holds the folder."""


@contextmanager
def folder_lock(folder: str | Path, command: str) -> Iterator[Path]:
    """Create ``folder`` if needed and hold it for ``command`` (a name for the message) until the block ends."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise FolderInUse(
                f"{folder} is being written by {holder}; wait for it to finish or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"marlsched {command} (pid {os.getpid()})\n".encode(), 0)
        try:
            yield folder
        finally:
            os.ftruncate(fd, 0)  # still held: the file no longer names a process that has ended
    finally:
        os.close(fd)  # closing the descriptor releases the lock


__all__ = ["FolderInUse", "folder_lock"]
