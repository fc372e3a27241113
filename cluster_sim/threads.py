"""Thread counts of worker processes, set deliberately.

A Ray worker (a simulation task, an RLlib env runner, an actor) is given one CPU. NumPy's BLAS and
OpenMP would still start a thread per core in each, and with several workers per machine those threads
only contend: the ``pollux`` policy runs 2.5x slower that way on a busy 2-core machine. A local Ray started
by marlsched therefore starts its workers with one BLAS/OpenMP thread each; a value the user exported is
kept, and workers of a cluster the user started follow that cluster's environment.
"""

from __future__ import annotations

import os

WORKER_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def one_thread_per_worker() -> dict[str, str]:
    """Set the thread variables (unless set) so the workers of a Ray started next inherit them; returns them."""
    for var in WORKER_THREAD_VARS:
        os.environ.setdefault(var, "1")
    return {var: os.environ[var] for var in WORKER_THREAD_VARS}


__all__ = ["WORKER_THREAD_VARS", "one_thread_per_worker"]
