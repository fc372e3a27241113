"""Output that native solvers print past Python: HiGHS's MIP solver (Sia's allocation) writes debugging lines
such as ``HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();`` straight to file
descriptor 1, into a command's results table, whatever its options say."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """File descriptor 1 sent to the null device meanwhile; Python's own output is flushed before and after."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 (a daemon): nothing to keep clean
        yield
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
