"""Simulator mechanics: exact hand-computed cases, validation of decisions, uplink contention, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from cluster_sim.perf_model import PerformanceModel
from cluster_sim.protocol import InvalidDecision, Preempt, Resize, Start
from cluster_sim.simulator import Simulator
from cluster_sim.workload import Workload
from topology import build_cluster, parse_spec


def tiny_cluster(servers: int = 2, racks: int = 1, pods: int = 1, server: str = "nvswitch-8", pod_over: float = 1.0):
    spec = parse_spec(
        {
            "name": "tiny",
            "pods": pods,
            "racks_per_pod": racks,
            "servers_per_rack": servers,
            "server": server,
            "gpu_type": "V100",
            "pod_oversubscription": pod_over,
        }
    )
    return build_cluster(spec)


def workload(arrival, gpus, duration, model: str = "resnet18-cifar10", tenant=None) -> Workload:
    n = len(arrival)
    return Workload(
        arrival=np.asarray(arrival, dtype=np.float64),
        num_gpus=np.asarray(gpus, dtype=np.int32),
        duration=np.asarray(duration, dtype=np.float64),
        model=np.zeros(n, dtype=np.int16),
        batch_size=np.full(n, 128, dtype=np.int32),
        tenant=np.zeros(n, dtype=np.int16) if tenant is None else np.asarray(tenant, dtype=np.int16),
        models=(model,),
    )


class Script:
    """Issues fixed decisions at fixed times: lets a test drive the simulator decision by decision."""

    name = "script"
    wants_all_points = True

    def __init__(self, plan: dict[float, list], elastic: bool = False) -> None:
        self.plan = plan
        self.elastic = elastic  # whether the simulator lets elastic jobs resize and change batch size

    def reset(self, view) -> None:
        for t in self.plan:
            view.wake_at(t)

    def schedule(self, view) -> list:
        return self.plan.get(view.now, [])


class Greedy:
    """First-come first-served on the lowest free GPU ids."""

    name = "greedy"

    def reset(self, view) -> None:
        pass

    def schedule(self, view) -> list:
        free = np.flatnonzero(view.gpu_job < 0)
        out = []
        for j in view.queue:
            n = int(view.jobs.num_gpus[j])
            if n > len(free):
                break
            out.append(Start(j, free[:n]))
            free = free[n:]
        return out


def gpus(*ids: int) -> np.ndarray:
    return np.array(ids, dtype=np.int64)


def test_fifo_by_hand():
    # 16 GPUs. Job 0 takes 8 for 100 s, job 1 needs 16 and waits for it, job 2 (4 GPUs) waits behind job 1.
    c = tiny_cluster()
    r = Simulator(c.view, workload([0, 0, 10], [8, 16, 4], [100, 50, 10])).run(Greedy())
    assert r.start.tolist() == [0.0, 100.0, 150.0]
    assert r.end.tolist() == [100.0, 150.0, 160.0]
    assert r.jct.tolist() == [100.0, 150.0, 150.0]
    m = r.metrics()
    assert m["avg_jct"] == pytest.approx(400 / 3)
    assert m["avg_queue_delay"] == pytest.approx((0 + 100 + 140) / 3)
    assert m["makespan"] == 160.0
    # busy GPU-seconds: 8*100 + 16*50 + 4*10 over 16 GPUs * 160 s
    assert m["gpu_utilization"] == pytest.approx((800 + 800 + 40) / (16 * 160))


def test_preemption_keeps_progress_and_pays_restart_cost():
    c = tiny_cluster(servers=1)
    eight = gpus(*range(8))
    plan = {0.0: [Start(0, eight)], 10.0: [Preempt(0), Start(1, eight)], 30.0: [Start(0, eight)]}
    sim = Simulator(c.view, workload([0, 10], [8, 8], [100, 20]), restart_cost=5.0, record_history=True)
    r = sim.run(Script(plan))
    # job 0 ran 10 s, waited 20 s, stalls 5 s on resume, then needs the remaining 90 s
    assert r.end.tolist() == [125.0, 30.0]
    assert r.preemptions.tolist() == [1, 0]
    assert [(t, kind, j) for t, kind, j, _ in sim.history] == [
        (0.0, "start", 0),
        (10.0, "stop", 0),
        (10.0, "start", 1),
        (30.0, "stop", 1),
        (30.0, "start", 0),
        (125.0, "stop", 0),
    ]
    # waiting counts every wait, not only the one before the first start: job 0 waited 10..30
    assert r.first_start_delay.tolist() == [0.0, 0.0]
    assert r.queue_delay.tolist() == [20.0, 0.0]
    assert r.executed.tolist() == [105.0, 20.0]  # 10 s, then 5 s of restart stall and 90 s of work
    m = r.metrics()
    assert m["avg_queue_delay"] == 10.0 and m["avg_first_start_delay"] == 0.0
    assert m["preemptions_per_job"] == 0.5 and m["avg_gpus_held"] == 8.0
    # goodput: ideal run time over seconds on GPUs, so the restart stall costs job 0 a share of it
    assert r.goodput.tolist() == [100.0 / 105.0, 1.0] and m["avg_goodput"] == pytest.approx((100 / 105 + 1) / 2)


def test_a_scheduler_that_preempts_jobs_inside_their_restart_stall_again_and_again_is_said_to_thrash():
    """A job preempted THRASH times while its restart stall still ran made no progress in between: the run warns,
    naming how many jobs and the worst; preemptions after the stall (progress made) are no thrash."""
    import warnings

    from cluster_sim.protocol import ThrashWarning
    from cluster_sim.simulator import THRASH

    c, eight = tiny_cluster(servers=1), gpus(*range(8))

    def flips(gap: float) -> dict[float, list]:  # job 0 started, then preempted `gap` s later, THRASH + 1 times
        plan = {0.0: [Start(0, eight)]}
        for k in range(THRASH + 1):
            plan[100.0 * k + gap] = [Preempt(0)]
            plan[100.0 * k + 100.0] = [Start(0, eight)]
        plan[1e5] = [Start(1, eight)]  # job 1 after job 0's end
        return plan

    sim = Simulator(c.view, workload([0, 0], [8, 8], [50_000, 10]), restart_cost=30.0)
    said = rf"script: 1 of 2 jobs was preempted {THRASH} or more times before its restart had finished, making no "
    said += rf"progress in between \(job 0: {THRASH} of its {THRASH + 1} preemptions\)"
    with pytest.warns(ThrashWarning, match=said):
        r = sim.run(Script(flips(10.0)))  # the first start stalls for the start cost (0 here): that one ran
    assert r.preemptions[0] == THRASH + 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ThrashWarning)
        sim.run(Script(flips(40.0)))  # each preemption after its 30 s stall: the job progressed every time


def test_a_scheduler_that_starts_nothing_and_asks_for_no_wake_up_is_named_in_the_stall():
    from cluster_sim.simulator import SimulationStalled

    sim = Simulator(tiny_cluster().view, workload([0, 5], [8, 8], [100, 100]))
    with pytest.raises(SimulationStalled, match=r"2 jobs would wait for ever \(first: job 0, queued\): script left "
                       r"them queued .* call view.wake_at\(t\)"):  # fmt: skip
        sim.run(Script({}))


def test_resize_changes_speed_as_the_performance_model_says():
    c = tiny_cluster(servers=2)
    perf = PerformanceModel(c.view)
    w = workload([0], [8], [1000])
    sim = Simulator(c.view, w, perf=perf, restart_cost=7.0)
    spread = gpus(0, 1, 2, 3, 8, 9, 10, 11)  # same GPU count over two servers: slower than one server
    r = sim.run(Script({0.0: [Start(0, gpus(*range(8)))], 100.0: [Resize(0, spread)]}))
    speed = perf.speed(0, 128, spread)
    assert speed < 1.0
    assert r.end[0] == pytest.approx(100.0 + 7.0 + 900.0 / speed, rel=1e-12)


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Start(0, gpus(0, 0)), "names a GPU twice"),
        (Start(0, gpus(0, 99)), "no such GPU"),
        (Start(0, gpus(-1, 0)), "no such GPU"),  # never read as the last GPU
        (Start(0, gpus(0, 1)), "asks for 1"),
        (Start(7, gpus(0)), "no such job"),
        (Preempt(0), "not running"),
        (Start(1, gpus(3)), "has not arrived"),
    ],
)
def test_invalid_decisions_are_rejected_with_job_and_gpus(decision, message):
    c = tiny_cluster(servers=1)
    sim = Simulator(c.view, workload([0, 50], [1, 1], [10, 10]))
    with pytest.raises(InvalidDecision, match=message):
        sim.run(Script({0.0: [decision]}))


def test_gpu_held_by_another_job_is_named():
    """The error names the scheduler and the simulated time (a run may compare several), then the job and GPU."""
    c = tiny_cluster(servers=1)
    sim = Simulator(c.view, workload([0, 5, 5], [2, 2, 2], [10, 10, 10]))
    with pytest.raises(
        InvalidDecision, match=r"^script at t=5 s: cannot start job 2: GPUs already held: GPU 1 \(job 0\)"
    ):
        sim.run(Script({0.0: [Start(0, gpus(0, 1))], 5.0: [Start(1, gpus(2, 3)), Start(2, gpus(1, 4))]}))


def test_starting_a_running_job_twice_is_rejected():
    c = tiny_cluster(servers=1)
    sim = Simulator(c.view, workload([0], [1], [10]))
    with pytest.raises(InvalidDecision, match="already running"):
        sim.run(Script({0.0: [Start(0, gpus(0)), Start(0, gpus(1))]}))


def test_job_larger_than_cluster_is_refused_up_front():
    c = tiny_cluster(servers=1)
    with pytest.raises(
        ValueError,
        match=r"1 job\(s\) ask for more GPUs than cluster 'tiny' has \(8\), the first \(job 0 in "
        r"arrival order\) 16; .* a workload spec's ,max_gpus=8 does",
    ):
        Simulator(c.view, workload([0], [16], [10]))


def test_jobs_sharing_an_oversubscribed_uplink_slow_each_other():
    # two pods of one rack of two servers; pod uplinks 4:1 oversubscribed. A 16-GPU job spanning both pods
    # alone, then together with a second such job.
    c = tiny_cluster(servers=2, racks=1, pods=2, pod_over=4.0)
    perf = PerformanceModel(c.view)
    a = np.concatenate([np.arange(0, 8), np.arange(16, 24)])
    b = np.concatenate([np.arange(8, 16), np.arange(24, 32)])
    alone = Simulator(c.view, workload([0], [16], [1000]), perf=perf).run(Script({0.0: [Start(0, a)]}))
    both = Simulator(c.view, workload([0, 0], [16, 16], [1000, 1000]), perf=perf).run(
        Script({0.0: [Start(0, a), Start(1, b)]})
    )
    assert both.end[0] > alone.end[0]
    assert alone.end[0] == pytest.approx(1000.0 / perf.speed(0, 128, a), rel=1e-12)


def test_same_inputs_give_bit_identical_results():
    c = build_cluster("small")
    rng = np.random.default_rng(3)
    n = 400
    w = workload(np.sort(rng.uniform(0, 5000, n)), rng.choice([1, 2, 4, 8, 16], n), rng.lognormal(5, 1, n))
    runs = [Simulator(c.view, w, perf=PerformanceModel(c.view)).run(Greedy()) for _ in range(2)]
    assert np.array_equal(runs[0].end, runs[1].end)
    assert np.array_equal(runs[0].start, runs[1].start)
    assert runs[0].metrics()["avg_jct"] == runs[1].metrics()["avg_jct"]


def test_a_simulation_puts_blas_on_one_thread() -> None:
    """Starting a simulation sets every loaded BLAS library (NumPy's, SciPy's) to one thread, whatever it had:
    a simulation's tiny linear algebra ran many times slower on BLAS's threads (cluster_sim.blas_threads)."""
    import scipy.linalg  # noqa: F401  (SciPy's BLAS loaded, as the simulator's fits load it)
    from threadpoolctl import ThreadpoolController

    from cluster_sim import blas_threads

    def pools():
        return ThreadpoolController().select(user_api="blas").lib_controllers

    if not pools():
        pytest.skip("no BLAS library that threadpoolctl can set")
    for pool in pools():
        pool.set_num_threads(2)  # as on a 2-core machine by default
    blas_threads.one_blas_thread.cache_clear()
    Simulator(tiny_cluster().view, workload([0, 0], [8, 4], [100, 50])).run(Greedy())
    assert {pool.filepath: pool.num_threads for pool in pools()} == {pool.filepath: 1 for pool in pools()}


def test_results_files_are_written(tmp_path):
    c = tiny_cluster()
    r = Simulator(c.view, workload([0, 0, 10], [8, 16, 4], [100, 50, 10])).run(Greedy())
    m = r.write(tmp_path)
    import csv
    import json

    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk == m
    for key in ("jobs_total", "jobs_completed", "avg_jct", "p50_jct", "p95_jct", "p99_jct", "avg_queue_delay",
                "makespan", "gpu_utilization", "mean_slowdown", "events", "wall_seconds"):  # fmt: skip
        assert key in on_disk
    rows = list(csv.DictReader((tmp_path / "jobs.csv").open()))
    assert [float(row["jct"]) for row in rows] == [100.0, 150.0, 150.0]
    assert rows[1]["placement_span"] == "rack"
    assert not list(tmp_path.glob(".*tmp"))
    # the same table, unrounded, as a DataFrame for a notebook
    frame = r.jobs_frame()
    assert list(frame.columns) == list(rows[0])[1:] and frame.index.name == "id"
    np.testing.assert_array_equal(frame["jct"].to_numpy(), r.jct)
    assert frame.loc[1, "placement_span"] == "rack" and frame["model"].tolist() == [r["model"] for r in rows]


def test_vectorised_remaining_times_equal_the_one_job_answers() -> None:
    """``remaining_times`` (used by SRTF on long queues) agrees with ``remaining_time`` at every point,
    for waiting, stalled and running jobs alike."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    sim = build_simulator("small", "synthetic:300,load=50", seed=3, restart_cost=30)
    sched = get_policy("srtf", seed=0)
    sim.reset()
    sched.reset(sim)
    checked = 0
    while sim.advance():
        jobs = np.flatnonzero((sim.job_states == 1) | (sim.job_states == 2))
        np.testing.assert_array_equal(sim.remaining_times(jobs), [sim.remaining_time(int(j)) for j in jobs])
        checked += len(jobs)
        decisions = sched.schedule(sim)
        if decisions:
            sim.apply(decisions)
    assert checked > 1000 and sim.num_completed == 300


def _recount(sim: Simulator) -> None:
    """The simulator's incremental counts against a count from scratch."""
    topo = sim.topo
    for r in range(topo.num_racks):
        assert sim._rack_load[r] == len(sim._rack_uplink.get(r, {}))
    for p in range(topo.num_pods):
        assert sim._pod_load[p] == len(sim._pod_uplink.get(p, {}))
    for j, (racks, pods) in sim._uplinks_of.items():
        busiest = max(len(sim._rack_uplink[r]) for r in racks)
        busiest = max([busiest, *(len(sim._pod_uplink[p]) for p in pods)])
        assert sim._sharers[j] == busiest, f"job {j}"
    free = np.asarray(sim.server_free, dtype=np.int64)
    counts = sim.free_counts
    assert np.array_equal(counts.server[:-1], free) and counts.server[-1] == 0
    assert np.array_equal(counts.rack[:-1], np.bincount(topo.server_rack, weights=free, minlength=topo.num_racks))
    assert np.array_equal(counts.pod, np.bincount(topo.rack_pod, weights=counts.rack[:-1], minlength=topo.num_pods))
    assert np.array_equal(counts.hist, np.bincount(free, minlength=len(counts.hist)))


@pytest.mark.parametrize("policy", ["greedy", "tiresias"])
def test_incremental_uplink_sharers_and_free_counts_match_a_recount(policy: str) -> None:
    """Uplink sharers are updated only for the jobs whose busiest uplink changed, and free counts per
    server, rack and pod one server at a time: both must equal a recount at every scheduling point,
    with multi-rack jobs starting, finishing and (tiresias) being preempted."""
    from cluster_sim.policies import get_policy

    c = build_cluster("small")
    rng = np.random.default_rng(5)
    n = 150
    w = workload(np.sort(rng.uniform(0, 4000, n)), rng.choice([8, 16, 24, 40, 64, 96], n), rng.lognormal(6, 1, n))
    sim = Simulator(c.view, w, perf=PerformanceModel(c.view), restart_cost=10.0)
    sched = Greedy() if policy == "greedy" else get_policy(policy, seed=0)
    sim.reset()
    sched.reset(sim)
    crossing = 0
    while sim.advance():
        _recount(sim)
        crossing = max(crossing, len(sim._uplinks_of))
        if len(sim.queue):
            sim.apply(sched.schedule(sim))
            _recount(sim)
    assert crossing >= 3  # several jobs crossed uplinks at once


def _expected_after_take(sim: Simulator, g: int, job: int) -> tuple[np.ndarray, np.ndarray]:
    gpu_job = np.array(sim.gpu_job, dtype=np.int32)
    gpu_job[g] = job
    server = np.append(np.asarray(sim.server_free, dtype=np.int64), 0)
    server[sim.topo.gpu_server[g]] -= 1
    return gpu_job, server


def test_scratch_lent_to_one_pool_per_round_matches_the_truth() -> None:
    """The first pool that writes in a round gets the simulator's scratch arrays, brought back to the
    truth from the GPUs and servers that changed since the last loan (or copied afresh after many); a
    second pool of the same round copies, so the two never share an array."""
    from cluster_sim.placement import FreePool
    from cluster_sim.policies import get_policy

    c = build_cluster("small")
    rng = np.random.default_rng(9)
    n = 200
    w = workload(np.sort(rng.uniform(0, 5000, n)), rng.choice([1, 4, 8, 16, 40], n), rng.lognormal(6, 1, n))
    sim = Simulator(c.view, w, perf=PerformanceModel(c.view), restart_cost=10.0)
    sched = get_policy("tiresias", seed=0)
    sim.reset()
    sched.reset(sim)
    leased = rounds = 0
    while sim.advance():
        rounds += 1
        free = np.flatnonzero(np.asarray(sim.gpu_job) < 0)
        if len(free) >= 2 and rounds % 5:  # every fifth round lends nothing, so changes pile up
            a, b = FreePool(sim), FreePool(sim)
            a.take(free[:1], 0)
            b.take(free[1:2], 1)
            assert a.gpu_job is not b.gpu_job and a.server_free is not b.server_free
            leased += a.gpu_job is sim.free_counts._scratch[0]
            for pool, g, job in ((a, free[0], 0), (b, free[1], 1)):
                gpu_job, server = _expected_after_take(sim, g, job)
                assert np.array_equal(pool.gpu_job, gpu_job) and np.array_equal(pool.server_free, server)
                assert np.array_equal(pool.hist, np.bincount(server[:-1], minlength=len(pool.hist)))
                assert np.array_equal(pool.rack_free[:-1], np.bincount(c.view.server_rack, weights=server[:-1]))
            assert np.array_equal(sim.gpu_job[free[:2]], [-1, -1])  # the truth is untouched
        if len(sim.queue):
            sim.apply(sched.schedule(sim))
    assert sim.num_completed == n and leased > 50


def test_heap_compaction_keeps_the_order_of_events(monkeypatch) -> None:
    """Dropping superseded completion entries in bulk gives the same run, bit for bit."""
    import cluster_sim.simulator as simulator
    from cluster_sim.policies import get_policy

    c = build_cluster("small")
    rng = np.random.default_rng(8)
    n = 300
    w = workload(np.sort(rng.uniform(0, 6000, n)), rng.choice([8, 16, 40, 64], n), rng.lognormal(6, 1, n))
    runs = []
    for at in (simulator._COMPACT_MIN, 8):
        monkeypatch.setattr(simulator, "_COMPACT_MIN", at)
        runs.append(Simulator(c.view, w, perf=PerformanceModel(c.view)).run(get_policy("tiresias", seed=0)))
    assert np.array_equal(runs[0].end, runs[1].end) and np.array_equal(runs[0].start, runs[1].start)
    assert runs[0].metrics()["events"] == runs[1].metrics()["events"]


def test_ordered_ids_come_out_in_insertion_order_through_removals_and_compactions() -> None:
    from cluster_sim.ordered_ids import OrderedIds

    rng = np.random.default_rng(4)
    ids, ref = OrderedIds(200), {}
    for step in range(3000):
        j = int(rng.integers(0, 200))
        if j in ref:
            ids.remove(j)
            del ref[j]
        else:
            ids.add(j)
            ref[j] = None
        if step % 7 == 0:
            assert ids.array().tolist() == list(ref) and len(ids) == len(ref)
    with pytest.raises(KeyError):
        ids.remove(next(j for j in range(200) if j not in ref))


def test_ordered_ids_served_in_order_hand_out_views_that_later_changes_leave_intact() -> None:
    """A queue that only loses its oldest members comes out as a view of the log; arrays handed out
    earlier keep their contents through later additions and compactions."""
    from cluster_sim.ordered_ids import OrderedIds

    rng = np.random.default_rng(6)
    ids, ref, handed = OrderedIds(5000), [], []
    nxt = 0
    for step in range(4000):
        if ref and rng.random() < 0.45:
            ids.remove(ref.pop(0))
        else:
            ids.add(nxt)
            ref.append(nxt)
            nxt += 1
        if step % 5 == 0:
            arr = ids.array()
            assert arr.tolist() == ref and not arr.flags.writeable
            handed.append((arr, list(ref)))
    assert sum(a.base is not None for a, _ in handed) > len(handed) // 2  # mostly views, not copies
    assert all(a.tolist() == r for a, r in handed)


def test_outputs_respect_the_umask(tmp_path) -> None:
    """Results are written through a private temporary file but end with the mode any new file gets."""
    import os

    from cluster_sim.results import write_atomic

    old = os.umask(0o022)
    try:
        for i, content in enumerate(("text\n", b"bytes", [["a", "b"], [1, 2]])):
            path = tmp_path / f"out{i}"
            write_atomic(path, content)
            assert (path.stat().st_mode & 0o777) == 0o644
        os.umask(0o077)
        write_atomic(tmp_path / "private", "x")
        assert ((tmp_path / "private").stat().st_mode & 0o777) == 0o600
    finally:
        os.umask(old)
    assert not list(tmp_path.glob(".*.tmp"))


def test_run_is_start_then_steps_and_a_scheduler_is_consulted_only_where_jobs_wait() -> None:
    """``Simulator.step`` is ``run``'s loop, for the environments and look-ahead that drive a simulator
    themselves: stepping by hand gives ``run``'s schedule bit for bit; a scheduler is asked only at points with
    waiting jobs, unless it declares ``wants_all_points``."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from cluster_sim.protocol import traits_of

    class Counting:
        def __init__(self, inner, every: bool) -> None:
            self.inner, self.name, self.calls, self.wants_all_points = inner, inner.name, 0, every

        def reset(self, view) -> None:
            self.inner.reset(view)

        def schedule(self, view):
            self.calls += 1
            return self.inner.schedule(view)

    sim = build_simulator("small", "synthetic:300,load=2", seed=3, restart_cost=30)
    ran = sim.run(get_policy("tiresias"))
    counted = Counting(get_policy("tiresias"), every=False)
    sim.start(counted)
    points = 0
    while sim.step(counted):
        points += 1
    stepped = sim.result(counted.name, 0.0)
    np.testing.assert_array_equal(stepped.end, ran.end)
    np.testing.assert_array_equal(stepped.preemptions, ran.preemptions)
    assert 0 < counted.calls < points  # points with no waiting job are not asked about
    every = Counting(get_policy("tiresias"), every=True)
    assert traits_of(every).wants_all_points and not traits_of(counted.inner).wants_all_points
    sim.start(every)
    steps = 0
    while sim.step(every):
        steps += 1
    assert every.calls == steps


def test_a_periodic_scheduler_that_never_starts_the_waiting_jobs_is_stopped_as_stalled() -> None:
    """Waking itself every minute, a scheduler that starts nothing on an idle cluster once every job has
    arrived would never end: the run stops with the jobs, the scheduler and what to look at. One that starts
    them late, after thousands of idle rounds of its own choosing, is not stopped."""
    from cluster_sim.simulator import IDLE_ROUNDS

    class Waiting:
        name = "waiting"

        def __init__(self, start_after: int | None) -> None:
            self.start_after, self.rounds = start_after, 0

        def reset(self, view) -> None:
            self.rounds = 0

        def schedule(self, view) -> list:
            self.rounds += 1
            view.wake_at(view.now + 60.0)
            if self.start_after is not None and self.rounds > self.start_after:
                return [Start(int(j), np.arange(int(view.jobs.num_gpus[j]))) for j in view.queue]
            return []

    jobs = workload([0.0], [2], [100.0])
    with pytest.raises(RuntimeError, match=r"stalled at t=.*1 jobs wait on an idle cluster .* waiting started none"):
        Simulator(tiny_cluster().view, jobs).run(Waiting(None))
    late = Simulator(tiny_cluster().view, jobs).run(Waiting(IDLE_ROUNDS // 2))
    assert late.end[0] == pytest.approx(60.0 * (IDLE_ROUNDS // 2) + 100.0)


def test_simulate_reports_a_stalled_scheduler_and_runs_the_others(tmp_path, capsys) -> None:
    """One scheduler that cannot finish a workload (here one that starts nothing) is named with the stall's reason
    and left out; the others' results are printed and written, and the exit status says one failed."""
    from experiments.cli import main

    never = tmp_path / "never.py"
    never.write_text(
        "class Never:\n    name = 'never'\n\n    def reset(self, view):\n        pass\n\n"
        "    def schedule(self, view):\n        return []\n"
    )
    out = tmp_path / "out"
    argv = ["simulate", "--cluster", "small", "--workload", "synthetic:1000,window_load=1.0", "--quiet",
            "--policy", f"{never}:Never,fifo,tiresias", "--out", str(out)]  # fmt: skip
    assert main(argv) == 1
    printed = capsys.readouterr()
    assert "never: simulation stalled at t=" in printed.err and "left out of the results" in printed.err
    assert "fifo " in printed.out and "tiresias " in printed.out and "never" not in printed.out
    assert (out / "fifo" / "jobs.csv").is_file() and (out / "tiresias" / "metrics.json").is_file()


def test_the_table_says_why_a_slowdown_is_below_one_where_one_is() -> None:
    """A slowdown under 1 reads as a bug unless the table says its reference (the trace's GPU type); a table of
    slowdowns at or above 1 carries no such line."""
    from cluster_sim.results import METRIC_KEYS
    from experiments.simulate import summary_table

    row = {key: 1.5 for key in METRIC_KEYS} | {"scheduler": "fifo"}
    assert "slowdown: JCT over" not in summary_table([row])
    table = summary_table([row, row | {"scheduler": "gavel-las", "mean_slowdown": 0.45}])
    assert table.splitlines()[-1].startswith("slowdown: JCT over the job's run time") and "faster type" in table


def test_a_long_simulation_into_a_log_says_every_so_often_how_far_it_is(monkeypatch, capsys) -> None:
    """Where stderr is no terminal (a pipe, a log file: here pytest's capture) a progress bar is off; a plain line
    at most every ``LINE_EVERY`` seconds says how many jobs are done, and a run shorter than that says nothing."""
    from cluster_sim import simulator as simulator_module
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    sim = build_simulator("small", "synthetic:300,load=2", seed=3, restart_cost=30)
    sim.run(get_policy("fifo"), progress=True)
    assert "jobs done" not in capsys.readouterr().err
    monkeypatch.setattr(simulator_module._Progress, "LINE_EVERY", 0.0)
    sim.run(get_policy("fifo"), progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) > 10 and all(line.startswith("simulate fifo: ") for line in lines)
    assert "/300 jobs done at simulated " in lines[-1] and " h (" in lines[-1]
