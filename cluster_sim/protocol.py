"""The scheduler protocol: what a scheduler sees at a scheduling point and what it may decide.

Every scheduler, heuristic or learned, speaks only this protocol, so they are compared on equal terms.
The simulator validates each decision and raises :class:`InvalidDecision` naming the job and GPUs of a
bad one instead of silently repairing it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from cluster_sim.workload import Workload
from topology.view import ClusterView


@dataclass(frozen=True, slots=True)
class Start:
    """Start (or resume) waiting job ``job`` on exactly ``gpus`` (free GPU ids).

    A rigid job starts on the GPU count it asked for; in an elastic simulation an elastic job may start on
    any count within :meth:`SchedulerView.gpu_range`. ``batch_size``: the global batch to train with (an
    elastic job's, within :meth:`SchedulerView.batch_range`); None keeps the job's current one.
    """

    job: int
    gpus: np.ndarray
    batch_size: int | None = None


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop running job ``job``; it keeps its progress and returns to the queue."""

    job: int


@dataclass(frozen=True, slots=True)
class Resize:
    """Move running job ``job`` to ``gpus``; it pays the restart cost again. Only an elastic job (in an
    elastic simulation) may change its GPU count or, with ``batch_size``, its batch size."""

    job: int
    gpus: np.ndarray
    batch_size: int | None = None


@dataclass(frozen=True, slots=True)
class SetBatch:
    """Change the global batch size of elastic job ``job`` in place (running or waiting), as AdaptDL does
    between steps: no restart, unless the simulation charges ``batch_change_cost``."""

    job: int
    batch_size: int


Decision = Start | Preempt | Resize | SetBatch


class InvalidDecision(ValueError):
    """A scheduler returned a decision the cluster cannot carry out."""


class SimulationWarning(UserWarning):
    """Something a reader of a simulation's figures should know (the command line prints it as one line, a
    `marlsched run` collects it from its tasks into the report)."""


class BurstWindowWarning(SimulationWarning):
    """A ``load=`` window whose few jobs were squeezed into one burst of arrivals: the run is mostly that burst's
    drain on a nearly idle cluster, not the load kept over time (:func:`cluster_sim.traces.window.burst_warning`)."""


class MixedGpuTypesWarning(SimulationWarning):
    """A scheduler that does not keep Sia's one-GPU-type rule ran jobs across several GPU types at once, where
    the built-in schedulers keep each job on one type: the comparison is under different rules."""


class ElasticPointsWarning(SimulationWarning):
    """An elastic scheduler that is consulted only where jobs wait (no ``wants_all_points``): between arrivals
    its running jobs keep their size, and its ``wake_at`` points pass without a call."""


class RigidWorkloadWarning(SimulationWarning):
    """An elastic scheduler (Pollux, Sia, AFS, ONES) on a workload none of whose jobs can resize: it runs as a
    scheduler of rigid jobs, not as published."""


class ThrashWarning(SimulationWarning):
    """A scheduler preempted jobs again and again before their restart had finished (no progress in between):
    it flips them between running and waiting, so its figures are those of a scheduler that thrashes."""


class PolicyClusterWarning(SimulationWarning):
    """A learned policy runs on a cluster other than the one it was trained on, or with co-location interference
    where it was trained without it (or the reverse): its figures may not hold there."""


@dataclass(frozen=True, slots=True)
class TrainedOn:
    """The cluster a learned policy was trained on: its name and GPUs per type (what tells two clusters apart),
    and the interference mode and data its training simulated (None: not recorded)."""

    name: str
    gpus: tuple[tuple[str, int], ...]
    interference: str | None = None
    interference_data: str | None = None

    @classmethod
    def of(cls, view: ClusterView) -> TrainedOn:
        counts = np.bincount(view.server_gpu_type, weights=view.server_num_gpus, minlength=len(view.gpu_types))
        return cls(view.name, tuple((t, int(n)) for t, n in zip(view.gpu_types, counts, strict=True) if n))

    def describe(self) -> str:
        return f"{self.name} ({', '.join(f'{n} {t}' for t, n in self.gpus)})"

    def mismatch(self, view: ClusterView) -> str | None:
        """Why ``view`` is not this cluster (other GPU types or counts; a name alone does not count), or None."""
        from topology.datacenter import CLUSTER_PRESETS

        here = TrainedOn.of(view)
        if dict(here.gpus) == dict(self.gpus):
            return None
        this = here.name if here.name in CLUSTER_PRESETS else f"this cluster's YAML file ({here.name})"
        return (
            f"trained on {self.describe()}, run on {here.describe()}: its figures hold for the cluster it was "
            f"trained on; for this one, train it again with its recorded config's cluster set to {this}"
        )

    def interference_mismatch(self, simulated: bool) -> str | None:
        """Why a simulation with (``simulated``) or without co-location interference is not what this policy was
        trained in, or None (the same, or not recorded)."""
        if self.interference is None or (self.interference != "none") == simulated:
            return None
        if simulated:
            return (
                "trained without co-location interference (interference none), simulated with it: its figures hold "
                "without; simulate it with --interference none (a run config: interference: none; Python: "
                "build_simulator(..., interference='none')) to compare as trained"
            )
        data = f" --interference-model {self.interference_data}" if self.interference_data else ""
        in_config = f", interference_data: {self.interference_data}" if self.interference_data else ""
        in_python = f", interference_data={self.interference_data!r}" if self.interference_data else ""
        return (
            f"trained with co-located jobs slowing each other (interference {self.interference}), simulated "
            f"without (interference none): its figures hold with them; simulate it with --interference "
            f"{self.interference}{data} (a run config: interference: {self.interference}{in_config}; Python: "
            f"build_simulator(..., interference={self.interference!r}{in_python})), as trained"
        )


@dataclass(frozen=True, slots=True)
class SchedulerTraits:
    """What a scheduler declares about itself (see :class:`Scheduler`); absent attributes are False (None)."""

    elastic: bool = False
    one_gpu_type: bool = False
    wants_all_points: bool = False
    trained_on: TrainedOn | None = None
    check_cluster: Callable[[ClusterView], None] | None = None


def traits_of(scheduler: object) -> SchedulerTraits:
    """The traits ``scheduler`` declares through its attributes."""
    return SchedulerTraits(
        elastic=bool(getattr(scheduler, "elastic", False)),
        one_gpu_type=bool(getattr(scheduler, "one_gpu_type", False)),
        wants_all_points=bool(getattr(scheduler, "wants_all_points", False)),
        trained_on=getattr(scheduler, "trained_on", None),
        check_cluster=getattr(scheduler, "check_cluster", None),
    )


def check_fits(scheduler: object, topo: ClusterView) -> None:
    """Raise ``ValueError`` (naming the fix) where ``scheduler`` declares it cannot run on ``topo`` (its
    ``check_cluster`` trait): asked by ``simulate`` and ``run`` before any simulation starts."""
    if (check := traits_of(scheduler).check_cluster) is not None:
        check(topo)


@dataclass(frozen=True, slots=True)
class JobReport:
    """Measurements an elastic job reports about itself (AdaptDL's profile and gradient statistics).

    ``profile`` maps (nodes, GPUs, per-GPU batch) to the (step, sync) seconds measured there, one entry per
    configuration the job has run on. ``grad_sqr``/``grad_var``: the gradient's squared norm and variance
    at its current batch and epoch. ``app``: the application's static facts (batch limits, initial batch).
    ``progress``: the statistical progress made so far, in steps of the application's smallest batch (what
    an AdaptDL job counts); how much it needs in all is not reported.
    """

    profile: dict[tuple[int, int, int], tuple[float, float]]
    grad_sqr: float
    grad_var: float
    app: object
    progress: float = 0.0


# job states (SchedulerView.job_state, ClusterStateView.job_states)
WAITING_ARRIVAL, QUEUED, RUNNING, DONE = 0, 1, 2, 3


@runtime_checkable
class SchedulerView(Protocol):
    """Read-only state at a scheduling point. The simulator itself implements it (no copies).

    Arrays are read-only numpy views. ``jobs.duration`` and :meth:`remaining_time` are oracle facts:
    schedulers that claim not to know job durations (FIFO, Tiresias, Gandiva, DRF, the MARL agents) must
    not read them.
    """

    now: float
    topo: ClusterView
    jobs: Workload
    gpu_job: np.ndarray  # (G,) int32: job holding each GPU, -1 when free
    server_free: np.ndarray  # (S,) int32: free GPUs per server
    num_free: int

    @property
    def queue(self) -> np.ndarray:
        """Waiting jobs (new and preempted), in order of (re)entry to the queue: a read-only int64 array."""
        ...

    @property
    def running(self) -> np.ndarray:
        """Running jobs, in order of start: a read-only int64 array."""
        ...

    def placement(self, job: int) -> np.ndarray:
        """GPUs held by a running job."""
        ...

    def job_state(self, job: int) -> int:
        """0 not arrived, 1 queued, 2 running, 3 done (:data:`RUNNING`, :data:`DONE`, ...)."""
        ...

    @property
    def job_gpus_held(self) -> np.ndarray:
        """(N,) GPUs each job holds now (0 unless running): a read-only array."""
        ...

    def attained_service(self, job: int) -> float:
        """GPU-seconds the job has held GPUs so far (Tiresias' 2D-LAS metric)."""
        ...

    def executed_time(self, job: int) -> float:
        """Wall seconds the job has held GPUs so far."""
        ...

    def executed_times(self, jobs: np.ndarray) -> np.ndarray:
        """:meth:`executed_time` of many jobs at once."""
        ...

    def remaining_time(self, job: int) -> float:
        """Oracle: seconds the job still needs at the reference placement (its trace's run time left)."""
        ...

    def remaining_times(self, jobs: np.ndarray) -> np.ndarray:
        """Oracle: :meth:`remaining_time` of many jobs at once."""
        ...

    def estimated_speed(self, job: int, gpus: np.ndarray) -> float:
        """Performance-model speed of ``job`` on ``gpus`` relative to the reference placement (no interference)."""
        ...

    def wake_at(self, time: float) -> None:
        """Ask for an extra scheduling point at ``time`` (e.g. a Tiresias queue demotion)."""
        ...

    # -- elastic jobs: limits a user states and figures a running job reports (no oracle) ----------------
    elastic: bool  # whether elastic jobs may change GPU count and batch size in this simulation

    def application(self, job: int):
        """The measured application ``job`` trains (its step times and gradient statistics, as profiled
        offline), or None for a job whose work is a duration."""
        ...

    def is_elastic(self, job: int) -> bool:
        """Whether ``job`` may change its GPU count and batch size (it trains a measured application)."""
        ...

    def gpu_range(self, job: int) -> tuple[int, int]:
        """GPU counts ``job`` may run on (its request twice for a rigid job)."""
        ...

    def batch_range(self, job: int, gpus: int) -> tuple[int, int]:
        """Global batch sizes elastic ``job`` may use on ``gpus`` GPUs."""
        ...

    def batch_size(self, job: int) -> int:
        """The global batch size ``job`` trains with now."""
        ...

    def job_report(self, job: int):
        """What an elastic job's training loop has measured (a :class:`JobReport`), or None: step times
        on the configurations it ran on and its current gradient statistics, as AdaptDL reports them."""
        ...


@runtime_checkable
class ClusterStateView(SchedulerView, Protocol):
    """What a scheduler that keeps its own state across scheduling points reads besides
    :class:`SchedulerView` (the MARL coordinator): counters to learn what changed since it last looked,
    and per-job arrays instead of per-job calls. The simulator implements it."""

    @property
    def num_arrived(self) -> int:
        """Jobs that have arrived so far; they are jobs ``0 .. num_arrived - 1`` (arrival order)."""
        ...

    @property
    def num_completed(self) -> int:
        """Jobs that have finished so far."""
        ...

    def completed_since(self, count: int) -> list[int]:
        """The jobs that finished after the first ``count`` completions, in the order they finished."""
        ...

    @property
    def job_states(self) -> np.ndarray:
        """(N,) per job: 0 not arrived, 1 queued, 2 running, 3 done (read-only)."""
        ...

    @property
    def job_factor(self) -> np.ndarray:
        """(N,) each job's current interference throughput factor, 1.0 when nothing slows it (read-only)."""
        ...

    def attained_services(self, jobs: np.ndarray) -> np.ndarray:
        """:meth:`SchedulerView.attained_service` of many jobs at once."""
        ...

    def uplink_jobs(self, rack: int) -> int:
        """Running jobs whose traffic crosses ``rack``'s uplink (jobs spanning several racks)."""
        ...


@runtime_checkable
class Scheduler(Protocol):
    """Decides at each scheduling point (arrival, completion, requested wake-up).

    A scheduler may declare traits as attributes (read by :func:`traits_of`, the one place the simulator reads
    them): ``elastic`` (its jobs resize; the simulation runs elastic jobs), ``one_gpu_type`` (a job runs on
    one GPU type at a time), ``wants_all_points`` (it is consulted at every event, not only where jobs wait),
    ``trained_on`` (a :class:`TrainedOn`: the simulation warns where it runs on another cluster),
    ``check_cluster(topo)`` (raises ``ValueError`` naming the fix on a cluster it cannot run on: a policy of
    per-partition agents whose count does not divide the racks) and ``round_seconds`` (its own per-round decision
    times, for a policy that decides once a round).
    """

    name: str

    def reset(self, view: SchedulerView) -> None:
        """Called once before the first event; clears any state from a previous run."""
        ...

    def schedule(self, view: SchedulerView) -> list[Decision]: ...


PROTOCOL_HINT = (
    "a scheduler has `name`, `reset(view)` and `schedule(view) -> list[Decision]`, or is one function "
    "`fn(view) -> list[Decision]` (FunctionScheduler(fn); cluster_sim/protocol.py)"
)


class FunctionScheduler:
    """A scheduler that is one function, ``fn(view) -> list[Decision]``, called at every scheduling point (the
    one-call form of the Pollux simulator's policies): for a rule that keeps no state between points."""

    def __init__(self, fn: Callable[[SchedulerView], list[Decision]], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"FunctionScheduler takes a function fn(view) -> list[Decision], got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "function").replace("_", "-")

    def reset(self, view: SchedulerView) -> None:
        """Nothing to forget: the function keeps no state."""

    def schedule(self, view: SchedulerView) -> list[Decision]:
        return self.fn(view)


def check_scheduler(scheduler: object) -> None:
    """Raise TypeError naming what ``scheduler`` lacks of the protocol, before a run rather than at its first use."""
    missing = [m for m in ("reset", "schedule") if not callable(getattr(scheduler, m, None))]
    if not isinstance(getattr(scheduler, "name", None), str):
        missing.insert(0, "`name` string")
    if missing:
        what = f"{type(scheduler).__name__} does not speak the scheduler protocol (no {', '.join(missing)})"
        raise TypeError(f"{what}; {PROTOCOL_HINT}")
