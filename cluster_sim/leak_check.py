"""Does a scheduler read the lengths of jobs it should not know? Checked by what it does, not by what it declares.

A scheduler that may not know job lengths (a real one: requests, tenant, wait, attained service, the history of
finished jobs) must never read ``view.jobs.duration`` or ``view.remaining_time(s)``; the protocol says so, and
nothing else stops it. :func:`check_length_leak` runs a scheduler twice on the same workload: once as it is, and
once seeing every job's length (and remaining time) multiplied by a seeded random factor, while the simulation
itself runs on the true lengths. A scheduler that never reads a length makes the same decisions, so every job
finishes at the same second, bit for bit; one that reads them decides otherwise somewhere. The run also notes
where the scheduler's code called ``remaining_time(s)``. The simulator's private state (``view._remaining`` and
the like) and a copy of the simulator (to play the future ahead, as ``lookahead-oracle`` does) hold the true
lengths where hiding cannot reach; a scheduler that reads either is counted as reading lengths, with where. It covers
the code the workload exercises: an elastic scheduler's resizing needs jobs that can resize (a ``pollux:``
workload), a learned policy its own cluster.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from cluster_sim.protocol import Decision, Scheduler, SimulationWarning

DEFAULT_CLUSTER = "small"
DEFAULT_WORKLOAD = "synthetic:600,window_load=1.2"  # queues on `small`: the order of waiting jobs matters
_ORACLE = frozenset({"remaining_time", "remaining_times"})


@dataclass(frozen=True)
class LeakReport:
    """The two runs compared: ``reads_lengths`` where any job finished at another time with lengths hidden."""

    scheduler: str
    workload: str
    jobs: int
    differing: int  # jobs whose completion time differs between the two runs
    first_job: int | None  # the first of them (by index), or None
    jct: tuple[float, float] | None  # that job's JCT with true and with hidden lengths
    oracle_calls: tuple[str, ...]  # where the scheduler's code called remaining_time(s): "file:line"
    most_waiting: int = 0  # the most jobs waiting at once where the scheduler was consulted
    # where it read the simulator's private state or copied the simulator: "file:line (what)"
    private_reads: tuple[str, ...] = ()

    @property
    def reads_lengths(self) -> bool:
        return self.differing > 0 or bool(self.private_reads)

    @property
    def inconclusive(self) -> bool:
        """No two jobs ever waited at once: no order was chosen, so a scheduler that ranks by length showed nothing."""
        return not self.reads_lengths and self.most_waiting < 2

    def __str__(self) -> str:
        head = f"{self.scheduler} on {self.workload} ({self.jobs} jobs)"
        if self.inconclusive:
            return (
                f"{head}: NOT CHECKED: at most {self.most_waiting} job waited at once, so the scheduler never chose an "
                "order; use a workload on which jobs wait (a higher load=, window_load= or more jobs)"
            )
        private = (
            f"it read the simulator's private state, which holds every job's true length and remaining work "
            f"({', '.join(self.private_reads)}): a scheduler reads the SchedulerView protocol only"
        )
        if not self.differing and self.private_reads:
            return f"{head}: READS JOB LENGTHS: {private}"
        if not self.reads_lengths:
            return (
                f"{head}: reads no job's length (every job finished at the same time with lengths hidden; up to "
                f"{self.most_waiting} jobs waited at once)"
            )
        where = (
            f"it called {', '.join(self.oracle_calls)}"
            if self.oracle_calls
            else "it never called remaining_time(s), so it reads jobs.duration (or the simulator's private state)"
        )
        a, b = self.jct or (float("nan"), float("nan"))
        return (
            f"{head}: READS JOB LENGTHS: with every length hidden behind a random factor, {self.differing} jobs "
            f"finished at other times (first: job {self.first_job}, JCT {a:.1f} s against {b:.1f} s); {where}"
            + (f"; {private}" if self.private_reads else "")
        )


class _HiddenLengths:
    """The simulator as a scheduler sees it, with every job's length and remaining time scaled by ``factor``."""

    def __init__(
        self, view: Any, jobs: Any, factor: np.ndarray, calls: dict[str, None], private: dict[str, None]
    ) -> None:
        self._view, self._jobs, self._factor, self._calls, self._private = view, jobs, factor, calls, private

    @property
    def jobs(self) -> Any:
        return self._jobs

    def remaining_time(self, job: int) -> float:
        self._note()
        return float(self._view.remaining_time(job)) * float(self._factor[job])

    def remaining_times(self, jobs: np.ndarray) -> np.ndarray:
        self._note()
        jobs = np.asarray(jobs, dtype=np.int64)
        return np.asarray(self._view.remaining_times(jobs), dtype=np.float64) * self._factor[jobs]

    def _note(self) -> None:
        self._calls.setdefault(_caller(sys._getframe(2)), None)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") and not name.startswith("__"):  # the simulator's own state, true lengths and all
            self._private.setdefault(f"{_caller(sys._getframe(1))} ({name})", None)
        return getattr(self._view, name)

    def __deepcopy__(self, memo: dict) -> Any:
        """A copy of the simulator, to play ahead: it runs on the true lengths, so the copy counts as reading them."""
        frame = sys._getframe(1)
        while frame.f_back is not None and frame.f_code.co_filename == copy.__file__:
            frame = frame.f_back
        self._private.setdefault(f"{_caller(frame)} (a copy of the simulator)", None)
        return copy.deepcopy(self._view, memo)


def _caller(frame: Any) -> str:
    """``file:line`` of ``frame``, relative to the working directory for a file under it."""
    path = os.path.relpath(frame.f_code.co_filename)
    path = frame.f_code.co_filename if path.startswith("..") else path
    return f"{path}:{frame.f_lineno}"


class _Hiding:
    """``scheduler`` handed :class:`_HiddenLengths` instead of the simulator; its traits read through."""

    def __init__(self, scheduler: Scheduler, factor: np.ndarray, calls: dict[str, None]) -> None:
        self._inner, self._factor, self._calls = scheduler, factor, calls
        self.private: dict[str, None] = {}
        self._seen: _HiddenLengths | None = None
        self.most_waiting = 0

    def _view(self, view: Any) -> _HiddenLengths:
        if self._seen is None or self._seen._view is not view:
            jobs = dataclasses.replace(view.jobs, duration=np.asarray(view.jobs.duration) * self._factor)
            self._seen = _HiddenLengths(view, jobs, self._factor, self._calls, self.private)
        return self._seen

    def reset(self, view: Any) -> None:
        self._inner.reset(self._view(view))

    def schedule(self, view: Any) -> list[Decision]:
        self.most_waiting = max(self.most_waiting, len(view.queue))
        return self._inner.schedule(self._view(view))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def check_length_leak(
    make: str | Callable[[], Scheduler],
    *,
    cluster: Any = DEFAULT_CLUSTER,
    workload: str = DEFAULT_WORKLOAD,
    seed: int = 0,
    **sim_options: Any,
) -> LeakReport:
    """Run the scheduler ``make`` names (a policy name or spec as ``get_policy`` takes it, ``marl:DIR`` included,
    or a function returning a fresh scheduler) with true and with hidden lengths; see the module docstring.
    ``sim_options`` go to :func:`cluster_sim.build.build_simulator`."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    def fresh() -> Scheduler:
        return get_policy(make, seed=seed) if isinstance(make, str) else make()

    with warnings.catch_warnings():  # the check compares decisions: what the runs' figures would mean is not asked
        warnings.simplefilter("ignore", SimulationWarning)
        sim = build_simulator(cluster, workload, seed=seed, **sim_options)
        plain = sim.run(fresh())
        factor = np.exp(np.random.default_rng(seed + 7).normal(0.0, 1.0, len(sim.jobs)))
        factor.flags.writeable = False
        calls: dict[str, None] = {}
        hiding = _Hiding(fresh(), factor, calls)
        hidden = sim.run(hiding)
    a, b = np.asarray(plain.jct), np.asarray(hidden.jct)
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    first = int(np.argmax(differ)) if differ.any() else None
    return LeakReport(
        scheduler=plain.scheduler,
        workload=str(sim.jobs.source),
        jobs=len(sim.jobs),
        differing=int(differ.sum()),
        first_job=first,
        jct=None if first is None else (float(a[first]), float(b[first])),
        oracle_calls=tuple(calls),
        most_waiting=hiding.most_waiting,
        private_reads=tuple(hiding.private),
    )
