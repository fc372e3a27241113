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


def check_out_folder(folder: str | Path, flag: str = "--out") -> Path:
    """``folder`` as a place to write into: refused in one line where a file of that name exists or the folder
    cannot be created, before any work starts."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{flag} {folder} is a file; name a folder (a new one, or one this command wrote before)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"{flag} {folder}: cannot create the folder ({err.strerror}); choose another {flag}") from None
    return folder


@contextmanager
def folder_lock(folder: str | Path, command: str, scratch: tuple[str, ...] = ()) -> Iterator[Path]:
    """Create ``folder`` if needed and hold it for ``command`` (a name for the message) until the block ends.

    A block that fails leaves no trace of itself: the lock file it created is removed, and a folder it created
    is removed too where nothing but ``scratch`` (files the command writes before any result, e.g. its copy of
    the config) was written into it."""
    folder = Path(folder)
    created = not folder.exists()
    check_out_folder(folder)
    path = folder / LOCK_FILE
    new_lock = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    failed = False
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
        except BaseException:
            failed = True
            raise
        finally:
            os.ftruncate(fd, 0)  # still held: the file no longer names a process that has ended
            if failed and new_lock:
                _tidy(folder, created, scratch)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _tidy(folder: Path, created: bool, scratch: tuple[str, ...]) -> None:
    """After a failed block: the lock file it created goes; a folder it created goes where only ``scratch`` is
    left in it."""
    (folder / LOCK_FILE).unlink(missing_ok=True)
    if created and all(entry.name in scratch and entry.is_file() for entry in folder.iterdir()):
        for entry in folder.iterdir():
            entry.unlink()
        folder.rmdir()


__all__ = ["FolderInUse", "check_out_folder", "folder_lock"]
