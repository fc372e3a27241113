"""``map`` over worker processes, or in this process when one worker is asked for.

The trainers play their windows in spawned processes (spawned, not forked: a trainer's process may hold Ray's
threads, which a fork would copy). With one worker a process only adds its start-up (importing torch and
the simulator, seconds) to the same result, so the windows play here instead.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor


@contextlib.contextmanager
def worker_map(workers: int) -> Iterator[Callable]:
    """A ``map`` whose calls run on ``workers`` spawned processes (in order, as ``map`` returns them), or
    the builtin ``map`` for ``workers <= 1``."""
    if workers <= 1:
        yield map
        return
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool.map


__all__ = ["worker_map"]
