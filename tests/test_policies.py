"""Heuristic schedulers and placement strategies, run through the real simulator.

Hand-computed cases use one 8-GPU server (``restart_cost=0``, no performance model, so every job runs at
speed 1 and its JCT is queueing plus duration). Placement checks build real occupancy by starting jobs
in the simulator and then ask the strategies for GPUs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_sim.model_zoo import MODEL_NAMES
from cluster_sim.perf_model import PerformanceModel
from cluster_sim.placement import PLACEMENTS, FreePool, get_placement
from cluster_sim.policies import ORDERINGS, POLICIES, get_policy, make_scheduler, policy_names
from cluster_sim.protocol import Preempt, Start
from cluster_sim.simulator import Simulator
from cluster_sim.workload import Workload
from topology import Level, build_cluster, parse_spec


def cluster(server: str = "nvswitch-8", servers: int = 1, racks: int = 1, pods: int = 1):
    spec = {"name": "t", "pods": pods, "racks_per_pod": racks, "servers_per_rack": servers, "server": server}
    return build_cluster(parse_spec({**spec, "gpu_type": "V100"})).view


def jobs(arrival, gpus, duration, tenant=None, model=None) -> Workload:
    n = len(arrival)
    return Workload(
        arrival=np.asarray(arrival, dtype=np.float64),
        num_gpus=np.asarray(gpus, dtype=np.int32),
        duration=np.asarray(duration, dtype=np.float64),
        model=np.zeros(n, dtype=np.int16) if model is None else np.asarray(model, dtype=np.int16),
        batch_size=np.full(n, 128, dtype=np.int32),
        tenant=np.zeros(n, dtype=np.int16) if tenant is None else np.asarray(tenant, dtype=np.int16),
        models=MODEL_NAMES,
        tenants=tuple("abcdefgh"[: max(2, 1 + int(np.max(tenant if tenant is not None else 0)))]),
    )


def run(policy, view, workload, **kw):
    sched = get_policy(policy, 0) if isinstance(policy, str) else policy
    return Simulator(view, workload, record_timeline=False, **kw).run(sched)


def random_workload(n: int = 120, seed: int = 7) -> Workload:
    """Contended mix on ``small`` (256 GPUs): 1-64 GPU jobs, heavy-tailed durations, three tenants."""
    rng = np.random.default_rng(seed)
    arrival = np.concatenate([[0.0], rng.exponential(5.0, n - 1).cumsum()])
    gpus = rng.choice([1, 2, 4, 8, 16, 32, 64], n, p=[0.35, 0.2, 0.15, 0.12, 0.08, 0.06, 0.04])
    return Workload(
        arrival=arrival,
        num_gpus=gpus.astype(np.int32),
        duration=rng.lognormal(6.5, 1.0, n),
        model=rng.integers(0, len(MODEL_NAMES), n).astype(np.int16),
        batch_size=(64 * gpus).astype(np.int32),
        tenant=rng.integers(0, 3, n).astype(np.int16),
        models=MODEL_NAMES,
        tenants=("a", "b", "c"),
    )


# ---------------------------------------------------------------- every policy, end to end
@pytest.fixture(scope="module")
def small():
    view = build_cluster("small").view
    return view, PerformanceModel(view), random_workload()


EXCLUSIVE = [p for p in POLICIES if not getattr(get_policy(p), "needs_gpu_sharing", False)]  # see test_gpu_sharing


@pytest.mark.parametrize("policy", [*EXCLUSIVE, "fifo+spread", "sjf+best-fit", "srtf+first-fit", "drf+gandiva"])
def test_policy_completes_random_workload(small, policy):
    view, perf, w = small
    res = run(policy, view, w, perf=perf)  # the simulator raises InvalidDecision on any bad decision
    assert np.isfinite(res.end).all(), f"{policy} left jobs unfinished"
    assert (res.start >= w.arrival).all()
    assert (res.end - res.start >= w.duration * (1 - 1e-9)).all()  # no job runs faster than ideal
    if not get_policy(policy, 0).preemptive:
        assert res.preemptions.sum() == 0


def test_policies_differ_and_oracle_helps(small):
    view, perf, w = small
    jct = {p: np.nanmean(run(p, view, w, perf=perf).jct) for p in ("fifo", "sjf", "tiresias", "random")}
    assert jct["sjf"] < jct["fifo"]
    assert jct["tiresias"] < jct["fifo"]  # 2D-LAS beats FIFO without knowing durations


def test_same_seed_same_result_and_seed_matters(small):
    view, perf, w = small
    a, b = run(get_policy("random", 3), view, w, perf=perf), run(get_policy("random", 3), view, w, perf=perf)
    np.testing.assert_array_equal(a.end, b.end)
    c = run(get_policy("random", 4), view, w, perf=perf)
    assert not np.array_equal(a.end, c.end)


# ---------------------------------------------------------------- hand-computed schedules
def test_fifo_and_sjf_jcts_on_one_server():
    w = jobs([0, 1, 2], [8, 8, 8], [100, 50, 10])
    # FIFO: A 0-100, B 100-150, C 150-160.  SJF: A 0-100 (alone), C 100-110, B 110-160.
    np.testing.assert_allclose(run("fifo", cluster(), w).jct, [100, 149, 158])
    np.testing.assert_allclose(run("sjf", cluster(), w).jct, [100, 159, 108])


def test_strict_fifo_blocks_and_backfill_does_not():
    w = jobs([0, 1, 2], [4, 8, 4], [100, 10, 10])
    # strict: B waits for A's GPUs and C waits behind B: B 100-110, C 110-120.
    np.testing.assert_allclose(run("fifo", cluster(), w).jct, [100, 109, 118])
    # backfill: C uses the 4 idle GPUs at t=2.
    backfill = make_scheduler("fifo", "consolidate", backfill=True)
    np.testing.assert_allclose(run(backfill, cluster(), w).jct, [100, 109, 10])


def test_srtf_preempts_long_job_for_short_one():
    w = jobs([0, 10], [8, 8], [100, 20])
    res = run("srtf", cluster(), w, restart_cost=0.0)
    # at t=10 A has 90 s left > 1.1 x 20: A stops, B runs 10-30, A resumes and ends at 30 + 90.
    np.testing.assert_allclose(res.jct, [120, 20])
    assert res.preemptions.tolist() == [1, 0]


def test_srtf_margin_prevents_marginal_preemption():
    w = jobs([0, 5], [8, 8], [100, 90])  # at t=5 A has 95 s left, B 90: within the 10 % margin
    res = run("srtf", cluster(), w)
    np.testing.assert_allclose(res.jct, [100, 185])
    assert res.preemptions.sum() == 0


def test_level_keys_kept_across_rounds_equal_a_fresh_sort() -> None:
    """Tiresias' kept (level, id) keys: after any mix of jobs entering, leaving, coming back and changing
    level, noted over one round or several, few at a time or many, the keys equal the members' keys
    sorted afresh and each level's block holds exactly its jobs in id order."""
    from cluster_sim.policies.level_sets import LevelKeys

    rng = np.random.default_rng(11)
    n, code = 400, 1
    state, level = np.zeros(n, dtype=np.int8), np.zeros(n, dtype=np.int64)
    keys = LevelKeys(state, code, level)
    for step in range(600):
        many = step % 7 == 0  # past LevelKeys' few-changes path
        changed = rng.choice(n, 40 if many else int(rng.integers(1, 5)), replace=False)
        for j in changed.tolist():
            if state[j] == code and rng.random() < 0.5:
                state[j] = 0 if rng.random() < 0.5 else code  # leaves, or stays at another level
            else:
                state[j] = code
            level[j] = rng.integers(0, 3)
        keys.note(changed.tolist())
        if rng.random() < 0.6:  # otherwise the changes pile up until a later round
            members = np.flatnonzero(state == code)
            got = keys.sync()
            assert got.tolist() == sorted((level[members] * n + members).tolist())
            assert keys.ids().tolist() == (got % n).tolist()
            for lv in range(3):
                assert keys.block(lv).tolist() == members[level[members] == lv].tolist()


def _bursts(n: int = 400, seed: int = 12) -> Workload:
    rng = np.random.default_rng(seed)
    arrivals = np.repeat(np.arange(8) * 6000.0, n // 8) + rng.uniform(0, 600, n)  # the queue grows and drains
    return jobs(np.sort(arrivals), rng.choice([1, 2, 4, 8, 16], n), rng.lognormal(6.5, 1.2, n))


@pytest.mark.parametrize("kw", [{"thresholds": (300.0, 3000.0)}, {"thresholds": (300.0,), "interval": 60.0}])
def test_tiresias_kept_levels_give_the_run_of_a_fresh_sort(monkeypatch, kw) -> None:
    """Keeping the jobs by queue level across rounds (arrivals, completions, own decisions and threshold
    crossings taken in as they come) decides exactly as ranking every job afresh at every round does,
    preemptions and demotions included, without ever falling back to rebuilding from the view; and
    rebuilding from the view at arbitrary rounds changes nothing either."""
    from cluster_sim.policies.level_sets import LevelSets
    from cluster_sim.policies.tiresias import Tiresias

    c, w = build_cluster("small"), _bursts()
    rebuilds: list[int] = []
    rebuild = LevelSets.rebuild

    def counted(self, view, queue) -> None:
        rebuilds.append(1)
        rebuild(self, view, queue)

    monkeypatch.setattr(LevelSets, "rebuild", counted)
    runs = []
    for keep in (False, True):
        monkeypatch.setattr(Tiresias, "keep_levels", keep)
        runs.append(Simulator(c.view, w, restart_cost=10.0).run(get_policy("tiresias", seed=0, **kw)))
    assert not rebuilds
    consistent, calls = LevelSets.consistent, [0]

    def sometimes_not(self, view, num_queued) -> bool:  # as if someone else had acted, every 7th round
        calls[0] += 1
        return consistent(self, view, num_queued) and calls[0] % 7 != 0

    monkeypatch.setattr(LevelSets, "consistent", sometimes_not)
    runs.append(Simulator(c.view, w, restart_cost=10.0).run(get_policy("tiresias", seed=0, **kw)))
    assert len(rebuilds) >= 5
    assert runs[0].metrics()["preemptions"] >= 10
    for other in runs[1:]:
        assert np.array_equal(runs[0].start, other.start) and np.array_equal(runs[0].end, other.end)


def test_tiresias_demotes_job_crossing_threshold():
    # A (8 GPUs) reaches 3600 GPU-s at t=450 and drops to the second queue; B (first queue) preempts
    # it then and runs 450-650; A resumes with 550 s left and ends at 1200.
    w = jobs([0, 100], [8, 8], [1000, 200])
    res = run("tiresias", cluster(), w)
    np.testing.assert_allclose(res.start, [0, 450])
    np.testing.assert_allclose(res.jct, [1200, 550])
    assert res.preemptions.tolist() == [1, 0]
    # in the same queue nobody is preempted: with a higher threshold B waits for A to finish
    high = make_scheduler("tiresias", "consolidate", thresholds=(1e6,))
    res = run(high, cluster(), w)
    np.testing.assert_allclose(res.jct, [1000, 1100])
    assert res.preemptions.sum() == 0


def test_tiresias_three_queues_with_repeated_preemption():
    # thresholds at 100 s and 400 s of 8 GPUs. A runs 0-100 (q0 -> q1), B 100-200 (-> q1, preempted by
    # C, still in q0), C 200-400 (reaches q1 at 300 but keeps running: same queue), A 400-700 (-> q2,
    # preempted by B of q1), B 700-900, A 900-1500.
    w = jobs([0, 50, 150], [8, 8, 8], [1000, 300, 200])
    res = run(make_scheduler("tiresias", "consolidate", thresholds=(800, 3200)), cluster(), w)
    np.testing.assert_allclose(res.jct, [1500, 850, 250])
    assert res.preemptions.tolist() == [2, 1, 0]


def test_tiresias_entry_order_lets_an_earlier_job_of_its_queue_go_first():
    # one queue (threshold out of reach). B (8 GPUs) arrives while A holds 4, so C (4 GPUs) backfills.
    # When A ends at 1000, "arrival" keeps C on the GPUs (running jobs first), "entry" (Pollux's) ranks B,
    # which entered the queue before C, above it: C is preempted and finishes after B.
    w = jobs([0, 1, 2], [4, 8, 4], [1000, 100, 1000])
    by_arrival = run(make_scheduler("tiresias", "consolidate", thresholds=(1e9,)), cluster(), w, restart_cost=0)
    np.testing.assert_allclose(by_arrival.end, [1000, 1102, 1002])
    by_entry = make_scheduler("tiresias", "consolidate", thresholds=(1e9,), queue_order="entry")
    res = run(by_entry, cluster(), w, restart_cost=0)
    np.testing.assert_allclose(res.end, [1000, 1100, 1102])
    assert res.preemptions.tolist() == [0, 0, 1]


def test_tiresias_entry_order_keeps_the_second_queue_in_demotion_order():
    # A (2 GPUs, t=0) and B (6 GPUs, t=1) share the server; B reaches 800 GPU-s first (t=134), A at 400.
    # C (2 GPUs, first queue) arrives at 500 and one of them must yield: by entry the last demoted (A),
    # by arrival the later arrival (B).
    w = jobs([0, 1, 500], [2, 6, 2], [10_000, 10_000, 100])
    for order, victim in (("entry", 0), ("arrival", 1)):
        sched = make_scheduler("tiresias", "consolidate", thresholds=(800,), queue_order=order)
        res = run(sched, cluster(), w, restart_cost=0)
        assert res.preemptions.tolist() == [int(victim == 0), int(victim == 1), 0], order
    assert get_policy("tiresias-pollux").queue_order == "entry"
    with pytest.raises(ValueError, match="queue_order must be 'arrival' or 'entry'"):
        make_scheduler("tiresias", "consolidate", queue_order="lifo")


def test_drf_alternates_between_tenants():
    # all at t=0, 4-GPU jobs of 10 s; ids 0-3 tenant a, 4-7 tenant b. FIFO would run a's four first.
    w = jobs([0] * 8, [4] * 8, [10] * 8, tenant=[0, 0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_allclose(run("drf", cluster(), w).start, [0, 10, 20, 30, 0, 10, 20, 30])
    np.testing.assert_allclose(run("fifo", cluster(), w).start, [0, 0, 10, 10, 20, 20, 30, 30])


def test_optimus_prefers_fewest_gpu_seconds():
    # at t=100: B needs 8 x 50 = 400 GPU-s, C 2 x 150 = 300: Optimus starts C, SJF starts B.
    w = jobs([0, 1, 2], [8, 8, 2], [100, 50, 150])
    np.testing.assert_allclose(run("optimus-oracle", cluster(), w).start, [0, 250, 100])
    np.testing.assert_allclose(run("sjf", cluster(), w).start, [0, 100, 150])


# ---------------------------------------------------------------- placement
def occupied(view, holds: list[np.ndarray], extra: list[int]) -> Simulator:
    """A simulator at t=0 whose first jobs hold ``holds`` and whose next jobs ask for ``extra`` GPUs."""
    sizes = [len(h) for h in holds] + list(extra)
    sim = Simulator(view, jobs([0.0] * len(sizes), sizes, [1.0] * len(sizes), model=[0] * len(sizes)))
    sim.advance()
    sim.apply([Start(j, np.asarray(g)) for j, g in enumerate(holds)])
    return sim


def test_most_free_takes_whole_servers_with_the_most_free_gpus_first():
    view = build_cluster("small").view
    # every server is busy except server 5 (8 free) and server 3 (6 free); server 0 has 2 free
    held = [np.arange(s * 8, s * 8 + 8) for s in range(32) if s not in (0, 3, 5)]
    held += [np.arange(0, 6), np.arange(24, 26)]
    sim = occupied(view, held, [11])
    gpus = get_placement("most-free")(sim, len(held), 11)
    assert np.bincount(view.gpu_server[gpus], minlength=32)[[5, 3, 0]].tolist() == [8, 3, 0]
    assert get_policy("tiresias-pollux").thresholds.tolist() == [16 * 3600.0, np.inf]


def test_consolidate_picks_fullest_server_that_fits():
    view = build_cluster("small").view
    # server 0: 6 free, server 1: 3 free, server 2: 4 free, others empty (8 free)
    sim = occupied(view, [np.arange(0, 2), np.arange(8, 13), np.arange(16, 20)], [3, 8, 24])
    assert set(view.gpu_server[get_placement("consolidate")(sim, 3, 3)]) == {1}
    assert set(view.gpu_server[get_placement("consolidate")(sim, 3, 4)]) == {2}
    eight = get_placement("consolidate")(sim, 4, 8)
    assert len(set(view.gpu_server[eight])) == 1 and sim.server_free[view.gpu_server[eight[0]]] == 8
    many = get_placement("consolidate")(sim, 5, 24)  # 3 whole empty servers of rack 0
    assert view.span_level(many) == Level.RACK and len(set(view.gpu_server[many])) == 3


def test_consolidate_prefers_rack_then_pod():
    view = build_cluster("small").view  # 8 servers x 8 GPUs per rack, 2 racks per pod, 2 pods
    full_rack0 = np.arange(0, 60)  # rack 0 keeps 4 free GPUs
    sim = occupied(view, [full_rack0], [64, 80, 190])
    rack = get_placement("consolidate")(sim, 1, 64)
    assert view.span_level(rack) == Level.RACK and set(view.gpu_rack[rack]) == {1}
    pod = get_placement("consolidate")(sim, 2, 80)
    assert view.span_level(pod) == Level.POD and set(view.gpu_rack[pod]) == {2, 3}  # pod 1 has 128 free
    assert view.span_level(get_placement("consolidate")(sim, 3, 190)) == Level.DATACENTER


def test_closest_gpus_keeps_job_on_one_socket_of_pcie_server():
    view = cluster("pcie-8", servers=2)  # sockets of 4 GPUs: 0-3, 4-7 | 8-11, 12-15
    # server 0: 3 + 2 free across its sockets (fuller); server 1: 2 + 4 free (one socket holds 4)
    sim = occupied(view, [np.array([0, 4, 5]), np.array([8, 9])], [4])
    gpus = get_placement("closest-gpus")(sim, 2, 4)
    assert view.span_level(gpus) == Level.SOCKET and gpus.tolist() == [12, 13, 14, 15]
    packed = get_placement("consolidate")(sim, 2, 4)  # fullest server, must cross its sockets
    assert set(view.gpu_server[packed]) == {0} and view.span_level(packed) == Level.SERVER


def test_spread_uses_distinct_servers_with_most_free():
    view = build_cluster("small").view
    sim = occupied(view, [np.arange(0, 7), np.arange(8, 12)], [6, 40])
    gpus = get_placement("spread")(sim, 2, 6)
    servers = view.gpu_server[gpus]
    assert len(set(servers)) == 6 and (sim.server_free[servers] == 8).all()
    wide = get_placement("spread")(sim, 3, 40)  # 32 servers: at most 2 GPUs each
    assert np.bincount(view.gpu_server[wide]).max() <= 2


def test_gandiva_packs_same_model_together():
    view = cluster(servers=3)
    w = jobs([0, 0, 0], [2, 2, 2], [1, 1, 1], model=[1, 2, 1])
    sim = Simulator(view, w)
    sim.advance()
    sim.apply([Start(0, np.array([8, 9])), Start(1, np.array([0, 1]))])  # model 1 on server 1, 2 on 0
    assert set(view.gpu_server[get_placement("gandiva")(sim, 2, 2)]) == {1}
    assert set(view.gpu_server[get_placement("consolidate")(sim, 2, 2)]) == {0}  # equally full: lowest id


def test_random_placement_needs_rng_and_unknown_names_fail():
    with pytest.raises(ValueError, match="rng"):
        get_placement("random")
    with pytest.raises(ValueError, match="consolidate"):
        get_placement("nearest")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    preset=st.sampled_from(["small", "small-mixed"]),
    seed=st.integers(0, 2**31),
    busy=st.floats(0.0, 1.0),
    n=st.integers(1, 96),
)
def test_placements_return_n_distinct_free_gpus(preset, seed, busy, n):
    view = build_cluster(preset).view
    rng = np.random.default_rng(seed)
    taken = rng.permutation(view.num_gpus)[: int(busy * view.num_gpus)]
    holds = [c for c in np.array_split(taken, max(1, len(taken) // 3)) if len(c)]
    sim = occupied(view, holds, [n])
    job = len(holds)
    pool = FreePool(sim)
    for name in PLACEMENTS:
        place = get_placement(name, np.random.default_rng(seed))
        for free in (None, pool):
            gpus = place(sim, job, n, free)
            if sim.num_free < n:
                assert gpus is None, name
                continue
            assert gpus is not None and len(gpus) == n, name
            assert len(np.unique(gpus)) == n, f"{name} repeated a GPU"
            assert (sim.gpu_job[gpus] == -1).all(), f"{name} returned a taken GPU"
    # the pool's counts stay consistent while a round takes and gives back GPUs
    pool.socket_free, pool.rack_cum  # noqa: B018  (built now, then maintained incrementally)
    taken = []
    for name in ("closest-gpus", "consolidate", "spread"):
        gpus = get_placement(name)(sim, job, min(n, 9), pool)
        if gpus is None:
            break
        pool.take(gpus, job)
        taken.append(gpus)
    if taken:
        pool.release(taken[0], job)
    free = pool.gpu_job < 0
    server = np.bincount(view.gpu_server[free], minlength=view.num_servers)
    assert pool.server_free[:-1].tolist() == server.tolist()
    assert pool.rack_free[:-1].tolist() == np.bincount(view.server_rack, server, view.num_racks).tolist()
    assert pool.socket_free.tolist() == np.bincount(view.gpu_socket[free], minlength=len(pool.socket_free)).tolist()
    assert pool.hist.tolist() == np.bincount(server, minlength=len(pool.hist)).tolist()
    assert pool.num_free == int(free.sum())
    by_rack = np.append(server, 0)[pool.index.rack_servers]  # padding points at a 0 sentinel
    np.testing.assert_array_equal(pool.rack_cum, np.cumsum(-np.sort(-by_rack, axis=1), axis=1).T)


def test_pool_refuses_double_allocation():
    view = cluster(servers=4)
    sim = occupied(view, [np.array([0, 1])], [2])
    pool = FreePool(sim)
    with pytest.raises(ValueError, match="taken or repeated"):
        pool.take(np.array([1, 2]), 1)
    with pytest.raises(ValueError, match="taken or repeated"):
        pool.take(np.array([3, 3]), 1)
    with pytest.raises(ValueError, match=r"job 1: the placement found none \(None\); leave the job waiting"):
        pool.take(None, 1)  # a placement that found no room, passed on
    with pytest.raises(ValueError, match="does not hold them all"):
        pool.release(np.array([1, 2]), 0)
    many = np.arange(2, 2 + 20)  # past the few-GPU path: the same checks, vectorised
    with pytest.raises(ValueError, match="taken or repeated"):
        pool.take(np.append(many, 1), 1)
    with pytest.raises(ValueError, match="does not hold them all"):
        pool.release(np.append(many, 0), 0)
    # ids outside the cluster (a plugin's placement): named with the range, not an IndexError or a wrap-around
    top = view.num_gpus - 1
    for bad in ([top + 1], [-1], [2.0, 3.0], list(range(top - 20, top + 2))):
        with pytest.raises(ValueError, match=rf"GPU ids are integers from 0 to {top} on this cluster"):
            pool.take(np.array(bad), 1)
    assert pool.num_free == view.num_gpus - 2 and (pool.gpu_job[2:] == -1).all()  # refusals change nothing


# ---------------------------------------------------------------- registry
def test_registry_names_and_errors():
    for name in POLICIES:
        s = get_policy(name, 1)
        assert s.name == name and isinstance(s.schedule(_idle_view()), list)
    combo = get_policy("sjf+best-fit", 0)
    assert combo.name == "sjf+best-fit" and combo.placement_name == "best-fit"
    assert {"fifo", "closest-gpus", "tiresias"} <= set(policy_names())
    assert all(get_policy(name).name == name for name in policy_names())  # every name listed builds
    with pytest.raises(TypeError, match=r"'tiresias': unknown option 'threshold'; did you mean 'thresholds'\? allowed"):
        get_policy("tiresias", threshold=5)
    with pytest.raises(ValueError) as err:
        get_policy("lifo", 0)
    assert all(name in str(err.value) for name in [*POLICIES, *ORDERINGS, *PLACEMENTS])
    with pytest.raises(ValueError, match="placement"):
        make_scheduler("fifo", "nowhere")


def _idle_view() -> Simulator:
    sim = Simulator(cluster(), jobs([0.0], [1], [1.0]))
    sim.reset()
    return sim


def test_preemptions_come_before_starts():
    w = jobs([0, 10], [8, 8], [100, 20])
    sim = Simulator(cluster(), w)
    sched = get_policy("srtf", 0)
    sched.reset(sim)
    sim.advance()
    sim.apply(sched.schedule(sim))
    sim.advance()  # t=10, B arrives
    decisions = sched.schedule(sim)
    assert [type(d) for d in decisions] == [Preempt, Start] and decisions[1].job == 1


def test_qssf_expected_remaining_time_is_the_mean_residual_life_of_its_history() -> None:
    from cluster_sim.policies.run_history import History

    hist = History()
    hist.add(np.array([7, 7, 7, 7]), np.array([10.0, 20.0, 30.0, 100.0]))
    keys = np.full(4, 7)
    rem = hist.residual(keys, np.array([0.0, 15.0, 30.0, 150.0]))
    # x=0: mean 40; x=15: (20+30+100)/3 - 15 = 35; x=30: 100 - 30 = 70; older than all: as long again
    np.testing.assert_allclose(rem, [40.0, 35.0, 70.0, 150.0])
    hist.add(np.full(300, 8), np.arange(1.0, 301.0))  # past the buffer: merged into the sorted history
    np.testing.assert_allclose(hist.residual(np.array([8, 7]), np.array([100.0, 15.0])), [100.5, 35.0])


def test_history_answers_from_its_sorted_part_and_its_buffer_as_from_all_run_times() -> None:
    """Run times are split between the merged history and the unsorted buffer (searched through a
    sorted index rebuilt after each add): every query equals the mean residual life over all of them."""
    from cluster_sim.policies.run_history import History

    rng = np.random.default_rng(2)
    hist = History()
    keys, times = np.zeros(0, dtype=np.int64), np.zeros(0)
    for _ in range(12):
        k, t = rng.integers(0, 5, 37), rng.exponential(500.0, 37)
        hist.add(k, t)
        keys, times = np.concatenate([keys, k]), np.concatenate([times, t])
        qk, qx = rng.integers(0, 6, 50), rng.uniform(0, 1500, 50)
        above = (keys[None, :] == qk[:, None]) & (times[None, :] > qx[:, None])
        n = above.sum(axis=1)
        mean = np.divide((above * times).sum(axis=1), n, out=np.zeros(50), where=n > 0)
        np.testing.assert_allclose(hist.residual(qk, qx), np.where(n > 0, mean - qx, qx), rtol=1e-9)
    assert hist._buf_key and len(hist._value)  # both parts were in use


def test_tenant_history_backs_off_as_a_search_over_every_finished_job() -> None:
    """QSSF's estimates, taken in from the simulator's completion log as jobs finish, equal the mean
    residual life over the finished jobs of the first group (tenant and GPUs, tenant, GPUs, everyone)
    that holds ``min_history`` of them, the prior where none does, at every point of a run."""
    from cluster_sim.policies.run_history import PRIOR_S

    rng = np.random.default_rng(4)
    n = 300
    w = jobs(np.sort(rng.uniform(0, 4e4, n)), rng.choice([1, 2, 4], n), rng.lognormal(6, 1, n), rng.integers(0, 6, n))
    sim = Simulator(cluster(), w)
    sched = get_policy("qssf", 0, min_history=8)
    sched.reset(sim)
    sim.reset()
    levels_seen: set[int] = set()
    while sim.advance():
        sim.apply(sched.schedule(sim))
        if sim.num_completed >= 8 and rng.random() > 0.05:  # every round until anyone's history holds 8
            continue
        sched.history.learn(sim)
        done = np.array(sim.completed_since(0), dtype=np.int64)
        ran = sim.executed_times(done)
        groups = [(w.tenant * 10 + w.num_gpus), w.tenant, w.num_gpus, np.zeros(n, dtype=np.int64)]
        q, x = rng.integers(0, n, 40), rng.uniform(0, 3000, 40)
        want = []
        for j, xj in zip(q.tolist(), x.tolist(), strict=True):
            level = next((lv for lv, g in enumerate(groups) if np.sum(g[done] == g[j]) >= 8), 4)
            levels_seen.add(level)
            if level == 4:
                want.append(max(PRIOR_S - xj, xj))
                continue
            times = ran[groups[level][done] == groups[level][j]]
            above = times[times > xj]
            want.append(above.mean() - xj if len(above) else xj)
        np.testing.assert_allclose(sched.history.residual(q, x), want, rtol=1e-9)
    assert levels_seen == {0, 1, 2, 3, 4}  # every back-off level answered at some point


def _first_decisions_until(result, t: float) -> tuple[np.ndarray, np.ndarray]:
    early = result.start < t
    return np.flatnonzero(early), result.start[early]


@pytest.mark.parametrize(("policy", "leaks"), [("qssf", False), ("qssf-np", False), ("srtf", True)])
def test_qssf_decisions_never_depend_on_a_running_jobs_true_duration(policy: str, leaks: bool) -> None:
    """Doubling one job's duration changes nothing that happens before it finishes (qssf learns only from
    finished jobs); the oracle SRTF reacts at once, which shows the test can tell."""
    from cluster_sim.build import build_simulator

    base = build_simulator("small", "synthetic:400,load=1000", seed=5, restart_cost=30)  # a long queue
    w = base.jobs
    ref = base.run(get_policy(policy, seed=0))
    waited = np.flatnonzero(ref.start > w.arrival)  # its rank mattered: it waited behind others
    j = int(waited[np.argsort(ref.end[waited])[len(waited) // 2]])  # ... and finished mid-run
    changed = w.subset(np.arange(len(w)))
    changed.duration[j] *= 2.0
    other = build_simulator("small", changed, restart_cost=30).run(get_policy(policy, seed=0))
    cut = ref.end[j]  # the first moment the two runs may know different things
    a_jobs, a_start = _first_decisions_until(ref, cut)
    b_jobs, b_start = _first_decisions_until(other, cut)
    same = np.array_equal(a_jobs, b_jobs) and np.array_equal(a_start, b_start)
    assert same != leaks
    assert len(a_jobs) > 50  # a real stretch of decisions was compared


def test_fifo_orders_a_queue_with_a_returning_job_and_passes_span_chunks() -> None:
    """FIFO sorts only a queue a preempted job re-entered out of order, and a backfilling pass places
    jobs far past the first chunk of its queue."""
    fifo = get_policy("fifo", 0)
    ordered = np.array([2, 5, 9], dtype=np.int64)
    assert fifo.order(None, ordered) is ordered
    np.testing.assert_array_equal(fifo.order(None, np.array([5, 9, 2])), [2, 5, 9])
    # strict: 100 one-GPU jobs at 0 on 128 GPUs all start at once
    res = run(make_scheduler("fifo", "consolidate"), cluster(servers=16), jobs([0.0] * 100, [1] * 100, [50.0] * 100))
    assert (res.start == 0.0).all()
    # backfilling on 32 GPUs, 8 held until 1000 s: at 1 s one of the 100 twenty-GPU jobs starts, the other
    # 99 no longer fit, and the pass goes on to the one-GPU jobs behind them until the 4 free GPUs are used
    n_big, n_small = 100, 300
    arrival = [0.0] + [1.0] * (n_big + n_small)
    gpus = [8] + [20] * n_big + [1] * n_small
    res = run(
        make_scheduler("fifo", "consolidate", backfill=True),
        cluster(servers=4),
        jobs(arrival, gpus, [1000.0] * len(gpus)),
    )
    at_one = np.flatnonzero(res.start == 1.0)
    np.testing.assert_array_equal(at_one, [1, *range(1 + n_big, 1 + n_big + 4)])


def test_admitted_by_budget_is_the_greedy_pass_with_backfilling() -> None:
    """For a few jobs (one Python pass) and for many (the vectorised prefix plus chunked backfill), the
    admitted jobs are exactly what a job-by-job greedy pass admits."""
    from cluster_sim.policies.base import admitted_by_budget

    rng = np.random.default_rng(6)
    for _ in range(300):
        need = rng.choice([1, 2, 4, 8, 16, 64], int(rng.integers(0, 400)))
        budget = int(rng.integers(0, 600))
        left, ref = budget, np.zeros(len(need), dtype=bool)
        for i, n in enumerate(need.tolist()):
            if n <= left:
                ref[i], left = True, left - n
        assert np.array_equal(admitted_by_budget(need.astype(np.int64), budget), ref)


def test_a_misspelt_scheduler_name_is_refused_with_the_closest_name_and_the_forms() -> None:
    with pytest.raises(ValueError, match=r"unknown scheduler 'tiresas'; did you mean 'tiresias'\? choose one of") as e:
        get_policy("tiresas")
    assert "NAME@ORDER" in str(e.value) and "PREFIX:DIR" in str(e.value)
    with pytest.raises(ValueError) as e:
        get_policy("zzzz")
    assert "did you mean" not in str(e.value)
    with pytest.raises(ValueError, match=r"'mar' is not a policy-folder prefix; did you mean marl:/x/policy\? "):
        get_policy("mar:/x/policy")
    with pytest.raises(TypeError, match=r"not a class .*give your scheduler object to sim\.run"):
        get_policy(type(get_policy("fifo")))  # a class, not its name


def test_a_schedulers_options_ride_in_its_name_or_beside_it_name_among_them(tmp_path, monkeypatch) -> None:
    """``get_policy("qssf,name=mine")`` as ``--policy qssf,name=mine,fifo`` takes it; ``name=`` is an option like any
    other (the scheduler's label); a mistake in the string is a ValueError naming it; a shipped folder's relative
    name from another directory is answered with the folder's absolute name."""
    from experiments.simulate import split_policies
    from marl.deploy.registry import SHIPPED_POLICIES

    assert get_policy("qssf,name=mine,min_history=4").name == "mine"
    assert get_policy("qssf,name=mine,min_history=4").history.min_history == 4
    assert get_policy("tiresias", name="t2").name == "t2" and get_policy("qssf@fastest,name=x").name == "x"
    assert split_policies("qssf,name=mine,fifo,mine.py:Mine,k=2") == ["qssf,name=mine", "fifo", "mine.py:Mine,k=2"]
    with pytest.raises(ValueError, match=r"unknown option 'nme'; did you mean 'name'\?.*\(in 'qssf,nme=x'\)"):
        get_policy("qssf,nme=x")
    with pytest.raises(ValueError, match="one scheduler per name, and after it only key=value options, not 'tiresias'"):
        get_policy("fifo,tiresias")
    with pytest.raises(ValueError, match="option name given in the name and again beside it"):
        get_policy("qssf,name=a", name="b")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        get_policy("marl:experiments/policies/default-small")
    assert f"read from the working directory {tmp_path}" in str(err.value)
    assert f"marl:{SHIPPED_POLICIES / 'default-small'}" in str(err.value)
    assert get_policy(f"marl:{SHIPPED_POLICIES / 'default-small'},name=d").name == "d"
