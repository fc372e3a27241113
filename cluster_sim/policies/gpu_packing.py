"""GPU packing: a single-GPU job that finds no free GPU shares one with a running single-GPU job.

Gandiva (Xiao et al., OSDI'18) packs jobs onto GPUs when the cluster is full and keeps a packing only if
it helps; Lucid (Hu et al., ASPLOS'23) picks partners by how they interfere. One scheduler, three modes,
so a run shows what the interference predictor buys (the simulator must run with ``gpu_sharing``):

- ``none``: no sharing: arrival order with backfilling on whole GPUs (the baseline);
- ``blind``: a waiting 1-GPU job joins the first GPU (lowest id) held by a lone 1-GPU job;
- ``aware``: it joins the GPU whose tenant the predictor pairs it with best, by the pair's combined
  normalised throughput ``f_new + f_tenant``, and only if that is at least ``min_gain`` (default 1.0:
  together they do at least one job's worth of work, Gandiva's test for keeping a packing).

The queue is served in arrival order (``order="arrival"``, Gandiva's) or, with ``order="qssf"``, shortest
expected time first from the history of finished jobs (QSSF's non-preemptive key, no job's own duration;
Lucid orders by a learned duration estimate the same way); waiting 1-GPU jobs are packed in that order too.

With ``under="tiresias"`` (or ``"qssf"``) that preemptive scheduler decides which jobs run and which give way,
on a view without the guests (a shared GPU counts once, for its first tenant); the packing pass then
offers the 1-GPU jobs it left waiting to the lone 1-GPU jobs that keep running, and a preempted job takes
its guest with it, so the GPUs it frees are free. Gandiva and Lucid share GPUs; Tiresias preempts by
attained service; this is both.

In both sharing modes, GPUs left free once the queue is served unpack shared GPUs: the guest moves to a
free GPU and pays the restart cost. The predictor sees only descriptors (model facts, batch size, solo
speed), never job durations; with ``--interference oracle`` in the simulator it is judged against the
ground truth it was not fitted to reproduce exactly.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.job_descriptors import DescriptorCache
from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.policies.qssf import QSSF
from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.policies.tiresias import Tiresias
from cluster_sim.protocol import Decision, Preempt, Resize, SchedulerView, Start
from interference.base import CoLocation, InterferenceModel, JobDescriptor, Sharing
from interference.online import OnlineCorrection

MODES = ("none", "blind", "aware")
ORDERS = ("arrival", "qssf")
UNDER = {"tiresias": Tiresias, "qssf": QSSF}  # preemptive schedulers packing can run under


class _WithoutGuests:
    """A scheduler's view of the cluster in which the second tenants of shared GPUs do not run."""

    def __init__(self, view: SchedulerView, guests: np.ndarray) -> None:
        self._view = view
        running = np.asarray(view.running, dtype=np.int64)
        self.running = running[~np.isin(running, guests)] if len(guests) else running

    def __getattr__(self, name: str):
        return getattr(self._view, name)


class GpuPacking(PolicyScheduler):
    """Arrival order with backfilling; 1-GPU jobs share GPUs as ``mode`` says (see the module doc).

    ``predictor``: the learned interference model file (``marlsched interference train``) that ``aware``
    consults, or ``oracle`` for the ground truth itself (with ``predictor_data=gavel:PATH``): the upper
    bound on what a predictor can buy. ``online``: correct the predictor with the throughput of every pair
    once it shares a GPU (:class:`~interference.online.OnlineCorrection`), as a deployed scheduler can.
    """

    ordering = "pack"
    default_backfill = True

    def __init__(
        self,
        placement: str = "consolidate",
        *,
        mode: str = "blind",
        predictor: str | None = None,
        predictor_data: str | None = None,
        min_gain: float = 1.0,
        online: bool = False,
        order: str = "arrival",
        min_history: int = 3,
        under: str | None = None,
        seed: int = 0,
        backfill: bool | None = None,
        name: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown packing mode {mode!r}; choose one of {', '.join(MODES)}")
        if order not in ORDERS:
            raise ValueError(f"unknown packing order {order!r}; choose one of {', '.join(ORDERS)}")
        if under is not None and under not in UNDER:
            raise ValueError(f"packing runs under {', '.join(UNDER)}, not {under!r}")
        if under is not None and order != "arrival":
            raise ValueError(f"under={under} orders the queue itself: leave order at arrival")
        if mode == "aware" and not predictor:
            raise ValueError(
                "mode=aware needs predictor=MODEL (a model file from `marlsched interference train`), e.g. "
                "--policy cluster_sim.policies.gpu_packing:GpuPacking,mode=aware,predictor=results/interference.json"
            )
        default_name = f"pack-{mode}" + ("" if order == "arrival" else f"-{order}") + (f"-{under}" if under else "")
        super().__init__(placement, seed=seed, backfill=backfill, name=name or default_name)
        self.mode = mode
        self.history = TenantHistory(min_history) if order == "qssf" else None
        self.under: PolicyScheduler | None = UNDER[under](placement, seed=seed) if under else None
        if isinstance(self.under, Tiresias):  # its kept queues assume nobody else starts jobs: rank afresh
            self.under.keep_levels = False
        self.needs_gpu_sharing = mode != "none"  # a simulator without gpu_sharing refuses its packings
        self.wants_all_points = mode != "none"  # unpacking may be due when the queue is empty
        self.min_gain = float(min_gain)
        self.model: InterferenceModel | None = None
        if predictor:
            from interference.loader import load_interference_model

            if predictor == "oracle":
                self.model = load_interference_model("oracle", predictor_data)
            else:
                self.model = load_interference_model("learned", str(predictor))
        if online and self.model is None:
            raise ValueError("online=True corrects a predictor from what it observes: it needs mode=aware")
        self.online = bool(online)
        self.base_model = self.model
        self._desc: DescriptorCache | None = None
        self._gain: dict[tuple[JobDescriptor, JobDescriptor], float] = {}
        self._observed: set[tuple[int, int]] = set()

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._desc = DescriptorCache(view.jobs, view.topo, getattr(view, "perf", None))
        self._gain = {}
        self._observed = set()
        if self.history is not None:
            self.history.reset(view)
        if self.under is not None:
            self.under.reset(view)
        if self.online:  # each run learns from its own observations only
            self.model = OnlineCorrection(self.base_model)

    def _observe(self, view: SchedulerView, shared: np.ndarray) -> None:
        """Feed each pair now sharing a GPU, once per pairing, with the throughput both jobs get on the GPU:
        what the simulator reports divided by the server term of the other jobs on the server (a physical
        formula every interference model shares, see :mod:`interference.composition`), so that a busy
        server is not taken for a bad partner."""
        factor = view.job_factor
        holder, guest = view.gpu_job, view.gpu_guest
        for g in shared.tolist():
            host, other = int(holder[g]), int(guest[g])
            if (host, other) in self._observed:
                continue
            self._observed.add((host, other))
            a, b = self._desc.get(host, g), self._desc.get(other, g)
            server = self._server_neighbours(view, g, (host, other))
            host_f, other_f = float(factor[host]), float(factor[other])
            if server:
                alone = self.base_model.throughput_factors([CoLocation(a, server), CoLocation(b, server)])
                host_f, other_f = min(1.0, host_f / float(alone[0])), min(1.0, other_f / float(alone[1]))
            self.model.observe(a, b, host_f)
            self.model.observe(b, a, other_f)
            self._gain.clear()  # pair gains change with every observation

    def _server_neighbours(
        self, view: SchedulerView, gpu: int, tenants: tuple[int, int]
    ) -> tuple[tuple[JobDescriptor, Sharing], ...]:
        """The other jobs on ``gpu``'s server, at the server level (descriptors on their own GPUs)."""
        topo = view.topo
        out: dict[int, int] = {}
        for x in topo.server_gpus(int(topo.gpu_server[gpu])).tolist():
            for k in (int(view.gpu_job[x]), int(view.gpu_guest[x])):
                if k >= 0 and k not in tenants:
                    out.setdefault(k, x)
        return tuple((self._desc.get(k, x), Sharing.SERVER) for k, x in sorted(out.items()))

    def order(self, view: SchedulerView, queue: np.ndarray) -> np.ndarray:
        queue = np.sort(queue)
        if self.history is None or not len(queue):
            return queue
        return queue[np.lexsort((queue, self.history.expected_remaining(view, queue)))]

    def schedule(self, view: SchedulerView) -> list[Decision]:
        if self.under is not None:
            return self._schedule_under(view)
        if self.history is not None:
            self.history.learn(view)
        queue = self.order(view, np.asarray(view.queue, dtype=np.int64))
        sharing = self.needs_gpu_sharing
        guest = getattr(view, "gpu_guest", None) if sharing else None
        shared = np.flatnonzero(guest >= 0) if guest is not None else np.empty(0, dtype=np.int64)
        if not len(queue) and not (len(shared) and view.num_free):
            return []
        if sharing and not getattr(view, "gpu_sharing", False):
            raise ValueError(f"{self.name} shares GPUs: run the simulator with gpu_sharing (--gpu-sharing)")
        if self.online and len(shared):
            self._observe(view, shared)
        pool = FreePool(view)
        decisions: list[Decision] = list(self.start_in_order(view, queue, pool, backfill=True))
        if not sharing:
            return decisions
        started = {d.job for d in decisions}
        waiting = [j for j in queue.tolist() if j not in started and int(view.jobs.num_gpus[j]) == 1]
        if waiting:
            holder = np.array(view.gpu_job)
            fresh = {int(d.gpus[0]): d.job for d in decisions if len(d.gpus) == 1}  # hosts from this round
            holder[list(fresh)] = list(fresh.values())
            decisions += self._pack(view, waiting, holder, np.asarray(view.gpu_guest))
        if pool.num_free and len(shared):  # unpack: guests move to GPUs nobody waits for
            decisions += self._unpack(view, shared.tolist(), guest, pool)
        return decisions

    def _schedule_under(self, view: SchedulerView) -> list[Decision]:
        """The preemptive scheduler's round on the view without guests, then packing and unpacking."""
        sharing = getattr(view, "gpu_sharing", False)
        if not self.needs_gpu_sharing or (not sharing and not len(view.queue)):
            return list(self.under.schedule(view))
        if not sharing:
            raise ValueError(f"{self.name} shares GPUs: run the simulator with gpu_sharing (--gpu-sharing)")
        guest = np.asarray(view.gpu_guest)
        shared = np.flatnonzero(guest >= 0)
        if self.online and len(shared):
            self._observe(view, shared)
        decisions = list(self.under.schedule(_WithoutGuests(view, guest[shared])))
        pool = FreePool(view)
        guest = guest.copy()
        host_gpu = {int(view.gpu_job[g]): int(g) for g in shared.tolist()}
        evicted: list[Decision] = []
        for d in decisions:
            if isinstance(d, Preempt):
                pool.release(view.placement(d.job), d.job)
                g = host_gpu.get(d.job)
                if g is not None:  # its guest leaves with it: the GPU is free, as the scheduler counted it
                    evicted.append(Preempt(int(guest[g])))
                    guest[g] = -1
            elif isinstance(d, Start):
                pool.take(d.gpus, d.job)
        out = [d for d in decisions if isinstance(d, Preempt)] + evicted
        out += [d for d in decisions if not isinstance(d, Preempt)]
        moved = self._unpack(view, np.flatnonzero(guest >= 0).tolist(), guest, pool)
        guest[np.isin(guest, [d.job for d in moved])] = -1
        out += moved
        started = {d.job for d in decisions if isinstance(d, Start)}
        waiting = [
            j for j in np.sort(np.asarray(view.queue, dtype=np.int64)).tolist()
            if j not in started and int(view.jobs.num_gpus[j]) == 1
        ]  # fmt: skip
        if waiting:
            out += self._pack(view, waiting, np.array(pool.gpu_job), guest)
        return out

    def _unpack(self, view: SchedulerView, gpus: list[int], guest: np.ndarray, pool: FreePool) -> list[Resize]:
        """The guests of ``gpus`` move to GPUs the round left free (paying the restart cost), while any are."""
        moves: list[Resize] = []
        for g in gpus:
            to = self.place(view, int(guest[g]), 1, pool) if pool.num_free else None
            if to is None:
                break
            pool.take(to, int(guest[g]))
            moves.append(Resize(int(guest[g]), to))
        return moves

    def _pack(self, view: SchedulerView, waiting: list[int], holder: np.ndarray, guest: np.ndarray) -> list[Start]:
        """Guests for GPUs that ``holder`` gives to one 1-GPU job and ``guest`` to no second one."""
        lone = (holder >= 0) & (guest < 0)
        lone[lone] = view.jobs.num_gpus[holder[lone]] == 1
        hosts = np.flatnonzero(lone).tolist()
        starts: list[Start] = []
        if self.mode == "blind":
            for j, g in zip(waiting, hosts, strict=False):
                starts.append(Start(j, np.array([g], dtype=np.int32)))
            return starts
        for j in waiting:
            if not hosts:
                break
            gains = [self._pair_gain(view, j, int(holder[g]), g) for g in hosts]
            best = int(np.argmax(gains))
            if gains[best] < self.min_gain:
                continue
            starts.append(Start(j, np.array([hosts.pop(best)], dtype=np.int32)))
        return starts

    def _pair_gain(self, view: SchedulerView, job: int, tenant: int, gpu: int) -> float:
        """Predicted f_job + f_tenant on one GPU (cached per pair of descriptors)."""
        a, b = self._desc.get(job, gpu), self._desc.get(tenant, gpu)
        gain = self._gain.get((a, b))
        if gain is None:
            f = self.model.throughput_factors([CoLocation(a, ((b, Sharing.GPU),)), CoLocation(b, ((a, Sharing.GPU),))])
            gain = self._gain[(a, b)] = float(f[0] + f[1])
        return gain
