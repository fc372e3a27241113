"""Property tests: random small clusters and workloads, every policy, the simulator's invariants hold.

The audit replays the simulator's placement history independently of the simulator's own bookkeeping.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_sim.perf_model import PerformanceModel
from cluster_sim.policies import get_policy
from cluster_sim.simulator import Simulator
from cluster_sim.workload import Workload
from topology import build_cluster, parse_spec

POLICIES = ("fifo", "sjf", "srtf", "tiresias", "gandiva", "drf", "optimus", "closest-gpus", "random", "fifo+spread")


@st.composite
def scenario(draw):
    server = draw(st.sampled_from(["nvswitch-8", "pcie-8", "pcie-4"]))
    spec = {
        "name": "prop",
        "pods": draw(st.integers(1, 2)),
        "racks_per_pod": draw(st.integers(1, 2)),
        "servers_per_rack": draw(st.integers(1, 3)),
        "server": server,
        "gpu_type": "V100",
        "pod_oversubscription": 2,
    }
    cluster = build_cluster(parse_spec(spec))
    n = draw(st.integers(1, 25))
    g = cluster.view.num_gpus
    sizes = [1, 2, 4, 8, 16]
    gpus = draw(st.lists(st.sampled_from([s for s in sizes if s <= g]), min_size=n, max_size=n))
    gaps = draw(st.lists(st.floats(0, 500, allow_nan=False), min_size=n, max_size=n))
    durations = draw(st.lists(st.floats(1, 5000, allow_nan=False), min_size=n, max_size=n))
    tenants = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    models = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    w = Workload(
        arrival=np.cumsum(gaps),
        num_gpus=np.array(gpus, dtype=np.int32),
        duration=np.array(durations),
        model=np.array(models, dtype=np.int16),
        batch_size=np.full(n, 256, dtype=np.int32),
        tenant=np.array(tenants, dtype=np.int16),
        models=("resnet18-cifar10", "bert-squad", "ncf"),
        tenants=("a", "b", "c"),
    )
    return cluster, w, draw(st.sampled_from(POLICIES)), draw(st.sampled_from([0.0, 20.0]))


def audit(sim: Simulator, w: Workload, restart_cost: float) -> None:
    """Replay the history: exclusivity, capacity, single completion, JCT bounds, conserved work."""
    owner = np.full(sim.topo.num_gpus, -1)
    running: dict[int, tuple[float, np.ndarray]] = {}
    work = np.zeros(len(w))
    started = np.zeros(len(w), dtype=int)
    completions = np.zeros(len(w), dtype=int)
    for t, kind, job, gpus in sim.history:
        if kind == "start":
            assert job not in running, f"job {job} started while running"
            assert (owner[gpus] == -1).all(), f"GPU held twice at t={t}: {gpus[owner[gpus] != -1]}"
            assert len(gpus) == len(set(gpus.tolist()))
            owner[gpus] = job
            stall = restart_cost if started[job] else 0.0
            running[job] = (t + stall, gpus)
            started[job] += 1
        else:
            begin, held = running.pop(job)
            assert np.array_equal(held, gpus)
            assert (owner[gpus] == job).all()
            owner[gpus] = -1
            speed = sim.estimated_speed(job, gpus)  # no interference in this audit: speed is the model's
            work[job] += speed * max(0.0, t - begin)
            if t == sim._end[job]:
                completions[job] += 1
        assert (owner >= 0).sum() <= sim.topo.num_gpus
    assert not running
    assert (completions == 1).all(), "every job completes exactly once"
    r = sim.result("audit", 0.0)
    assert np.all(r.jct >= w.duration * (1 - 1e-9)), "no job beats its ideal duration"
    # work is conserved across preemptions (multi-pod jobs sharing uplinks run slower than the model's
    # lone speed, so their replayed work can only exceed what they needed)
    assert np.all(work >= w.duration * (1 - 1e-9))
    lone = r.span < 4  # below Level.POD: speed is exactly the model's
    np.testing.assert_allclose(work[lone], w.duration[lone], rtol=1e-9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_invariants_hold_for_every_policy(case):
    cluster, w, policy, restart_cost = case
    sim = Simulator(
        cluster.view, w, perf=PerformanceModel(cluster.view), restart_cost=restart_cost, record_history=True
    )
    r = sim.run(get_policy(policy, seed=1))
    assert r.metrics()["jobs_completed"] == len(w)
    audit(sim, w, restart_cost)
