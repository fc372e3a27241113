"""BLAS on one thread in a process that simulates.

A simulation's linear algebra is tiny (Pollux's seven-parameter fits, dot products of a few elements), and a
BLAS library's own threads only slow such calls down: they wake, split a few numbers and wait for each
other. Replaying 60 jobs of Sia's workload-1 on 2 cores, Sia ran 2.3 times and Pollux 1.9 times slower on
BLAS's default threads with the cores idle, 12 and 3.4 times with them busy, when this was written; at later
code and libraries about 1.2 and 1.0 times idle and 1.3 and 1.4 times busy
(``experiments/benchmarks/blas_threads.py``), with the same results. Ray's workers already run on one
thread (``OMP_NUM_THREADS=1``); this does the same for in-process runs (``marlsched simulate``, the Python
API, the benchmarks, environments sampled in a trainer's driver).

The setting is made once and kept for the process: changing a BLAS library's threads costs milliseconds,
more than a fit. It reaches the BLAS libraries NumPy and SciPy load, not torch's own threads. A program that
does large linear algebra after simulating can raise them again (``threadpoolctl.threadpool_limits``).
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def one_blas_thread() -> None:
    """Set every loaded BLAS library to one thread (once per process; later calls do nothing)."""
    import scipy.linalg  # noqa: F401  (loads SciPy's BLAS, so that it is found and set too)
    from threadpoolctl import ThreadpoolController

    ThreadpoolController().select(user_api="blas").limit(limits=1)


__all__ = ["one_blas_thread"]
