"""Elastic jobs: work in statistical progress across resizes and batch changes, validated decisions,
Pollux's goodput fit, and the ``pollux`` policy on Pollux's own workload."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cluster_sim.build import build_simulator
from cluster_sim.goodput import GoodputFunction, fit_perf_params, step_time
from cluster_sim.policies import get_policy
from cluster_sim.policies.elastic import greedy_counts
from cluster_sim.pollux_apps import EPOCHS, load_application
from cluster_sim.protocol import InvalidDecision, Resize, SetBatch, Start
from tests.test_simulator import Script
from topology.view import Level


def one_job(pollux_dir: Path, **kw):
    """The first job of workload-1: cifar10, 6 GPUs asked, batch 2048, arriving at 107 s."""
    spec = f"pollux:{pollux_dir}/workloads/workload-1.csv,max_jobs=1"
    return build_simulator("pollux-testbed", spec, restart_cost=30.0, start_cost=30.0, **kw)


def expected_end(app, stints: list[tuple[float, float, tuple[int, ...], int]]) -> float:
    """Completion time of a job run in ``stints`` (decided at, progress resumes at, placement, batch),
    each until the next decision, stepped epoch by epoch from the measurements: an account independent
    of the simulator's event bookkeeping."""
    epoch, progress = 0, 0.0
    for k, (_, t, placement, batch) in enumerate(stints):
        until = stints[k + 1][0] if k + 1 < len(stints) else np.inf
        while epoch < app.epochs:
            rate = app.rate(placement, batch, epoch)
            need = (app.progress_at(epoch + 1) - progress) / rate
            if t + need > until:
                progress += rate * (until - t)
                break
            t += need
            epoch, progress = epoch + 1, app.progress_at(epoch + 1)
        else:
            return t
    raise AssertionError("the job never finishes")


def test_resize_and_batch_change_conserve_work(pollux_dir: Path):
    sim = one_job(pollux_dir)
    app = sim.application(0)
    four, eight = np.arange(4), np.arange(8)
    plan = {
        107.0: [Start(0, four, batch_size=1024)],
        400.0: [Resize(0, eight, batch_size=2048)],  # two nodes; 30 s restart
        700.0: [SetBatch(0, 1536)],  # in place: no restart
    }
    r = sim.run(Script(plan, elastic=True))
    stints = [(107.0, 137.0, (4,), 1024), (400.0, 430.0, (4, 4), 2048), (700.0, 700.0, (4, 4), 1536)]
    want = expected_end(app, stints)
    assert r.end[0] > 700.0
    assert r.end[0] == pytest.approx(want, rel=1e-9)
    assert r.metrics()["resizes_per_job"] == 1.0
    # a rigid run of the same job takes its ideal duration on its 6 GPUs plus the start-up
    rigid = one_job(pollux_dir).run(Script({107.0: [Start(0, np.arange(6))]}, elastic=False))
    assert rigid.end[0] == pytest.approx(137.0 + sim.jobs.duration[0], rel=1e-9)
    assert rigid.goodput[0] == pytest.approx(sim.jobs.duration[0] / (sim.jobs.duration[0] + 30.0), rel=1e-9)
    assert r.goodput[0] != pytest.approx(rigid.goodput[0], rel=1e-3)  # resizing changed how fast it trained


def test_remaining_time_and_job_report_follow_the_job(pollux_dir: Path):
    sim = one_job(pollux_dir, elastic=True)
    app = sim.application(0)
    sim.reset()
    assert sim.job_report(0) is None  # nothing measured before it runs
    while sim.now < 107.0:
        sim.advance()
    sim.apply([Start(0, np.arange(4), batch_size=1024)])
    report = sim.job_report(0)
    assert list(report.profile) == [(1, 4, 256)]
    assert report.profile[(1, 4, 256)] == app.step_time((4,), 256)
    assert (report.grad_sqr, report.grad_var) == app.grad_stats(1024, 0)
    assert sim.remaining_time(0) == pytest.approx(app.seconds_left((4,), 1024, 0, 0.0))


@pytest.mark.parametrize(
    ("elastic", "decisions", "message"),
    [
        (False, lambda app: [Start(0, np.arange(4))], "it asks for 6; only an elastic job"),
        (True, lambda app: [Start(0, np.arange(4), batch_size=app.max_batch_size + 1)], "must lie in"),
        (True, lambda app: [Start(0, np.arange(4), batch_size=1024.0)], "must be an integer"),
        (True, lambda app: [Start(0, np.arange(2), batch_size=2 * app.min_local_bsz - 1)], "must lie in"),
        (False, lambda app: [Start(0, np.arange(6)), SetBatch(0, 1024)], "only elastic jobs"),
        (True, lambda app: [SetBatch(0, 1024)], "not waiting or running"),  # it has not arrived
        (False, lambda app: [Start(0, np.arange(6)), Resize(0, np.arange(8))], "cannot resize job 0 on 8 GPUs"),
    ],
)
def test_bad_elastic_decisions_are_named(pollux_dir: Path, elastic, decisions, message):
    sim = one_job(pollux_dir, elastic=elastic)
    app = sim.application(0)
    sim.reset()
    if "not waiting" not in message:
        while sim.now < 107.0:
            sim.advance()
    with pytest.raises(InvalidDecision, match=message):
        sim.apply(decisions(app))
    # an elastic job ranges from 1 GPU to its largest batch over its smallest per-GPU batch (64 GPUs here)
    want = (1, min(64, app.max_batch_size // app.min_local_bsz)) if elastic else (6, 6)
    assert sim.gpu_range(0) == want


@pytest.mark.parametrize("name", sorted(EPOCHS))
def test_goodput_fit_reproduces_measured_step_times(pollux_dir: Path, name: str):
    """Pollux's throughput model fitted to every measured placement of an application predicts those step
    times with a median error within 8% (4-7% by application) and none off by half (the worst, 30-44%,
    are the few placements that spread a few GPUs over many nodes)."""
    app = load_application(pollux_dir / "traces", name)
    m = app.steps
    rows = m.from_placements
    n, r, b = m.nodes[rows], m.replicas[rows], m.local_bsz[rows]
    params = fit_perf_params(n, r, b, m.step_time[rows] - m.sync_time[rows], m.step_time[rows])
    err = np.abs(step_time(params, n, r, b, 0) / m.step_time[rows] - 1)
    assert np.median(err) < 0.08 and err.max() < 0.5, (np.median(err), err.max())


def test_goodput_optimum_prefers_larger_batches_when_gradients_are_noisy():
    params = fit_perf_params([1, 1, 2], [1, 4, 8], [32, 64, 64], [0.1, 0.2, 0.2], [0.12, 0.3, 0.5])
    noisy = GoodputFunction(params, grad_sqr=1.0, grad_var=100.0, init_batch_size=128)
    clean = GoodputFunction(params, grad_sqr=1.0, grad_var=0.01, init_batch_size=128)
    _, atomic_noisy, _ = noisy.optimize(2, 8, 4096, (16, 128))
    _, atomic_clean, _ = clean.optimize(2, 8, 4096, (16, 128))
    assert atomic_noisy[0] > atomic_clean[0]


def pollux_run(pollux_dir: Path, policy: str, jobs: int = 40, **kw):
    spec = f"pollux:{pollux_dir}/workloads/workload-1.csv,max_jobs={jobs}"
    sim = build_simulator("pollux-testbed", spec, restart_cost=30.0, start_cost=30.0, **kw)
    return sim, sim.run(get_policy(policy))


def test_pollux_policy_is_deterministic_and_beats_tiresias(pollux_dir: Path):
    _, a = pollux_run(pollux_dir, "pollux")
    _, b = pollux_run(pollux_dir, "pollux")
    assert np.array_equal(a.end, b.end)
    _, t = pollux_run(pollux_dir, "tiresias-pollux")
    assert a.metrics()["jobs_completed"] == 40
    assert a.metrics()["avg_jct"] < 0.85 * t.metrics()["avg_jct"]
    assert a.metrics()["resizes_per_job"] > 0  # it does resize jobs


def test_pollux_allocations_respect_its_constraints(pollux_dir: Path):
    sim, r = pollux_run(pollux_dir, "pollux", record_history=True)
    topo = sim.topo
    held: dict[int, np.ndarray] = {}
    times = sorted({t for t, *_ in sim.history})
    events = iter(sim.history)
    pending = next(events, None)
    for t in times:
        while pending is not None and pending[0] == t:
            _, kind, job, gpus = pending
            if kind == "start":
                held[job] = gpus
            else:
                held.pop(job)
            pending = next(events, None)
        multi_per_server = np.zeros(topo.num_servers, dtype=int)
        for job, gpus in held.items():
            servers = np.unique(topo.gpu_server[gpus])
            lo, hi = sim.gpu_range(job)
            assert lo <= len(gpus) <= hi and len(servers) <= 16
            if len(servers) > 1:
                multi_per_server[servers] += 1
        assert multi_per_server.max(initial=0) <= 1, f"two multi-node jobs share a node at t={t}"
    assert r.metrics()["jobs_completed"] == 40


@pytest.mark.slow
def test_pollux_replays_its_published_average_on_workload_1(pollux_dir: Path):
    """Pollux's own simulator: 2,089 s average JCT for workload-1 at load 1.0 under its policy (2,474 s
    under its Tiresias baseline). The whole 8-workload comparison is experiments/configs/pollux_osdi21.yaml."""
    sim = build_simulator(
        "pollux-testbed", f"pollux:{pollux_dir}/workloads/workload-1.csv", restart_cost=30.0, start_cost=30.0
    )
    r = sim.run(get_policy("pollux"))
    assert r.metrics()["jobs_completed"] == 160
    assert r.metrics()["avg_jct"] == pytest.approx(2089, rel=0.05)
    assert r.metrics()["avg_jct"] < 0.9 * 2474


def stepped(pollux_dir: Path, policy: str, jobs: int = 40):
    """Run ``policy`` on the first ``jobs`` of workload-1 event by event, yielding (simulator, scheduler)
    after each round of decisions, so a test can watch the state the policy leaves."""
    sim = build_simulator(
        "pollux-testbed", f"pollux:{pollux_dir}/workloads/workload-1.csv,max_jobs={jobs}", restart_cost=30.0,
        start_cost=30.0, elastic=True,
    )  # fmt: skip
    sched = get_policy(policy)
    sim.reset()
    sched.reset(sim)
    while sim.advance():
        sim.apply(sched.schedule(sim))
        yield sim, sched
    assert sim.result(policy, 0.0).metrics()["jobs_completed"] == jobs


@pytest.mark.parametrize("policy", ["optimus", "afs", "ones"])
def test_elastic_schedulers_finish_every_job_deterministically_and_resize(pollux_dir: Path, policy: str):
    _, a = pollux_run(pollux_dir, policy)
    _, b = pollux_run(pollux_dir, policy)
    assert np.array_equal(a.end, b.end)
    m = a.metrics()
    assert m["jobs_completed"] == 40
    assert m["resizes_per_job"] > 0  # they do resize jobs


def test_policies_that_do_not_tune_batch_sizes_keep_the_submitted_one(pollux_dir: Path):
    """Optimus and AFS run each job at the batch it was submitted with (raised only as far as its GPUs
    need); ONES lets GPUs follow the batch at the submitted per-GPU batch; Pollux picks its own."""
    seen: dict[str, set[tuple[int, int, int]]] = {}
    for policy in ("afs", "ones", "pollux"):
        configs = set()
        for sim, _ in stepped(pollux_dir, policy):
            for j in np.flatnonzero(sim.job_gpus_held > 0).tolist():
                configs.add((j, int(sim.job_gpus_held[j]), int(sim.job_batch_sizes[j])))
        seen[policy] = configs
    for j, n, batch in seen["afs"]:
        lo, hi = sim.batch_range(j, n)
        assert batch == min(max(int(sim.jobs.batch_size[j]), lo), hi)
    for j, n, batch in seen["ones"]:
        lo, hi = sim.batch_range(j, n)
        local = sim.jobs.batch_size[j] / sim.jobs.num_gpus[j]
        assert batch == min(max(round(local * n), lo), hi)
    tuned = sum(batch != min(max(int(sim.jobs.batch_size[j]), sim.batch_range(j, n)[0]), sim.batch_range(j, n)[1])
                for j, n, batch in seen["pollux"])  # fmt: skip
    assert tuned > 0


def test_fitted_optimus_learns_each_applications_length_from_finished_jobs(pollux_dir: Path):
    """Every job of an application in Pollux's workloads trains the same epochs, so once some have
    finished the fitted remaining work of a fresh job is the application's whole training."""
    for sim, sched in stepped(pollux_dir, "optimus"):  # noqa: B007 (the state after the last round)
        pass
    learned = 0
    for m in np.unique(sim.jobs.model).tolist():
        app = sim.application(int(np.flatnonzero(sim.jobs.model == m)[0]))
        if app is None or sched._app_count[m] == 0:
            continue
        est = float(sched._by_app.residual(np.array([m]), np.array([0.0]))[0])
        assert est == pytest.approx(app.total_progress, rel=1e-6)
        learned += 1
    assert learned >= 2


@pytest.mark.slow
def test_duration_trace_with_applications_keeps_its_lengths(pollux_dir: Path):
    """``apps=``: each Philly job trains a Pollux application for exactly its trace length on its requested
    GPUs placed tightly (8-GPU servers here), drawn without looking at the length; elastic runs resize."""
    spec = f"philly:{pollux_dir}/traces/philly.csv,max_jobs=30"
    plain = build_simulator("small", spec)
    sim = build_simulator("small", f"{spec},apps={pollux_dir}/traces")
    assert np.array_equal(sim.jobs.duration, plain.jobs.duration)
    apps = [sim.application(j) for j in range(len(sim.jobs))]
    assert sum(a is not None for a in apps) == len(apps)
    assert len({a.name for a in apps}) >= 4  # several applications, by a seeded draw
    again = build_simulator("small", f"{spec},apps={pollux_dir}/traces", seed=0)
    assert np.array_equal(again.jobs.model, sim.jobs.model)
    # the draw ignores lengths: the same jobs with other durations get the same applications
    for j, a in enumerate(apps):
        n = int(sim.jobs.num_gpus[j])
        assert a.batch_range(n)[0] <= sim.jobs.batch_size[j] <= a.max_batch_size
    r = sim.run(get_policy("fifo"))
    tight = np.flatnonzero((r.span <= Level.SERVER) & (r.preemptions == 0))  # one server, one stint
    assert len(tight)
    for j in tight:
        assert r.end[j] - r.start[j] == pytest.approx(sim.jobs.duration[j], rel=1e-6)
    elastic = build_simulator("small", f"{spec},apps={pollux_dir}/traces").run(get_policy("pollux", interval=3600))
    assert elastic.metrics()["jobs_completed"] == len(sim.jobs)
    assert elastic.metrics()["resizes_per_job"] > 0


def test_one_gpu_at_a_time_matches_a_plain_loop_and_caps_hold():
    """Optimus' rule (``max_step=1``): each GPU to the job whose cost falls most by one more GPU; the heap
    gives the plain loop's choices, ties to the lower job. A cap bounds every job, whatever the search."""
    rng = np.random.default_rng(3)
    for _ in range(30):
        jobs, width, free = 6, 9, int(rng.integers(1, 30))
        cost = np.cumsum(-rng.exponential(1.0, (jobs, width)) * (rng.random((jobs, width)) < 0.9), axis=1)
        valid = rng.random((jobs, width)) < 0.8
        valid[:, 0] = True
        counts, left = np.zeros(jobs, dtype=np.int64), free
        while left > 0:
            nxt = np.minimum(counts + 1, width - 1)
            ok = (counts + 1 < width) & valid[np.arange(jobs), nxt]
            gain = np.where(ok, cost[np.arange(jobs), counts] - cost[np.arange(jobs), nxt], -np.inf)
            if not gain.max() > 0:
                break
            counts[int(np.argmax(gain))] += 1
            left -= 1
        got = greedy_counts(cost, valid, np.zeros(jobs, dtype=np.int64), free, max_step=1)
        assert got.tolist() == counts.tolist()
        cap = rng.integers(0, width, jobs)
        for step in (1, None):
            capped = greedy_counts(cost, valid, np.zeros(jobs, dtype=np.int64), free, cap, max_step=step)
            assert (capped <= cap).all() and capped.sum() <= free


def test_swap_in_grows_a_fragmented_job_on_its_own_node(pollux_dir: Path):
    """Two 4-GPU nodes: A spans both (4 + 2), B and C hold one GPU each on node 1, which is full. B's
    count says 2; only a job on node 1 can make room, and A loses least by giving one up there."""
    sim = one_job(pollux_dir)
    sched = get_policy("pollux")
    server = sim.topo.gpu_server
    n0, n1 = np.flatnonzero(server == 0)[:4], np.flatnonzero(server == 1)[:4]
    placement = [np.concatenate([n0, n1[:2]]), n1[2:3], n1[3:4]]
    cost = np.full((3, 7), np.inf)
    cost[0, 4:7] = [1.3, 1.1, 1.0]  # A: 6 -> 5 GPUs costs 0.1
    cost[1, 0:3] = [9.0, 5.0, 3.0]  # B: 1 -> 2 GPUs gains 2
    cost[2, 0:2] = [8.0, 4.0]  # C: giving up its GPU costs 4
    sched.cost_table = cost
    sched._swap_in(sim, placement, np.array([6, 2, 1]), np.ones(3, dtype=np.int64))
    assert [len(g) for g in placement] == [5, 2, 1]
    assert set(server[placement[1]]) == {1} and np.intersect1d(placement[0], placement[1]).size == 0
    cost[0, 5] = 4.0  # now A loses more than B gains: nothing moves
    before = [g.copy() for g in placement]
    sched._swap_in(sim, placement, np.array([6, 3, 1]), np.ones(3, dtype=np.int64))
    assert all(np.array_equal(a, b) for a, b in zip(before, placement, strict=True))


def test_optimus_oracle_starts_a_lone_job_on_its_final_count(pollux_dir: Path):
    """Pollux's Optimus+Oracle knows each job's true speed: a lone job gets its GPUs at once (as many as
    still shorten its step at its batch). The fitted Optimus grows a job as it measures it."""
    sim = one_job(pollux_dir)
    oracle = sim.run(get_policy("optimus", oracle=True))
    fitted = one_job(pollux_dir).run(get_policy("optimus"))
    assert oracle.resizes[0] == 0 and fitted.resizes[0] >= 2
    held = oracle.attained[0] / oracle.executed[0]  # GPUs held throughout
    assert held == int(held) > 1


def test_an_elastic_scheduler_on_rigid_jobs_is_said_to_run_as_a_rigid_one(pollux_dir: Path) -> None:
    """Pollux and Sia resize only jobs of measured applications: on a workload with none they order and place
    what was asked, not as published, and the run says so; with ``apps=`` it does not, nor for rounds that keep
    every job's count (gavel-las)."""
    import warnings

    from cluster_sim.protocol import RigidWorkloadWarning

    for name in ("pollux", "sia"):
        with pytest.warns(RigidWorkloadWarning, match=rf"^{name}: no job of this workload can resize \(none trains"):
            build_simulator("small", "synthetic:20,load=1.0").run(get_policy(name))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RigidWorkloadWarning)
        build_simulator("small", f"synthetic:20,load=1.0,apps={pollux_dir}/traces").run(get_policy("pollux"))
        build_simulator("small", "synthetic:20,load=1.0").run(get_policy("gavel-las"))


@pytest.mark.parametrize("name", ["sia", "pollux", "gavel"])
def test_a_job_larger_than_max_nodes_full_nodes_runs_on_the_nodes_it_needs(tmp_path, name: str) -> None:
    """The round schedulers span a job over at most ``max_nodes`` (16) nodes; a job of 192 GPUs on 8-GPU nodes asks
    for 24, and it gets them on an idle cluster (it used to wait forever: the run stalled) in one round."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    trace = tmp_path / "big.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2024-03-10 00:00:00,3600,192,691200,a\n"
        "2024-03-10 00:01:00,3600,2,7200,a\n"
    )
    result = build_simulator("small", f"philly:{trace}", seed=0).run(get_policy(name))
    assert result.metrics()["jobs_completed"] == 2 and result.jct[0] < 3600 + 400
