"""Event-driven cluster simulator.

Between two events every running job progresses at a constant speed, so progress is integrated exactly
and lazily: a job's remaining work is settled only when its speed changes (it starts, stops, is resized,
or a job it shares a server or an uplink with comes or goes). Completions sit in a heap keyed by time
with a per-job version number, so a superseded completion is skipped rather than searched for.

The simulator is also the :class:`~cluster_sim.protocol.SchedulerView` that schedulers read: arrays are
exposed as read-only numpy views, nothing is copied per scheduling point.

Work is measured in seconds at speed 1, the speed of the job at the performance model's reference placement
(V100s in DGX-class servers, the same on every cluster), so a job placed so with no interference runs exactly as
long as its trace duration. A job of a measured
application (Pollux's, :mod:`cluster_sim.pollux_apps`) counts its work in statistical progress instead:
it runs at ``gain(batch, epoch) / iteration time(placement, batch)`` progress per second, a rate that
changes at each epoch boundary (an event) and with its batch size, so it can grow, shrink and change its
batch size while it trains (``elastic=True``) and its work stays exact. Such a job trains its application for
its epochs as measured (Pollux's workloads), or, for a duration trace given applications (``apps=``,
:mod:`cluster_sim.traces.elastic_apps`), on a dataset scaled so that its requested GPUs, placed as tightly
as this cluster allows at its batch size, take its ``duration`` (every epoch's progress times ``duration /
ideal duration``).
"""

from __future__ import annotations

import copy
import heapq
import math
import sys
import time as _time
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from cluster_sim.blas_threads import one_blas_thread
from cluster_sim.gpu_profiles import CALIBRATION_SLOWDOWN, RESTART_COST
from cluster_sim.job_descriptors import DescriptorCache
from cluster_sim.model_zoo import MODEL_NAMES, model_index
from cluster_sim.ordered_ids import OrderedIds
from cluster_sim.perf_fit import REFERENCE_GPU
from cluster_sim.placement import FreeCounts
from cluster_sim.pollux_apps import consolidated
from cluster_sim.protocol import (
    DONE,
    QUEUED,
    RUNNING,
    WAITING_ARRIVAL,
    Decision,
    ElasticPointsWarning,
    InvalidDecision,
    JobReport,
    MixedGpuTypesWarning,
    PolicyClusterWarning,
    Preempt,
    Resize,
    Scheduler,
    SetBatch,
    Start,
    ThrashWarning,
    check_scheduler,
    traits_of,
)
from cluster_sim.results import SimResult
from cluster_sim.workload import Workload
from interference.base import InterferenceModel, NoInterference, Sharing
from interference.queries import KeyedFactors
from topology.view import FEW_GPUS, ClusterView, Level, index_lists

# jobs spanning pods or more share rack/pod uplinks; a plain int because Enum attribute lookups are slow
_POD = int(Level.POD)

_COMPLETION, _WAKEUP, _EPOCH = 0, 1, 2
_GPU, _SERVER = int(Sharing.GPU), int(Sharing.SERVER)
_COMPACT_MIN = 4096  # heap entries below which superseded ones are left to lazy deletion
THRASH = 50  # preemptions of one job inside its restart stall from which a run is said to thrash (Tiresias, whose
# starving jobs are promoted and preempted again, reaches 23 on the Philly window 2017-11-07..09 at load 0.9)
IDLE_ROUNDS = 10_000  # rounds without a decision on an idle cluster, every job arrived, before a run is stalled


def _readonly(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


class SimulationStalled(RuntimeError):
    """A run that cannot finish: jobs wait on an idle cluster and the scheduler starts none of them. It is the
    scheduler's failure on this workload (a job it cannot place), so ``simulate`` reports it and runs the others."""


class Simulator:
    """Replays a workload on a cluster under one scheduler.

    ``perf`` maps a placement to a speed (a :class:`cluster_sim.perf_model.PerformanceModel`); without it
    every placement runs at speed 1. ``interference`` slows down jobs that share a server (or a GPU).
    ``restart_cost`` is the number of seconds a resumed or resized job holds its GPUs before it makes
    progress again (checkpoint restore, process start-up); ``start_cost`` the same for a job's first start
    (Pollux's simulator charges 30 s on every allocation, the first included).

    ``gpu_sharing`` lets two single-GPU jobs share one GPU (space sharing, as Gandiva and Lucid do): a
    1-GPU job may start on a GPU held by a running 1-GPU job with no other guest. The two then slow each
    other down by the interference model's GPU level, so sharing needs one (``interference`` not none).
    ``gpu_job`` keeps the first tenant, ``gpu_guest`` the second; when the first leaves, the guest
    becomes the GPU's holder.

    ``elastic`` lets jobs of measured applications start on any GPU count in their range (1 GPU up to
    the largest batch over the smallest per-GPU batch), be resized to another count (paying
    ``restart_cost``) and change their batch size (:class:`~cluster_sim.protocol.SetBatch`, paying
    ``batch_change_cost``, 0 by default: AdaptDL changes it between steps without a restart). Other jobs
    stay rigid. ``elastic=None`` (the default) makes a run elastic when its scheduler asks for it (an
    ``elastic = True`` attribute, as ``pollux`` has), so rigid and elastic schedulers share one setup.

    On a cluster of several GPU types a job runs on one type at a time (Sia's rule; a decision that mixes
    types is refused) unless ``mix_gpu_types``. ``None`` (the default) holds jobs to one type when the
    scheduler keeps that rule (``one_gpu_type = True``: the elastic policies, ``sia``, ``gavel``) and lets
    the rigid heuristics' placements, which do not look at types, mix them. A job of an application
    profiled per type runs at that type's measured step times, its per-GPU batch held to that type's memory.
    ``app_restart_costs`` charges
    each application's own restart cost (:data:`cluster_sim.gpu_profiles.RESTART_COST`, Sia's) on every
    allocation, the first included, instead of ``start_cost``/``restart_cost``; ``calibration`` divides its
    progress rate by Sia's calibration slowdown (:data:`cluster_sim.gpu_profiles.CALIBRATION_SLOWDOWN`).
    """

    def __init__(
        self,
        view: ClusterView,
        workload: Workload,
        *,
        perf=None,
        interference: InterferenceModel | None = None,
        restart_cost: float = 0.0,
        record_timeline: bool = True,
        record_history: bool = False,
        gpu_sharing: bool = False,
        start_cost: float = 0.0,
        elastic: bool | None = None,
        batch_change_cost: float = 0.0,
        mix_gpu_types: bool | None = None,
        app_restart_costs: bool = False,
        calibration: bool = False,
    ) -> None:
        if gpu_sharing and (interference is None or isinstance(interference, NoInterference)):
            raise ValueError(
                "gpu_sharing needs an interference model (jobs sharing a GPU slow each other down); "
                "give --interference oracle (with Gavel's tables: --interference-model gavel:PATH) or learned (a "
                "run config: interference: oracle; Python: build_simulator(..., interference='oracle'))"
            )
        self.gpu_sharing = bool(gpu_sharing)
        if restart_cost < 0:
            raise ValueError(f"restart_cost must be >= 0 seconds, got {restart_cost}")
        if start_cost < 0:
            raise ValueError(f"start_cost must be >= 0 seconds, got {start_cost}")
        self.start_cost = float(start_cost)
        if batch_change_cost < 0:
            raise ValueError(f"batch_change_cost must be >= 0 seconds, got {batch_change_cost}")
        self.batch_change_cost = float(batch_change_cost)
        self._elastic_setting = elastic
        self.elastic = bool(elastic)
        self._mix_setting = mix_gpu_types
        self._scheduler_name = "the scheduler"  # the one start() was given, named in a stall
        self._mixed_jobs: set[int] | None = None
        self.mix_gpu_types = mix_gpu_types is None or bool(mix_gpu_types) or len(view.gpu_types) == 1
        self.app_restart_costs = bool(app_restart_costs)
        self.calibration = bool(calibration)
        too_big = np.flatnonzero(workload.num_gpus > view.num_gpus)
        if len(too_big):
            j = int(too_big[0])
            raise ValueError(
                f"{len(too_big)} job(s) ask for more GPUs than cluster {view.name!r} has ({view.num_gpus}), the "
                f"first (job {j} in arrival order) {int(workload.num_gpus[j])}; use a larger cluster or drop such "
                f"jobs: a workload spec's ,max_gpus={view.num_gpus} does"
            )
        self.topo = view
        self.jobs = workload
        self.perf = perf
        self._uniform_perf = bool(getattr(perf, "uniform", False))  # see PerformanceModel.uniform
        self.interference = interference if interference is not None else NoInterference()
        self._interfere = not isinstance(self.interference, NoInterference)
        self.restart_cost = float(restart_cost)
        self.record_timeline = record_timeline
        self.record_history = record_history
        # model ids as the performance model knows them (the workload may list models in any order)
        self._model = np.array([model_index(m) for m in workload.models], dtype=np.int32)[workload.model]
        self._descriptors = DescriptorCache(workload, view, perf) if self._interfere else None
        # co-locations as integer keys (memoised for pure models); each running job's descriptor code
        self._keyed = KeyedFactors(self.interference) if self._interfere else None
        self._desc_code = [-1] * len(workload)
        # jobs of measured applications: work in statistical progress (see the module docstring)
        find_app = getattr(perf, "application", None)
        used = set(np.unique(self._model).tolist())
        apps = (
            [find_app(m) if m in used else None for m in range(int(self._model.max()) + 1)]
            if find_app and len(workload)
            else []
        )
        apps += [None] * (int(self._model.max(initial=-1)) + 1 - len(apps))
        self._apps = [a for a in apps if a is not None]
        index = {id(a): i for i, a in enumerate(self._apps)}
        self._app = np.array([index[id(apps[m])] if apps[m] is not None else -1 for m in self._model], dtype=np.int32)
        self._per_node = int(view.server_num_gpus.max())  # GPUs of the tightest node: the ideal placement
        # each application job's dataset scale: its epochs hold this many times the application's progress
        self._scale = np.ones(len(workload))
        scaled = np.flatnonzero(self._app >= 0) if workload.meta.get("app_lengths") == "duration" else []
        for j in np.asarray(scaled).tolist():
            app = self._apps[int(self._app[j])]
            ideal = app.ideal_duration(int(workload.batch_size[j]), int(workload.num_gpus[j]), self._per_node)
            self._scale[j] = float(workload.duration[j]) / ideal
        # per job: seconds a (re)allocation stalls it, and its calibration slowdown (1: none)
        self._start_stall = np.full(len(workload), self.start_cost)
        self._restart_stall = np.full(len(workload), self.restart_cost)
        self._calibration = np.ones(len(workload))
        for j in np.flatnonzero(self._app >= 0).tolist():
            name = self._apps[int(self._app[j])].name
            if self.app_restart_costs and name in RESTART_COST:
                self._start_stall[j] = self._restart_stall[j] = RESTART_COST[name]
            if self.calibration:
                self._calibration[j] = CALIBRATION_SLOWDOWN.get(name, 1.0)
        self._max_gpus = np.array(
            [
                min(view.num_gpus, a.max_batch_size // a.min_local_bsz) if (a := self.application(j)) else 0
                for j in range(len(workload))
            ],
            dtype=np.int64,
        )
        self.reset()

    def __deepcopy__(self, memo: dict) -> Simulator:
        """An independent copy that runs on from the same point (look-ahead references clone the simulator).
        A plain deep copy would detach the read-only views from the arrays they show; they are re-made."""
        new = object.__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            setattr(new, key, copy.deepcopy(value, memo))
        new.gpu_job, new.gpu_guest = _readonly(new._gpu_job), _readonly(new._gpu_guest)
        new.server_free = _readonly(new._server_free)
        new.free_counts.gpu_job = new.gpu_job
        return new

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        n, g, s = len(self.jobs), self.topo.num_gpus, self.topo.num_servers
        self.now = 0.0
        self._gpu_job = np.full(g, -1, dtype=np.int32)
        self._gpu_guest = np.full(g, -1, dtype=np.int32)  # second tenant of a shared GPU (gpu_sharing)
        self.gpu_guest = _readonly(self._gpu_guest)
        self._server_free = self.topo.server_num_gpus.astype(np.int32).copy()
        self.gpu_job = _readonly(self._gpu_job)
        self.server_free = _readonly(self._server_free)
        self.free_counts = FreeCounts(self.topo, self._server_free, self.gpu_job)  # lent to each round's FreePool
        self.num_free = g
        self._state = np.zeros(n, dtype=np.int8)
        self._idle_rounds = 0  # consecutive rounds that decided nothing while jobs waited and none ran
        self._num_jobs = n
        self._remaining = self.jobs.duration.astype(np.float64).copy()
        for a, app in enumerate(self._apps):
            mine = self._app == a
            self._remaining[mine] = self._scale[mine] * app.total_progress
        self._batch = self.jobs.batch_size.astype(np.int64).copy()
        self._epoch = np.zeros(n, dtype=np.int64)
        self._held = np.zeros(n, dtype=np.int64)  # GPUs held now (while running)
        self._resizes = np.zeros(n, dtype=np.int32)
        self._restarts = np.zeros(n, dtype=np.int32)  # allocations after the first (resumes, moves, resizes)
        self._attained_by_type = np.zeros((n, len(self.topo.gpu_types)))  # GPU-seconds held per GPU type
        self._gpu_type = self.topo.server_gpu_type[self.topo.gpu_server].astype(np.int64)
        self._round_seconds: list[float] = []  # the scheduler's time per call
        self._active_integral = 0.0  # ∫ (queued + running jobs) dt
        self._profiles: dict[int, dict[tuple[int, int, int], tuple[float, float]]] = {}
        self._speed = np.zeros(n)
        self._factor = np.ones(n)  # interference throughput factor
        self._settled_at = np.zeros(n)
        self._stall_until = np.zeros(n)
        self._run_start = np.zeros(n)
        self._executed = np.zeros(n)
        self._attained = np.zeros(n)
        self._first_start = np.full(n, np.nan)
        self._end = np.full(n, np.nan)
        self._span = np.full(n, -1, dtype=np.int8)
        self._preemptions = np.zeros(n, dtype=np.int32)
        self._cut_short = np.zeros(n, dtype=np.int32)  # preemptions before the (re)start's stall had ended
        self._slow_time = np.zeros(n)  # ∫ (1 - interference factor) dt while running
        self._version = np.zeros(n, dtype=np.int64)
        self._placement: dict[int, np.ndarray] = {}
        self._servers_of: dict[int, dict[int, int]] = {}  # running job -> {server: GPUs held there}
        self._uplinks_of: dict[int, tuple[list[int], list[int]]] = {}  # running multi-rack job -> (racks, pods)
        self._speed_memo: dict[int, dict[int, float]] = {}  # running job -> {uplink sharers: model speed}
        # on a uniform cluster, jobs of one (model, batch, GPUs, span level) share that memo
        self._class_memo: dict[tuple[int, int, int, int], dict[int, float]] = {}
        self._queue = OrderedIds(n)
        self._running = OrderedIds(n)
        self._server_jobs: list[dict[int, None]] = [{} for _ in range(s)] if self._interfere else []
        self._rack_uplink: dict[int, dict[int, None]] = {}  # rack -> jobs whose traffic leaves the rack
        self._pod_uplink: dict[int, dict[int, None]] = {}
        # their sizes as plain lists, and per running multi-rack job the size of its busiest uplink, kept
        # up to date at each join and leave so that only jobs whose count changed are refreshed
        self._rack_load = [0] * self.topo.num_racks
        self._pod_load = [0] * self.topo.num_pods
        self._sharers = [1] * n
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._compact_at = _COMPACT_MIN  # heap size at which superseded entries are dropped in one pass
        self._seq = 0
        self._next_arrival = 0
        self._wakeups: set[float] = set()
        self._done = 0
        self._completed: list[int] = []  # in completion order
        self.events = 0
        self.decisions = 0
        self.scheduler_seconds = 0.0
        # fragmentation: free GPUs on servers that are neither empty nor full, integrated over time
        self._partial_free = 0
        self._busy_integral = 0.0
        self._frag_integral = 0.0
        self._last_t = 0.0
        self._tl_t: list[float] = []
        self._tl_busy: list[int] = []
        self._tl_queue: list[int] = []
        # (time, "start" | "stop", job, GPUs): every placement change, for audits and replays
        self.history: list[tuple[float, str, int, np.ndarray]] = []

    # -------------------------------------------------------- SchedulerView
    @property
    def queue(self) -> np.ndarray:
        return self._queue.array()

    @property
    def running(self) -> np.ndarray:
        return self._running.array()

    @property
    def num_queued(self) -> int:
        return len(self._queue)

    def placement(self, job: int) -> np.ndarray:
        return self._placement[job]

    def executed_time(self, job: int) -> float:
        if self._state[job] == RUNNING:
            return float(self._executed[job] + self.now - self._run_start[job])
        return float(self._executed[job])

    def attained_service(self, job: int) -> float:
        if self._state[job] == RUNNING:
            return float(self._attained[job] + len(self._placement[job]) * (self.now - self._run_start[job]))
        return float(self._attained[job])

    def _work_left(self, job: int) -> float:
        """Remaining work now (seconds at speed 1, or statistical progress), settled or not."""
        rem = float(self._remaining[job])
        if self._state[job] == RUNNING:
            progressing = max(0.0, self.now - max(self._settled_at[job], self._stall_until[job]))
            rem = max(0.0, rem - self._speed[job] * progressing)
        return rem

    def remaining_time(self, job: int) -> float:
        rem = self._work_left(job)
        app = self.app_on_type(job)
        if app is None or self._state[job] == DONE:
            return rem
        # seconds at the job's batch size on its GPU count placed tightly (its request while it waits)
        gpus = int(self._held[job]) if self._state[job] == RUNNING else int(self.jobs.num_gpus[job])
        epoch, scale = int(self._epoch[job]), float(self._scale[job])
        return scale * app.seconds_left(
            consolidated(gpus, self._per_node), int(self._batch[job]), epoch, app.total_progress - rem / scale
        )

    def executed_times(self, jobs: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`executed_time`."""
        jobs = np.asarray(jobs, dtype=np.int64)
        running = self._state[jobs] == RUNNING
        return self._executed[jobs] + np.where(running, self.now - self._run_start[jobs], 0.0)

    def remaining_times(self, jobs: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`remaining_time` (an oracle)."""
        jobs = np.asarray(jobs, dtype=np.int64)
        if self._apps and (self._app[jobs] >= 0).any():
            return np.array([self.remaining_time(int(j)) for j in jobs.tolist()], dtype=np.float64)
        running = self._state[jobs] == RUNNING
        begin = np.maximum(self._settled_at[jobs], self._stall_until[jobs])
        progressing = np.where(running, np.maximum(0.0, self.now - begin), 0.0)
        return np.maximum(0.0, self._remaining[jobs] - self._speed[jobs] * progressing)

    def estimated_speed(self, job: int, gpus: np.ndarray) -> float:
        if self.perf is None:
            return 1.0
        return float(self.perf.speed(int(self._model[job]), int(self._batch[job]), gpus))

    def wake_at(self, time: float) -> None:
        if time > self.now and time not in self._wakeups and math.isfinite(time):
            self._wakeups.add(time)
            self._push(time, _WAKEUP, -1, 0)

    def job_state(self, job: int) -> int:
        return int(self._state[job])

    # -------------------------------------------------------------- elastic jobs
    def application(self, job: int):
        """The measured application ``job`` trains (:class:`~cluster_sim.pollux_apps.PolluxApplication`),
        or None for a job whose work is a duration."""
        a = int(self._app[job]) if len(self._app) else -1
        return self._apps[a] if a >= 0 else None

    def is_elastic(self, job: int) -> bool:
        rigid = self.jobs.rigid
        return self.elastic and int(self._app[job]) >= 0 and not (rigid is not None and rigid[job])

    def gpu_range(self, job: int) -> tuple[int, int]:
        if self.is_elastic(job):
            return 1, int(self._max_gpus[job])
        n = int(self.jobs.num_gpus[job])
        return n, n

    def batch_range(self, job: int, gpus: int) -> tuple[int, int]:
        app = self.application(job)
        if app is None or not self.elastic:
            b = int(self._batch[job])
            return b, b
        return app.batch_range(gpus)

    def batch_size(self, job: int) -> int:
        return int(self._batch[job])

    def job_report(self, job: int) -> JobReport | None:
        app = self.application(job)
        profile = self._profiles.get(job)
        if app is None or not profile:
            return None
        gpus = int(self._held[job]) or int(self.jobs.num_gpus[job])
        epoch = min(int(self._epoch[job]), app.epochs - 1)
        sqr, var = app.grad_stats(app.effective_batch(int(self._batch[job]), gpus), epoch)
        progress = float(self._scale[job]) * app.total_progress - self._work_left(job)
        return JobReport(profile=dict(profile), grad_sqr=sqr, grad_var=var, app=app, progress=progress)

    @property
    def job_batch_sizes(self) -> np.ndarray:
        """(N,) the global batch size each job trains with now."""
        return _readonly(self._batch)

    @property
    def job_gpus_held(self) -> np.ndarray:
        """(N,) GPUs each job holds now (0 unless running)."""
        return _readonly(self._held)

    # ------------------------------------------- vectorised read-only state (for observation builders)
    @property
    def job_states(self) -> np.ndarray:
        """(N,) 0 not arrived, 1 queued, 2 running, 3 done."""
        return _readonly(self._state)

    @property
    def job_span(self) -> np.ndarray:
        """(N,) topology Level of each job's current (or last) placement, -1 if never placed."""
        return _readonly(self._span)

    @property
    def job_factor(self) -> np.ndarray:
        """(N,) current interference throughput factor of each job (1.0 = no slowdown)."""
        return _readonly(self._factor)

    def attained_services(self, jobs: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`attained_service`."""
        jobs = np.asarray(jobs, dtype=np.int64)
        running = self._state[jobs] == RUNNING
        extra = np.where(running, self._held[jobs] * (self.now - self._run_start[jobs]), 0.0)
        return self._attained[jobs] + extra

    def uplink_jobs(self, rack: int) -> int:
        """Running jobs whose traffic crosses ``rack``'s uplink (jobs spanning several racks)."""
        return self._rack_load[rack]

    @property
    def num_completed(self) -> int:
        return self._done

    def completed_since(self, count: int) -> list[int]:
        return self._completed[count:]

    @property
    def num_arrived(self) -> int:
        return self._next_arrival

    # ------------------------------------------------------------- running
    def run(self, scheduler: Scheduler, progress: bool = False, until: float | None = None) -> SimResult:
        """Simulate the whole workload; returns per-job results and metrics. ``until``: stop at the first
        scheduling point at or after that time instead (jobs not finished then keep no end time), for
        training episodes whose returns beyond it no longer count."""
        self.start(scheduler)
        wall0 = _time.perf_counter()
        bar = _Progress(len(self.jobs), scheduler.name) if progress else None
        while self.step(scheduler):
            if until is not None and self.now >= until:
                break
            if bar is not None:
                bar.tick(self._done, self.now)
        if bar is not None:
            bar.close(self._done)
        if self._mixed_jobs:
            warnings.warn(
                f"{scheduler.name}: {len(self._mixed_jobs)} of {len(self.jobs)} jobs ran on several GPU types at once, "
                "where the built-in schedulers keep each job on one type (Sia's rule): declare one_gpu_type = True on "
                "the scheduler to be held to it, and place within one type (cluster_sim.typed_placement."
                "one_type_placement); mix_gpu_types=True allows mixing without this warning",
                MixedGpuTypesWarning,
                stacklevel=2,
            )
        self._warn_thrash(scheduler.name)
        # a periodic policy is called at every event but decides once a round: its own round times are the figure
        if getattr(scheduler, "round_seconds", None) is not None:
            self._round_seconds = list(scheduler.round_seconds)
        return self.result(scheduler.name, _time.perf_counter() - wall0)

    def _warn_thrash(self, name: str) -> None:
        """Say where jobs were preempted :data:`THRASH` times or more while their (re)start stall still ran: each
        such run made no progress, so a figure of this scheduler is one of flipping jobs in and out."""
        many = np.flatnonzero(self._cut_short >= THRASH)
        if not len(many):
            return
        worst = int(many[np.argmax(self._cut_short[many])])
        warnings.warn(
            f"{name}: {len(many)} of {len(self.jobs)} jobs {'was' if len(many) == 1 else 'were'} preempted {THRASH} or "
            f"more times before {'its' if len(many) == 1 else 'their'} restart had finished, making no progress in "
            f"between (job {worst}: {self._cut_short[worst]} of its "
            f"{self._preemptions[worst]} preemptions); the scheduler flips them between running and waiting, and "
            "its figures are those of a scheduler that thrashes (preemptions per job: jobs.csv)",
            ThrashWarning,
            stacklevel=3,
        )

    def start(self, scheduler: Scheduler) -> None:
        """Back to time 0 for ``scheduler``: its declared traits set the simulation's modes (unless the simulator
        was built with them), then it sees the empty cluster (``scheduler.reset``)."""
        check_scheduler(scheduler)
        self._scheduler_name = scheduler.name  # for an error the clock raises (a stall)
        traits = traits_of(scheduler)
        if self._elastic_setting is None:
            self.elastic = traits.elastic
        if self._mix_setting is None:
            self.mix_gpu_types = len(self.topo.gpu_types) == 1 or not traits.one_gpu_type
        # jobs that ran across types where only the scheduler's silence allowed it (said after the run)
        self._mixed_jobs = set() if self._mix_setting is None and len(self.topo.gpu_types) > 1 else None
        self._check_fits_one_type(scheduler.name)
        if self.elastic and traits.elastic and not traits.wants_all_points:
            warnings.warn(
                f"{scheduler.name}: elastic, but consulted only where jobs wait (it does not declare "
                "wants_all_points): between arrivals its running jobs keep their size and its wake_at points pass "
                "without a call; declare wants_all_points = True to be consulted at every event, and decide once a "
                "round there (as the built-in elastic schedulers do)",
                ElasticPointsWarning,
                stacklevel=2,
            )
        if (trained := traits.trained_on) is not None:
            for why in (trained.mismatch(self.topo), trained.interference_mismatch(self._interfere)):
                if why:
                    warnings.warn(f"{scheduler.name}: {why}", PolicyClusterWarning, stacklevel=2)
        one_blas_thread()  # a simulation's linear algebra is tiny: BLAS's threads only slow it down
        self.reset()
        try:
            scheduler.reset(self)
        except Exception as err:
            err.add_note(f"while {scheduler.name} was reset for a run on {self.topo.name}")
            raise

    def step(self, scheduler: Scheduler) -> bool:
        """Process the events up to the next scheduling point and let ``scheduler`` decide there
        (:meth:`consult`); False once every job is done. :meth:`run` is :meth:`start`, then steps."""
        if not self.advance():
            return False
        self.consult(scheduler)
        return True

    def consult(self, scheduler: Scheduler) -> None:
        """Let ``scheduler`` decide at the current point, where jobs wait (or always, for one that wants every
        point), and carry out its decisions; its time is counted in the result."""
        if self._queue or traits_of(scheduler).wants_all_points:
            t0 = _time.perf_counter()
            try:
                decisions = scheduler.schedule(self)
            except Exception as err:  # which scheduler, and when: its message is kept, this is added to it
                err.add_note(f"while {scheduler.name} decided at t={self.now:,.0f} s")
                raise
            took = _time.perf_counter() - t0
            self.scheduler_seconds += took
            self._round_seconds.append(took)
            if decisions is None:  # most often a `return` forgotten: said here, not as a stalled run much later
                raise InvalidDecision(
                    f"{scheduler.name} at t={self.now:,.0f} s: schedule(view) returned None; return a list of "
                    "decisions (an empty list when there is nothing to do)"
                )
            if decisions:
                try:
                    self.apply(decisions)
                except InvalidDecision as err:  # which scheduler, and when: a run may hold several
                    raise InvalidDecision(f"{scheduler.name} at t={self.now:,.0f} s: {err}") from None
            self._check_idle(scheduler, bool(decisions))

    def _check_idle(self, scheduler: Scheduler, decided: bool) -> None:
        """A scheduler that wakes itself up (a periodic policy) but never starts the jobs left waiting on an idle
        cluster would run forever: stalled, as a run without wake-ups is (:meth:`advance`)."""
        if decided or self._next_arrival < self._num_jobs or len(self._running) or not self._queue:
            self._idle_rounds = 0  # the cheap tests first: this runs every round
            return
        self._idle_rounds += 1
        if self._idle_rounds >= IDLE_ROUNDS:
            first = int(self._queue.array()[0])
            raise SimulationStalled(
                f"simulation stalled at t={self.now:.1f}s: {len(self._queue)} jobs wait on an idle cluster with no "
                f"arrival left, and {scheduler.name} started none in its last {IDLE_ROUNDS:,} rounds (first: job "
                f"{first}, {int(self.jobs.num_gpus[first])} GPUs); it cannot or will not place them"
            )

    def advance(self) -> bool:
        """Process every event up to the next scheduling point; False once all jobs are done."""
        n = len(self.jobs)
        if self._done == n:
            return False
        arrival = self.jobs.arrival
        self.free_counts.next_round()
        while True:
            while self._heap and self._is_stale(self._heap[0]):
                heapq.heappop(self._heap)
            t_arr = float(arrival[self._next_arrival]) if self._next_arrival < n else math.inf
            t_evt = self._heap[0][0] if self._heap else math.inf
            t = min(t_arr, t_evt)
            if t == math.inf:
                stuck = [j for j in range(n) if self._state[j] != DONE]
                state = {QUEUED: "queued", RUNNING: "running", WAITING_ARRIVAL: "not arrived"}
                raise SimulationStalled(
                    f"simulation stalled at t={self.now:.1f}s: {len(stuck)} jobs would wait for ever (first: job "
                    f"{stuck[0]}, {state.get(int(self._state[stuck[0]]), 'unfinished')}): {self._scheduler_name} left "
                    "them queued with nothing running and asked for no wake-up; start one, or call view.wake_at(t) "
                    "to be consulted again at t"
                )
            self._advance_clock(t)
            changed: dict[int, None] = {}
            while self._next_arrival < n and arrival[self._next_arrival] <= t:
                j = self._next_arrival
                self._state[j] = QUEUED
                self._queue.add(j)
                self._next_arrival += 1
                self.events += 1
            while self._heap and self._heap[0][0] <= t:
                _, _, kind, j, ver = heapq.heappop(self._heap)
                if kind == _WAKEUP:
                    self._wakeups.discard(t)
                    self.events += 1
                elif self._version[j] == ver and self._state[j] == RUNNING:
                    if kind == _EPOCH:
                        self._next_epoch(j, changed)
                    else:
                        self._complete(j, changed)
                    self.events += 1
            self._refresh_speeds(changed)
            self._record()
            return True

    def apply(self, decisions: Sequence[Decision]) -> None:
        """Validate and carry out a scheduler's decisions at the current time."""
        changed: dict[int, None] = {}
        self.free_counts.next_round()
        for d in decisions:
            self.decisions += 1
            if isinstance(d, Start):
                self._start(d.job, self._check_gpus(d.job, d.gpus, "start"), changed, d.batch_size)
            elif isinstance(d, Preempt):
                self._preempt(d.job, changed)
            elif isinstance(d, Resize):
                self._resize(d.job, d.gpus, changed, d.batch_size)
            elif isinstance(d, SetBatch):
                self._set_batch(d.job, d.batch_size, changed)
            else:
                raise InvalidDecision(f"unknown decision {d!r}; expected Start, Preempt, Resize or SetBatch")
        self._refresh_speeds(changed)
        self._record()

    # --------------------------------------------------------- decisions
    def _check_job(self, job: int, action: str) -> int:
        if not isinstance(job, (int, np.integer)) or not 0 <= job < len(self.jobs):
            raise InvalidDecision(f"cannot {action} job {job!r}: no such job (ids are 0..{len(self.jobs) - 1})")
        return int(job)

    def _check_gpus(self, job: int, gpus: np.ndarray, action: str, own: bool = False) -> np.ndarray:
        job = self._check_job(job, action)
        gpus = np.asarray(gpus)
        if gpus.shape == (1,) and gpus.dtype.kind in "iu":  # most jobs hold one GPU: check it directly
            g = int(gpus[0])
            if 0 <= g < self.topo.num_gpus:
                holder = int(self._gpu_job[g])
                if holder < 0 or (own and holder == job):
                    return gpus.astype(np.int32)
                if self.gpu_sharing and self._can_share(job, g, holder, own):
                    return gpus.astype(np.int32)
            # otherwise the general checks below name what is wrong
        elif gpus.ndim == 1 and 1 < gpus.size <= FEW_GPUS and gpus.dtype.kind in "iu":  # a few GPUs: in Python
            ids = gpus.tolist()
            if min(ids) >= 0 and max(ids) < self.topo.num_gpus and len(set(ids)) == len(ids):
                held = self._gpu_job
                if all(held[g] < 0 or (own and held[g] == job) for g in ids):
                    return gpus.astype(np.int32)
        if gpus.ndim != 1 or gpus.size == 0 or not np.issubdtype(gpus.dtype, np.integer):
            raise InvalidDecision(
                f"cannot {action} job {job}: GPUs must be a non-empty 1-D integer array, got {gpus!r}"
            )
        if gpus.min() < 0 or gpus.max() >= self.topo.num_gpus:
            bad = gpus[(gpus < 0) | (gpus >= self.topo.num_gpus)]
            raise InvalidDecision(
                f"cannot {action} job {job} on GPUs {bad.tolist()}: no such GPU (ids are 0..{self.topo.num_gpus - 1})"
            )
        if len(set(gpus.tolist())) != len(gpus):
            raise InvalidDecision(f"cannot {action} job {job}: GPU list {gpus.tolist()} names a GPU twice")
        holders = self._gpu_job[gpus]
        taken = (holders >= 0) & (holders != job) if own else holders >= 0
        if taken.any():
            pairs = ", ".join(f"GPU {int(g)} (job {int(h)})" for g, h in zip(gpus[taken], holders[taken], strict=True))
            raise InvalidDecision(f"cannot {action} job {job}: GPUs already held: {pairs}")
        return gpus.astype(np.int32)

    def _can_share(self, job: int, g: int, holder: int, own: bool) -> bool:
        """Whether 1-GPU ``job`` may join GPU ``g`` as its second tenant."""
        if int(self.jobs.num_gpus[job]) != 1 or (own and job in (holder, int(self._gpu_guest[g]))):
            return False
        other = int(self._gpu_guest[g])
        if other >= 0:
            raise InvalidDecision(f"cannot place job {job} on GPU {g}: jobs {holder} and {other} already share it")
        if len(self._placement.get(holder, ())) != 1:
            raise InvalidDecision(
                f"cannot place job {job} on GPU {g}: its holder, job {holder}, spans several GPUs; only single-GPU "
                "jobs share a GPU"
            )
        return True

    def _start(self, job: int, gpus: np.ndarray, changed: dict[int, None], batch: int | None = None) -> None:
        state = self._state[job]
        if state != QUEUED:
            what = {WAITING_ARRIVAL: "has not arrived yet", RUNNING: "is already running", DONE: "has finished"}
            raise InvalidDecision(f"cannot start job {job} on GPUs {gpus.tolist()}: it {what[int(state)]}")
        self._check_elastic(job, len(gpus), batch, "start")
        self._check_one_type(job, gpus, "start")
        self._queue.remove(job)
        resumed = not np.isnan(self._first_start[job])
        if not resumed:
            self._first_start[job] = self.now
        else:
            self._restarts[job] += 1
        self._occupy(job, gpus, changed)
        self._stall_until[job] = self.now + (self._restart_stall[job] if resumed else self._start_stall[job])

    def _preempt(self, job: int, changed: dict[int, None]) -> None:
        job = self._check_job(job, "preempt")
        if self._state[job] != RUNNING:
            raise InvalidDecision(f"cannot preempt job {job}: it is not running")
        self._release(job, changed)
        self._state[job] = QUEUED
        self._queue.add(job)
        self._preemptions[job] += 1
        self._cut_short[job] += self.now < self._stall_until[job]

    def _resize(self, job: int, gpus: np.ndarray, changed: dict[int, None], batch: int | None = None) -> None:
        job = self._check_job(job, "resize")
        if self._state[job] != RUNNING:
            raise InvalidDecision(f"cannot resize job {job}: it is not running")
        gpus = self._check_gpus(job, gpus, "resize", own=True)
        self._check_elastic(job, len(gpus), batch, "resize")
        self._check_one_type(job, gpus, "resize")
        if len(gpus) != self._held[job]:
            self._resizes[job] += 1
        self._restarts[job] += 1
        self._release(job, changed)
        self._occupy(job, gpus, changed)
        self._stall_until[job] = self.now + self._restart_stall[job]

    def _check_fits_one_type(self, scheduler_name: str) -> None:
        """With one GPU type per job, a job that cannot shrink must fit in the largest type's GPUs, or it
        would wait for ever."""
        if self.mix_gpu_types:
            return
        rigid = np.array([not self.is_elastic(j) for j in range(len(self.jobs))], dtype=bool)

        def why(j: int) -> str:
            if self._app[j] < 0:
                return "it cannot shrink (no measured application)"
            return f"{scheduler_name} does not resize jobs" if not self.elastic else "it is rigid"

        check_rigid_jobs_fit(self.topo, self.jobs, rigid, why)

    def _check_one_type(self, job: int, gpus: np.ndarray, action: str) -> None:
        """A job runs on one GPU type at a time unless the simulation allows mixing (``mix_gpu_types``)."""
        if self.mix_gpu_types:
            if self._mixed_jobs is not None and len(np.unique(self._gpu_type[gpus])) > 1:
                self._mixed_jobs.add(job)
            return
        types = self._gpu_type[gpus]
        if (types != types[0]).any():
            names = sorted({self.topo.gpu_types[int(t)] for t in types.tolist()})
            raise InvalidDecision(
                f"cannot {action} job {job} on {len(gpus)} GPUs of {len(names)} types ({', '.join(names)}): a job "
                "runs on one GPU type at a time; a scheduler declaring one_gpu_type places within one type "
                "(cluster_sim.typed_placement.one_type_placement), or drops the trait (the simulator's "
                "mix_gpu_types=True allows mixing)"
            )

    def _check_elastic(self, job: int, count: int, batch: int | None, action: str) -> None:
        """Validate the GPU count and batch size of a start or resize; set the batch size."""
        lo, hi = self.gpu_range(job)
        if not lo <= count <= hi:
            why = (
                f"it asks for {lo}; only an elastic job (of a measured application, in an elastic simulation: the "
                "scheduler class declares elastic = True) runs on another GPU count"
                if lo == hi
                else f"elastic job {job} may use {lo}..{hi} GPUs"
            )
            raise InvalidDecision(f"cannot {action} job {job} on {count} GPUs: {why}")
        if batch is not None:
            self._set_batch(job, batch, None, count)
        elif self.is_elastic(job):
            blo, bhi = self.batch_range(job, count)
            b = int(self._batch[job])
            if not blo <= b <= bhi:
                raise InvalidDecision(
                    f"cannot {action} job {job} on {count} GPUs at its batch size {b}: on {count} GPUs it needs "
                    f"a global batch in {blo}..{bhi}; pass batch_size"
                )

    def _set_batch(self, job: int, batch: int, changed: dict[int, None] | None, count: int | None = None) -> None:
        """Validate and set ``job``'s batch size; with ``changed`` (a SetBatch decision) its rate changes now."""
        job = self._check_job(job, "change the batch size of")
        if not self.is_elastic(job):
            raise InvalidDecision(
                f"cannot change the batch size of job {job}: only elastic jobs (of a measured application, in an "
                "elastic simulation: the scheduler class declares elastic = True) change their batch size"
            )
        if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool):
            raise InvalidDecision(f"cannot set job {job}'s batch size to {batch!r}: it must be an integer")
        if self._state[job] not in (QUEUED, RUNNING):
            raise InvalidDecision(f"cannot change the batch size of job {job}: it is not waiting or running")
        if count is None:
            count = int(self._held[job]) if self._state[job] == RUNNING else int(self.jobs.num_gpus[job])
        lo, hi = self.batch_range(job, count)
        if not lo <= batch <= hi:
            raise InvalidDecision(
                f"cannot set job {job}'s batch size to {batch} on {count} GPUs: it must lie in {lo}..{hi} "
                "(at least the smallest measured batch and the smallest per-GPU batch on every GPU, at most the "
                "largest measured batch)"
            )
        if changed is not None and self._state[job] == RUNNING and int(batch) != self._batch[job]:
            self._settle(job)
            self._batch[job] = int(batch)
            self._speed[job] = 0.0  # recompute
            if self.batch_change_cost > 0:
                self._stall_until[job] = max(self._stall_until[job], self.now) + self.batch_change_cost
            changed[job] = None
        self._batch[job] = int(batch)

    # ---------------------------------------------------- bookkeeping
    def _occupy(self, job: int, gpus: np.ndarray, changed: dict[int, None]) -> None:
        guest = self.gpu_sharing and len(gpus) == 1 and int(self._gpu_job[gpus[0]]) >= 0
        if guest:
            self._gpu_guest[gpus] = job
        else:
            self._gpu_job[gpus] = job
            self.free_counts.note_gpus(gpus)
        gpu_server = index_lists(self.topo).gpu_server
        per_server = _count([gpu_server[g] for g in gpus.tolist()])
        self._servers_of[job] = per_server
        for s, c in per_server.items():
            if not guest:
                self._set_server_free(s, int(self._server_free[s]) - c)
            if self._interfere:
                for k in self._server_jobs[s]:
                    changed[k] = None
                self._server_jobs[s][job] = None
        if not guest:
            self.num_free -= len(gpus)
        self._placement[job] = gpus
        if self._interfere:
            self._desc_code[job] = self._keyed.code(self._descriptors.get(job, int(gpus[0])))
        self._held[job] = len(gpus)
        if self.record_history:
            self.history.append((self.now, "start", job, gpus))
        self._state[job] = RUNNING
        self._running.add(job)
        self._run_start[job] = self.now
        self._settled_at[job] = self.now
        level = self.topo.span_level(gpus)
        self._span[job] = int(level)
        if self._uniform_perf:
            key = (int(self._model[job]), int(self.jobs.batch_size[job]), len(gpus), int(level))
            self._speed_memo[job] = self._class_memo.setdefault(key, {})
        else:
            self._speed_memo[job] = {}
        self._speed[job] = 0.0  # not yet computed for this placement: _refresh_speeds must compute it
        if level >= _POD:
            self._uplinks_of[job] = self._uplink_groups(per_server)
            self._join_uplinks(job, changed)
        changed[job] = None

    def _release(self, job: int, changed: dict[int, None]) -> None:
        self._settle(job)
        gpus = self._placement.pop(job)
        if self.record_history:
            self.history.append((self.now, "stop", job, gpus))
        shared = self.gpu_sharing and len(gpus) == 1 and int(self._gpu_guest[gpus[0]]) >= 0
        if shared:  # the other tenant stays: it holds the GPU alone from now on
            g = int(gpus[0])
            if int(self._gpu_job[g]) == job:
                self._gpu_job[g] = self._gpu_guest[g]
                self.free_counts.note_gpus(gpus)
            self._gpu_guest[g] = -1
        else:
            self._gpu_job[gpus] = -1
            self.free_counts.note_gpus(gpus)
        per_server = self._servers_of.pop(job)
        for s, c in per_server.items():
            if not shared:
                self._set_server_free(s, int(self._server_free[s]) + c)
            if self._interfere:
                del self._server_jobs[s][job]
                for k in self._server_jobs[s]:
                    changed[k] = None
        if self._span[job] >= _POD:
            self._leave_uplinks(job, changed)
        del self._speed_memo[job]
        if not shared:
            self.num_free += len(gpus)
        self._running.remove(job)
        self._held[job] = 0
        ran = self.now - self._run_start[job]
        self._executed[job] += ran
        self._attained[job] += len(gpus) * ran
        types = self._gpu_type[gpus]
        if (types == types[0]).all():
            self._attained_by_type[job, int(types[0])] += len(gpus) * ran
        else:
            self._attained_by_type[job] += np.bincount(types, minlength=self._attained_by_type.shape[1]) * ran
        self._version[job] += 1
        changed.pop(job, None)

    def _complete(self, job: int, changed: dict[int, None]) -> None:
        self._release(job, changed)
        self._remaining[job] = 0.0
        self._state[job] = DONE
        self._end[job] = self.now
        self._done += 1
        self._completed.append(job)

    def _next_epoch(self, job: int, changed: dict[int, None]) -> None:
        """An application job reached its next epoch boundary: its rate changes with the epoch."""
        self._settle(job)
        app = self._apps[int(self._app[job])]
        self._epoch[job] += 1
        self._remaining[job] = self._scale[job] * (app.total_progress - app.progress_at(int(self._epoch[job])))
        self._speed[job] = 0.0  # recompute
        changed[job] = None

    def _set_server_free(self, s: int, free: int) -> None:
        cap = int(self.topo.server_num_gpus[s])
        old = int(self._server_free[s])
        self._partial_free += (free if 0 < free < cap else 0) - (old if 0 < old < cap else 0)
        self._server_free[s] = free
        self.free_counts.set_server(s, free)

    def _uplink_groups(self, servers: dict[int, int]) -> tuple[list[int], list[int]]:
        """Racks (and, when it spans several pods, pods) whose uplinks a multi-rack job's traffic crosses."""
        racks = sorted({int(r) for r in self.topo.server_rack[list(servers)]})
        pods = sorted({int(p) for p in self.topo.rack_pod[racks]})
        return racks, (pods if len(pods) > 1 else [])

    def _join_uplinks(self, job: int, changed: dict[int, None]) -> None:
        """``job`` now crosses its racks' (and pods') uplinks: a job already there whose busiest uplink
        had fewer jobs than this one now has gets one more sharer."""
        racks, pods = self._uplinks_of[job]
        sharers = self._sharers
        tables = ((self._rack_uplink, self._rack_load, racks), (self._pod_uplink, self._pod_load, pods))
        for table, load, keys in tables:
            for key in keys:
                members = table.setdefault(key, {})
                c = load[key] = load[key] + 1
                for k in members:
                    if sharers[k] < c:
                        sharers[k] = c
                        changed[k] = None
                members[job] = None
        sharers[job] = self._busiest_uplink(job)

    def _leave_uplinks(self, job: int, changed: dict[int, None]) -> None:
        """``job`` leaves its uplinks: only a job whose busiest uplink was one of these, at its old
        count, may have fewer sharers now, and only it is counted again."""
        racks, pods = self._uplinks_of.pop(job)
        sharers = self._sharers
        recount: dict[int, None] = {}
        tables = ((self._rack_uplink, self._rack_load, racks), (self._pod_uplink, self._pod_load, pods))
        for table, load, keys in tables:
            for key in keys:
                members = table[key]
                del members[job]
                c = load[key]
                load[key] = c - 1
                for k in members:
                    if sharers[k] == c:
                        recount[k] = None
        for k in recount:
            most = self._busiest_uplink(k)
            if most != sharers[k]:
                sharers[k] = most
                changed[k] = None

    def _busiest_uplink(self, job: int) -> int:
        """Jobs (itself included) on the busiest uplink that a multi-rack ``job`` crosses (>= 2 racks)."""
        racks, pods = self._uplinks_of[job]
        most = max(map(self._rack_load.__getitem__, racks))
        return max(most, max(map(self._pod_load.__getitem__, pods))) if pods else most

    def _settle(self, job: int) -> None:
        """Bring a running job's remaining work up to ``now`` at its current speed."""
        start = max(self._settled_at[job], self._stall_until[job])
        if self.now > start:
            dt = self.now - start
            self._remaining[job] = max(0.0, self._remaining[job] - self._speed[job] * dt)
            self._slow_time[job] += (1.0 - self._factor[job]) * dt
        self._settled_at[job] = self.now

    def _refresh_speeds(self, changed: dict[int, None]) -> None:
        """Recompute the speed (and completion time) of every running job whose surroundings changed."""
        jobs = [j for j in changed if self._state[j] == RUNNING]
        if not jobs:
            return
        factors = self._interference_factors(jobs) if self._interfere else None
        for i, j in enumerate(jobs):
            if self._apps and self._app[j] >= 0:
                self._refresh_app(j, 1.0 if factors is None else float(factors[i]))
                continue
            if self.perf is None:
                base = 1.0
            else:
                sharers = self._sharers[j] if self._span[j] >= _POD else 1
                memo = self._speed_memo[j]
                base = memo.get(sharers)
                if base is None:
                    model, batch = int(self._model[j]), int(self.jobs.batch_size[j])
                    base = memo[sharers] = self.perf.speed(model, batch, self._placement[j], sharers)
            factor = 1.0 if factors is None else float(factors[i])
            if base * factor == self._speed[j]:
                continue  # same speed: the pending completion stays right, nothing to settle
            self._settle(j)
            self._factor[j] = factor
            self._speed[j] = base * factor
            self._version[j] += 1
            begin = max(self.now, self._stall_until[j])
            self._push(begin + self._remaining[j] / self._speed[j], _COMPLETION, j, int(self._version[j]))

    def calibration_slowdown(self, job: int) -> float:
        """The calibration slowdown ``job`` runs under (1: none; Sia's, when ``calibration`` is on)."""
        return float(self._calibration[job])

    def app_on_type(self, job: int, gpu_type: str | None = None):
        """The application ``job`` trains, as it runs on ``gpu_type`` (default: the type it runs on now;
        its measured step times and batch limits there, :meth:`PolluxApplication.on`)."""
        app = self.application(job)
        if app is None or (not app.per_type and len(self.topo.gpu_types) == 1):
            return app  # one type: the application's own step times (T4's, without per-type profiles)
        if gpu_type is None:
            if self._state[job] != RUNNING:
                return app
            topo = self.topo
            gpu_type = topo.gpu_types[int(topo.server_gpu_type[int(topo.gpu_server[self._placement[job][0]])])]
        return self.perf.on(int(self._model[job]), gpu_type)

    def _refresh_app(self, j: int, factor: float) -> None:
        """Rate of an application job (progress per second) and its next event: the end of its epoch."""
        app = self.app_on_type(j)
        placement = tuple(self._servers_of[j].values())
        batch, epoch = int(self._batch[j]), int(self._epoch[j])
        speed = app.rate(placement, batch, epoch) * factor / self._calibration[j]
        atomic, _ = app.batch_plan(batch, sum(placement))
        profile = self._profiles.setdefault(j, {})
        key = (len(placement), sum(placement), atomic)
        if key not in profile:  # the job measures its step time on each configuration it runs on
            profile[key] = app.step_time(placement, atomic)
        if speed == self._speed[j]:
            return
        self._settle(j)
        self._factor[j] = factor
        self._speed[j] = speed
        self._version[j] += 1
        begin = max(self.now, self._stall_until[j])
        last = epoch + 1 >= app.epochs
        to_go = self._remaining[j] - (
            0.0 if last else self._scale[j] * (app.total_progress - app.progress_at(epoch + 1))
        )
        self._push(begin + max(to_go, 0.0) / speed, _COMPLETION if last else _EPOCH, j, int(self._version[j]))

    def _interference_factors(self, jobs: list[int]) -> np.ndarray:
        """Throughput factor of each job from the jobs on its servers (keys as in
        :class:`~interference.queries.KeyedFactors`)."""
        code, server_jobs, servers_of = self._desc_code, self._server_jobs, self._servers_of
        keys = []
        for j in jobs:
            servers = servers_of[j]
            if len(servers) == 1:
                neighbours = server_jobs[next(iter(servers))]
            else:
                neighbours = {}
                for s in servers:
                    neighbours.update(server_jobs[s])
            g = int(self._placement[j][0])
            if self.gpu_sharing and len(self._placement[j]) == 1 and self._gpu_guest[g] >= 0:
                tenants = (int(self._gpu_job[g]), int(self._gpu_guest[g]))
                items = [3 * code[k] + (_GPU if k in tenants else _SERVER) for k in neighbours if k != j]
            else:
                items = [3 * code[k] + _SERVER for k in neighbours if k != j]
            items.sort()
            keys.append((code[j], *items))
        return self._keyed(keys)

    def _push(self, t: float, kind: int, job: int, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, job, version))
        if len(self._heap) > self._compact_at:
            self._compact()

    def _compact(self) -> None:
        """Drop the superseded entries that speed changes leave behind (a job whose uplink is shared
        by hundreds changes speed at each of their starts and ends). Popped one by one they would cost
        a logarithmic sift each in a heap many times the running jobs; (time, sequence) keys are unique,
        so the order of events is the same."""
        version, state = self._version, self._state
        live = [e for e in self._heap if e[2] == _WAKEUP or (version[e[3]] == e[4] and state[e[3]] == RUNNING)]
        heapq.heapify(live)
        self._heap = live
        self._compact_at = max(4 * len(live), _COMPACT_MIN)

    def _is_stale(self, entry: tuple[float, int, int, int, int]) -> bool:
        _, _, kind, j, ver = entry
        return kind != _WAKEUP and (self._version[j] != ver or self._state[j] != RUNNING)

    def _advance_clock(self, t: float) -> None:
        dt = t - self._last_t
        if dt > 0:
            self._busy_integral += (self.topo.num_gpus - self.num_free) * dt
            self._active_integral += (len(self._queue) + len(self._running)) * dt
            self._frag_integral += self._partial_free * dt
        self._last_t = t
        self.now = t

    def _record(self) -> None:
        if self.record_timeline:
            busy, q = self.topo.num_gpus - self.num_free, len(self._queue)
            if self._tl_t and self._tl_t[-1] == self.now:
                self._tl_busy[-1], self._tl_queue[-1] = busy, q
            else:
                self._tl_t.append(self.now)
                self._tl_busy.append(busy)
                self._tl_queue.append(q)

    # -------------------------------------------------------------- result
    def result(self, scheduler_name: str, wall_seconds: float) -> SimResult:
        executed = self._executed
        return SimResult(
            scheduler=scheduler_name,
            cluster=self.topo.name,
            num_gpus=self.topo.num_gpus,
            workload=self.jobs,
            start=self._first_start.copy(),
            end=self._end.copy(),
            span=self._span.copy(),
            preemptions=self._preemptions.copy(),
            resizes=self._resizes.copy(),
            restarts=self._restarts.copy(),
            gpu_types=tuple(self.topo.gpu_types),
            attained_by_type=self._attained_by_type.copy(),
            round_seconds=np.asarray(self._round_seconds),
            active_job_seconds=self._active_integral,
            executed=executed.copy(),
            attained=self._attained.copy(),
            interference_slowdown=np.divide(self._slow_time, executed, out=np.zeros_like(executed), where=executed > 0),
            busy_gpu_seconds=self._busy_integral,
            fragmented_gpu_seconds=self._frag_integral,
            events=self.events,
            decisions=self.decisions,
            scheduler_seconds=self.scheduler_seconds,
            wall_seconds=wall_seconds,
            timeline_t=np.asarray(self._tl_t),
            timeline_busy=np.asarray(self._tl_busy, dtype=np.int32),
            timeline_queue=np.asarray(self._tl_queue, dtype=np.int32),
            estimated_jobs=self._estimated_jobs(),
        )

    def _estimated_jobs(self) -> int:
        """Jobs that ran on a GPU type where nobody measured their model or application: their speed there
        is an estimate (the type's single speed, or the application's T4 step times scaled)."""
        if self.perf is None:
            return 0
        count = 0
        for j in np.flatnonzero(self._attained_by_type.sum(axis=1) > 0).tolist():
            used = [self.topo.gpu_types[t] for t in np.flatnonzero(self._attained_by_type[j] > 0).tolist()]
            if self._app[j] >= 0:
                estimated = any(self.app_on_type(j, t).estimated for t in used)
            else:
                # V100 is the reference GPU of every duration: a model's speed there is 1 by definition
                model = MODEL_NAMES[int(self._model[j])]
                estimated = any((model, t) in self.perf.fallbacks for t in used if t != REFERENCE_GPU)
            count += bool(estimated)
        return count


def check_rigid_jobs_fit(topo: ClusterView, jobs: Workload, rigid: np.ndarray, why: Callable[[int], str]) -> None:
    """A job that keeps its GPU count (``rigid``) and runs on one GPU type must fit in the largest type's GPUs, or
    it would wait for ever: a ValueError naming the first such job, ``why(job)`` it keeps its count, and the
    fixes."""
    largest = int(np.bincount(topo.server_gpu_type, weights=topo.server_num_gpus).max())
    too_big = np.flatnonzero(rigid & (jobs.num_gpus > largest))
    if not len(too_big):
        return
    j = int(too_big[0])
    who = why(j)
    raise ValueError(
        f"job {j} (arriving at {float(jobs.arrival[j]):,.0f} s) asks for {int(jobs.num_gpus[j])} GPUs and {who}, but "
        f"a job runs on one GPU type and the largest type of cluster {topo.name!r} has {largest} ({len(too_big)} such "
        f"jobs); leave them out (the workload option max_gpus={largest}), use a cluster with more GPUs of one type, "
        "let jobs span types (build_simulator(..., mix_gpu_types=True) in Python), or give the jobs measured "
        "applications (pollux: workloads, apps=) and run a scheduler that resizes them (sia, pollux)"
    )


def _count(items: list[int]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    return counts


class _Progress:
    """A simulation's progress: a bar on a terminal; where stderr is a log file or a pipe (a bar's redraws would
    clutter it), a plain line every :attr:`LINE_EVERY` seconds, so that a long run (Pollux on a data center) shows
    that it moves and a short one prints nothing."""

    LINE_EVERY = 30.0

    def __init__(self, total: int, name: str) -> None:
        self.total, self.name, self.shown = total, name, 0
        self.t0 = self.said = _time.perf_counter()
        self.bar = None
        if sys.stderr is not None and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=f"simulate {name}", unit="job", mininterval=0.5, leave=False)

    def tick(self, done: int, now: float) -> None:
        if self.bar is not None:
            if done - self.shown >= 500:  # a bar's update costs more than a simulation step
                self.bar.update(done - self.shown)
                self.shown = done
        elif (wall := _time.perf_counter()) - self.said >= self.LINE_EVERY:
            self.said = wall
            print(
                f"simulate {self.name}: {done:,}/{self.total:,} jobs done at simulated {now / 3600:,.1f} h "
                f"({wall - self.t0:.0f} s)",
                file=sys.stderr,
                flush=True,
            )

    def close(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.shown)
            self.bar.close()
