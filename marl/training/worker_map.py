"""``map`` over worker processes, or in this process when one worker is asked for.

The trainers play their windows in spawned processes (spawned, not forked: a trainer's process may hold Ray's
threads, which a fork would copy). With one worker a process only adds its start-up (importing torch and
the simulator, seconds) to the same result, so the windows play here instead.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any


class WorkerPool:
    """``workers`` spawned processes kept for a trainer's life (each imports the plugins this process imported,
    then runs ``initializer``), or this process for ``workers <= 1`` (``initializer`` is for worker processes
    only: it is not run here)."""

    def __init__(self, workers: int, initializer: Callable[[], None] | None = None) -> None:
        from cluster_sim.plugins import loaded_plugins

        self.workers = int(workers)
        start = functools.partial(_start_worker, loaded_plugins(), initializer, warnings.formatwarning)
        self._pool = (
            ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"), initializer=start)
            if self.workers > 1
            else None
        )

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any]) -> Iterator[Any]:
        """``fn`` over the items, results in order, as the builtin ``map`` returns them."""
        if self._pool is None:
            return map(fn, *iterables)
        with _ctrl_c_ignored():  # the processes this call starts inherit it: Ctrl-C is the trainer's to handle
            return self._pool.map(fn, *iterables)

    def close(self) -> None:
        """Stop the processes; calls not started yet are cancelled. Closed while Ctrl-C stops the trainer, the
        processes are ended at once instead of finishing the windows they play."""
        if self._pool is None:
            return
        if isinstance(sys.exc_info()[1], KeyboardInterrupt):
            for process in list((self._pool._processes or {}).values()):
                process.terminate()
            self._pool.shutdown(wait=False, cancel_futures=True)
            return
        self._pool.shutdown(cancel_futures=True)


@contextlib.contextmanager
def _ctrl_c_ignored() -> Iterator[None]:
    """SIGINT ignored while the block starts processes: Python leaves a signal its parent ignored ignored, so
    Ctrl-C in the terminal (sent to the whole process group) reaches the trainer alone, even while a process
    is still starting. Only the main thread may set handlers; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _start_worker(
    plugins: list[str], initializer: Callable[[], None] | None, formatwarning: Callable[..., str] | None = None
) -> None:
    """A spawned worker's start: its parent's way of printing warnings (the command's one line), the plugins it
    imported (their workload kinds, schedulers), then ``initializer``."""
    from cluster_sim.plugins import load_plugins

    if formatwarning is not None:
        warnings.formatwarning = formatwarning
    load_plugins(plugins)
    if initializer is not None:
        initializer()


@contextlib.contextmanager
def worker_map(workers: int) -> Iterator[Callable]:
    """A ``map`` whose calls run on ``workers`` spawned processes (in order, as ``map`` returns them), or
    the builtin ``map`` for ``workers <= 1``."""
    pool = WorkerPool(workers)
    try:
        yield pool.map
    finally:
        pool.close()


__all__ = ["WorkerPool", "worker_map"]
