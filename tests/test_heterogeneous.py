"""Heterogeneous GPU clusters: Sia's per-type profiles in the simulator, one GPU type per job, and the
``sia`` policy's allocations (feasible, one configuration per job, within each type's GPUs)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from cluster_sim.build import build_simulator
from cluster_sim.gpu_profiles import RESTART_COST
from cluster_sim.policies import get_policy
from cluster_sim.policies.sia import _solve_ilp, configurations, unique_unconstrained_optimum
from cluster_sim.protocol import RUNNING, InvalidDecision, Start
from topology import build_cluster


class Checked:
    """``policy`` with ``check(view, decision, gpus)`` called on every decision that gives GPUs, before the
    simulator applies it; ``checked`` counts them."""

    def __init__(self, policy, check) -> None:
        self.policy, self.check, self.checked = policy, check, 0
        self.name = policy.name
        self.elastic = getattr(policy, "elastic", False)
        self.one_gpu_type = True
        self.wants_all_points = getattr(policy, "wants_all_points", False)

    def reset(self, view) -> None:
        self.policy.reset(view)

    def schedule(self, view):
        decisions = self.policy.schedule(view)
        for d in decisions:
            gpus = getattr(d, "gpus", None)
            if gpus is not None:
                self.check(view, d, np.asarray(gpus))
                self.checked += 1
        return decisions


def one_type(topo, gpus: np.ndarray) -> int:
    """The GPU type of ``gpus``, asserting they are all of one."""
    types = topo.server_gpu_type[topo.gpu_server[gpus]]
    assert (types == types[0]).all(), "a job spans GPU types"
    return int(types[0])


def run_to_first_end(sim, policy) -> float:
    """``policy`` on ``sim`` until the first job finishes (the rounds a no-leak check compares, where a duration
    could matter only after); that job's end time."""
    sim.start(policy)
    while sim.num_completed == 0 and sim.step(policy):
        pass
    return float(np.nanmin(sim.result(policy.name, 0.0).end))


def sia_sim(sia_dir: Path, jobs: int, **options):
    spec = f"pollux:{sia_dir}/workloads/philly/workload-1.csv,profiles={sia_dir}/traces,max_jobs={jobs}"
    return build_simulator("sia-hetero", spec, app_restart_costs=True, calibration=True, **options)


def test_presets_match_sias_clusters() -> None:
    v = build_cluster("sia-hetero").view
    per_type = {t: int(v.server_num_gpus[v.server_gpu_type == i].sum()) for i, t in enumerate(v.gpu_types)}
    assert per_type == {"T4": 24, "RTX2080Ti": 24, "A100": 16}
    assert sorted(v.server_num_gpus.tolist()) == [4] * 6 + [8] * 5
    homo = build_cluster("sia-homogeneous").view
    assert homo.num_gpus == 64 and homo.gpu_types == ("T4",) and set(homo.server_num_gpus.tolist()) == {4}
    small = build_cluster("small-hetero").view
    assert small.num_servers == 32 and set(small.gpu_types) == {"V100", "P100", "K80"}
    counts = np.bincount(small.server_gpu_type)
    assert counts.max() - counts.min() <= 2


def test_a_job_runs_at_its_types_measured_speed_and_on_one_type(sia_dir: Path) -> None:
    sim = sia_sim(sia_dir, 4)
    sim.elastic = True
    sim.mix_gpu_types = False
    sim.reset()
    sim.advance()
    v = sim.topo
    job = int(sim.queue[0])
    t4 = np.flatnonzero(v.server_gpu_type[v.gpu_server] == v.gpu_types.index("T4"))
    a100 = np.flatnonzero(v.server_gpu_type[v.gpu_server] == v.gpu_types.index("A100"))
    with pytest.raises(InvalidDecision, match="one GPU type at a time"):
        sim.apply([Start(job, np.array([t4[0], a100[0]]))])
    sim.apply([Start(job, a100[:1])])
    app = sim.app_on_type(job)
    assert app.gpu_type == "A100" and not app.estimated
    base = sim.application(job)
    assert app.steps is base.steps_by_type["A100"]
    # its progress rate is the A100 profile's, divided by Sia's calibration slowdown for the application
    from cluster_sim.gpu_profiles import CALIBRATION_SLOWDOWN

    expected = app.rate((1,), sim.batch_size(job), 0) / CALIBRATION_SLOWDOWN[base.name]
    assert sim._speed[job] == pytest.approx(expected)
    assert sim._stall_until[job] == pytest.approx(sim.now + RESTART_COST[base.name])


@pytest.mark.slow
def test_sia_allocations_are_feasible_and_one_type_per_job(sia_dir: Path, sia_40) -> None:
    """Every round of ``sia``: each job on one GPU type, within its GPU range, the per-GPU batch within
    that type's memory limit, no GPU given twice; the run finishes every job, and the same run twice gives
    the same schedule."""
    sim = sia_sim(sia_dir, 40)
    topo = sim.topo
    held: dict[tuple[float, int], int] = {}

    def check(view, d, gpus) -> None:
        t = one_type(topo, gpus)
        lo, hi = view.gpu_range(d.job)
        assert lo <= len(gpus) <= hi
        for g in gpus.tolist():
            assert held.setdefault((view.now, g), d.job) == d.job, "GPU given twice in one round"
        app = view.app_on_type(d.job, topo.gpu_types[t])
        batch = d.batch_size if d.batch_size is not None else view.batch_size(d.job)
        atomic, _ = app.batch_plan(int(batch), len(gpus))
        assert atomic <= app.max_local_bsz

    policy = Checked(get_policy("sia"), check)
    result = sim.run(policy)
    assert result.metrics()["jobs_completed"] == 40 and policy.checked > 40
    assert np.array_equal(sia_40.end, result.end)  # another run of sia on the same jobs
    # the per-type GPU-hours add up to what each job held
    assert np.allclose(result.attained_by_type.sum(axis=1), result.attained)
    assert result.metrics()["round_ms_p50"] > 0


@pytest.mark.slow
def test_sia_uses_the_fast_type_where_it_pays(sia_dir: Path, sia_40) -> None:
    """Type-aware beats type-unaware on the mixed cluster: the same 40 jobs, sia against pollux."""
    sia = sia_40.metrics()["avg_jct"]
    pollux = sia_sim(sia_dir, 40).run(get_policy("pollux")).metrics()["avg_jct"]
    assert sia < 0.9 * pollux


def test_sia_oracle_weighs_jobs_by_their_true_remaining_time(sia_dir: Path, sia_40) -> None:
    """The privileged reference schedules differently from Sia; without its weight (oracle=0) it is Sia,
    job for job."""
    from cluster_sim.policies.sia import Sia

    assert np.array_equal(sia_sim(sia_dir, 40).run(Sia(oracle=0.0)).end, sia_40.end)
    oracle = sia_sim(sia_dir, 40).run(get_policy("sia-oracle"))
    assert oracle.scheduler == "sia-oracle" and np.isfinite(oracle.end).all()
    assert not np.array_equal(oracle.end, sia_40.end)
    with pytest.raises(ValueError, match="oracle is the power of the remaining-time weight"):
        Sia(oracle=-1.0)


def test_sia_restart_discount_decides_whether_running_jobs_move(sia_dir: Path, sia_40) -> None:
    """Sia's restart discount is one overridable method: a discount of 0 for running jobs (moving is worth
    nothing) keeps them where they are, so the run restarts fewer jobs than Sia's own age-based discount; the
    privileged oracle-restarts variant of the room benchmark schedules every job to completion."""
    from cluster_sim.policies.sia import Sia
    from experiments.benchmarks.sia_room import OracleRestartSia

    class Stay(Sia):
        def restart_factors(self, view, jobs):
            return np.where(view.job_states[jobs] == RUNNING, 0.0, 1.0)

    stay = sia_sim(sia_dir, 40).run(Stay())
    assert np.isfinite(stay.end).all()
    assert stay.restarts.sum() < sia_40.restarts.sum()
    oracle = sia_sim(sia_dir, 40).run(OracleRestartSia())
    assert np.isfinite(oracle.end).all() and not np.array_equal(oracle.end, sia_40.end)


@pytest.mark.parametrize("estimate", ["las", "history"])
def test_sia_weighted_by_an_estimate_reads_no_duration(sia_dir: Path, sia_40, estimate: str) -> None:
    """The room benchmark's non-privileged weights change Sia's schedule, and never read a job's length."""
    from experiments.benchmarks.sia_room import EstimateWeightedSia
    from tests.test_dl2 import NoLengthView

    class NoOracle(EstimateWeightedSia):
        def job_weights(self, view, jobs):
            return super().job_weights(NoLengthView(view), jobs)

    weighted = sia_sim(sia_dir, 40).run(NoOracle(estimate))
    assert weighted.scheduler == f"{estimate}-weights" and np.isfinite(weighted.end).all()
    assert not np.array_equal(weighted.end, sia_40.end)


def test_configurations_are_sias_tables() -> None:
    assert configurations(4, 16) == [1, 2] + [4 * k for k in range(1, 17)]
    assert configurations(8, 3) == [1, 2, 4, 8, 16, 24]


def test_gavel_lp_maximises_summed_throughput() -> None:
    """Two jobs, two types of one GPU each: the LP puts each job where the sum is largest (A on type 0,
    B on type 1: 4 + 2 > 1 + 3), within one unit of time per job and each type's GPUs."""
    from cluster_sim.policies.gavel import max_sum_throughput

    rates = np.array([[4.0, 1.0], [3.0, 2.0]])
    x = max_sum_throughput(rates, np.array([1, 1]), np.array([1, 1]))
    assert np.allclose(x, [[1, 0], [0, 1]], atol=1e-6)
    # a type too small for a job (rate 0) gets none of its time; shares are fractional when GPUs are scarce
    x = max_sum_throughput(np.array([[2.0, 0.0], [2.0, 1.0], [2.0, 1.0]]), np.array([2, 2, 2]), np.array([2, 2]))
    assert x[0, 1] == 0 and np.all(x.sum(axis=1) <= 1 + 1e-9)
    assert np.all((x * 2).sum(axis=0) <= np.array([2, 2]) + 1e-9)
    assert (x * np.array([[2.0, 0.0], [2.0, 1.0], [2.0, 1.0]])).sum() == pytest.approx(3.0)


def test_gavel_lp_solves_a_repeated_round_once(monkeypatch) -> None:
    """A round that asks the LP of an earlier round (no job arrived, ended or was re-weighted) gets its
    solution without solving it again; a caller that edits its copy changes no later answer, and other inputs
    are solved."""
    import cluster_sim.policies.gavel as gavel

    solves = []
    solve = gavel._solve_max_sum_throughput
    monkeypatch.setattr(gavel, "_solve_max_sum_throughput", lambda *a: solves.append(1) or solve(*a))
    monkeypatch.setattr(gavel, "_SOLVED", type(gavel._SOLVED)())
    rates, asked, capacity = np.array([[4.0, 1.0], [3.0, 2.0]]), np.array([1, 1]), np.array([1, 1])
    first = gavel.max_sum_throughput(rates, asked, capacity)
    first[:] = -1.0
    again = gavel.max_sum_throughput(rates.copy(), asked.copy(), capacity.copy())
    assert len(solves) == 1 and np.allclose(again, [[1, 0], [0, 1]], atol=1e-6)
    other = gavel.max_sum_throughput(rates, asked, np.array([1, 0]))  # type 1 gone: both want type 0
    assert len(solves) == 2 and other[:, 1].sum() == 0 and other[:, 0].sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "name", ["gavel", "gavel-oracle", "rounds-gavel", "gavel-las", "rounds-las", "rounds-oracle", "rounds-oracle-area"]
)
def test_rigid_rounds_run_jobs_rigidly_on_one_type_and_finish_them(sia_dir: Path, name: str) -> None:
    """Every placement the round-based rigid schedulers make: the GPUs the job asked for, its own batch,
    one type; GPUs per type never exceeded; every job completes; the same run twice gives the same
    schedule."""
    sim = sia_sim(sia_dir, 30)

    def check(view, d, gpus) -> None:
        one_type(sim.topo, gpus)
        assert len(gpus) == int(view.jobs.num_gpus[d.job])
        assert d.batch_size in (None, int(view.jobs.batch_size[d.job]))

    gavel = get_policy(name)
    assert gavel.interval == 360.0
    policy = Checked(gavel, check)
    result = sim.run(policy)
    assert result.metrics()["jobs_completed"] == 30 and policy.checked >= 30
    again = sia_sim(sia_dir, 30).run(get_policy(name))
    assert np.array_equal(again.end, result.end)
    assert len(getattr(gavel, "solve_seconds", [0])) > 0


@pytest.mark.slow
def test_only_the_oracle_rounds_see_true_durations() -> None:
    """On small-hetero, the same jobs with the true durations of two early, long ones swapped: until
    the first job finishes, every score ``rounds-las`` computes is the same (it never reads a duration)
    and ``rounds-oracle``'s and ``rounds-oracle-area``'s are not; and knowing durations lowers average JCT
    against the duration-blind counterparts (both oracle rounds vs ``rounds-las``, ``gavel-oracle`` vs
    ``gavel``)."""
    from dataclasses import replace

    from cluster_sim.policies.rigid_rounds import ScoredRounds, las_score, oracle_area_score, oracle_score

    base = build_simulator("small-hetero", "synthetic:200,load=1.2,model_rule=gavel", seed=3).jobs
    a, b = np.argsort(base.duration[:10])[-2:]  # two early, long jobs: both wait or run for a while
    duration = base.duration.copy()
    duration[[a, b]] = duration[[b, a]]
    swapped = replace(base, duration=duration)

    def recorded(scorer, w, whole: bool):
        """(the run, or its first end time where not ``whole``; every round's scores until then)."""
        seen = []

        def score(view, jobs, rates, current):
            out = scorer(view, jobs, rates, current)
            seen.append((view.now, jobs.copy(), out.copy()))
            return out

        sim, policy = build_simulator("small-hetero", w), ScoredRounds(score)
        return (sim.run(policy) if whole else run_to_first_end(sim, policy)), seen

    jct = {}
    for scorer, same in ((las_score, True), (oracle_score, False), (oracle_area_score, False)):
        (ra, sa), (end_b, sb) = recorded(scorer, base, True), recorded(scorer, swapped, False)
        jct[scorer.__name__] = ra.metrics()["avg_jct"]
        first_end = min(ra.end.min(), end_b)
        pairs = [(x, y) for x, y in zip(sa, sb, strict=False) if x[0] < first_end and y[0] < first_end]
        assert len(pairs) >= 1
        equal = all(np.array_equal(x[1], y[1]) and np.array_equal(x[2], y[2]) for x, y in pairs)
        assert equal == same, scorer.__name__
    jct.update({n: build_simulator("small-hetero", base).run(get_policy(n)).metrics()["avg_jct"]
                for n in ("gavel", "gavel-oracle")})  # fmt: skip
    assert jct["oracle_score"] < jct["las_score"] and jct["gavel-oracle"] < jct["gavel"], jct
    assert jct["oracle_area_score"] < jct["las_score"], jct


def test_gavel_las_reads_no_duration_and_leans_to_the_jobs_that_ran_least() -> None:
    """``gavel-las`` (Gavel's priorities less las x log(1 + attained GPU-hours), over speeds relative to each
    job's fastest type): with two long jobs' true durations swapped, every score is the same until the first
    job finishes; its LAS term and its normalised LP each change the schedule; it keeps Gavel's count of
    rounds per job and type (each round credits the type a job ran on)."""
    from dataclasses import replace

    from cluster_sim.policies.gavel import GavelPriorityScore
    from cluster_sim.policies.rigid_rounds import ScoredRounds

    class Recorded(GavelPriorityScore):
        def __init__(self, **kw) -> None:
            super().__init__(**kw)
            self.seen: list = []

        def __call__(self, view, jobs, rates, current):
            out = super().__call__(view, jobs, rates, current)
            self.seen.append((view.now, jobs.copy(), out.copy()))
            return out

    base = build_simulator("small-hetero", "synthetic:200,load=1.2,model_rule=gavel", seed=3).jobs
    a, b = np.argsort(base.duration[:10])[-2:]
    duration = base.duration.copy()
    duration[[a, b]] = duration[[b, a]]
    runs = []
    for w, whole in ((base, True), (replace(base, duration=duration), False)):  # the swapped run to its first end
        score = Recorded(las=2.0, normalise=True)
        sim, policy = build_simulator("small-hetero", w), ScoredRounds(score, stay=0.0)
        runs.append((sim.run(policy).end.min() if whole else run_to_first_end(sim, policy), score))
    first_end = min(runs[0][0], runs[1][0])
    pairs = [(x, y) for x, y in zip(runs[0][1].seen, runs[1][1].seen, strict=False) if max(x[0], y[0]) < first_end]
    assert len(pairs) >= 2
    assert all(np.array_equal(x[1], y[1]) and np.array_equal(x[2], y[2]) for x, y in pairs)
    shares = runs[0][1].shares
    assert shares.job_time.sum() == pytest.approx(shares.type_time.sum())
    assert shares.job_time.sum() > 200 * 180.0  # every job's half round on each type, plus the rounds run
    ends = [build_simulator("small-hetero", base).run(ScoredRounds(GavelPriorityScore(las), stay=0.0)).end
            for las in (0.0, 2.0)]  # fmt: skip
    assert not np.array_equal(*ends)
    # two types of one GPU, two 1-GPU jobs: steps/s [10, 8] and [1, 0.5]. Gavel's LP maximises summed
    # steps/s (the fast-stepping job gets type 0); over speeds relative to each job's fastest type the
    # second job gets type 0 (it loses half its speed elsewhere, the first a fifth)
    from types import SimpleNamespace

    class Jobs(SimpleNamespace):
        def __len__(self) -> int:
            return len(self.num_gpus)

    topo = SimpleNamespace(gpu_types=("A", "B"), server_gpu_type=np.array([0, 1]), server_num_gpus=np.array([1, 1]))
    view = SimpleNamespace(jobs=Jobs(num_gpus=np.array([1, 1])), topo=topo)
    rates = np.array([[10.0, 8.0], [1.0, 0.5]])
    x_raw, _ = GavelPriorityScore().log_priority(view, np.arange(2), rates)
    x_rel, _ = GavelPriorityScore(normalise=True).log_priority(view, np.arange(2), rates)
    assert np.allclose(x_raw, [[1, 0], [0, 1]]) and np.allclose(x_rel, [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="las, weight and oracle must be >= 0"):
        GavelPriorityScore(-1.0)


def test_heuristics_keep_a_job_on_one_type_in_their_stated_order() -> None:
    """On small-hetero, fifo keeps every job on one GPU type; ``gpu_type='fastest'`` starts a lone job on
    the type its model is measured fastest on, ``slowest`` on the slowest."""
    from cluster_sim.typed_placement import type_speeds
    from cluster_sim.workload import Workload

    w = Workload(
        arrival=np.zeros(1), num_gpus=np.array([4], dtype=np.int32), duration=np.array([3600.0]),
        model=np.zeros(1, dtype=np.int16), batch_size=np.array([128], dtype=np.int32),
        tenant=np.zeros(1, dtype=np.int16), models=("resnet50-imagenet",), tenants=("a",),
    )  # fmt: skip
    chosen = {}
    for order in ("fastest", "slowest", "any"):
        sim = build_simulator("small-hetero", w)
        policy = get_policy("fifo", gpu_type=order)
        res = sim.run(policy)
        assert res.metrics()["jobs_completed"] == 1
        types = set(np.flatnonzero(res.attained_by_type[0] > 0).tolist())
        assert len(types) == 1
        chosen[order] = sim.topo.gpu_types[types.pop()]
    sim = build_simulator("small-hetero", w)
    sim.reset()
    speeds = dict(zip(sim.topo.gpu_types, type_speeds(sim, 0, 4).tolist(), strict=True))
    assert chosen["fastest"] == max(speeds, key=speeds.get) == "V100"
    assert chosen["slowest"] == min(speeds, key=speeds.get) == "K80"
    with pytest.raises(ValueError, match="gpu_type"):
        get_policy("fifo", gpu_type="newest")


def test_a_round_score_of_your_own_decides_the_type_and_a_wrong_shape_is_named() -> None:
    """``ScoredRounds(score)``: a stack of keys whose first is -inf on every type but K80 runs the job on K80
    (its fastest type is V100); a score that is not one number per (job, type) is refused by name."""
    from cluster_sim.policies import ScoredRounds
    from cluster_sim.workload import Workload

    w = Workload(
        arrival=np.zeros(1), num_gpus=np.array([4], dtype=np.int32), duration=np.array([3600.0]),
        model=np.zeros(1, dtype=np.int16), batch_size=np.array([128], dtype=np.int32),
        tenant=np.zeros(1, dtype=np.int16), models=("resnet50-imagenet",), tenants=("a",),
    )  # fmt: skip
    seen = []

    def only_k80(view, jobs, rates, current):
        seen.append(rates.shape)
        k80 = np.array([name == "K80" for name in view.topo.gpu_types])
        return np.stack([np.where(k80, 0.0, -np.inf) + 0 * rates, rates])

    sim = build_simulator("small-hetero", w)
    res = sim.run(ScoredRounds(only_k80, name="k80"))
    assert res.metrics()["jobs_completed"] == 1 and seen and seen[0] == (1, len(sim.topo.gpu_types))
    assert [sim.topo.gpu_types[t] for t in np.flatnonzero(res.attained_by_type[0] > 0)] == ["K80"]
    per_job = ScoredRounds(lambda view, jobs, rates, current: np.zeros(len(jobs)), name="per-job")
    with pytest.raises(ValueError, match=r"per-job: its score must be one number per \(job, GPU type\)"):
        build_simulator("small-hetero", w).run(per_job)


def test_step_times_beyond_the_measured_shapes_are_extrapolated(sia_dir: Path) -> None:
    """cifar10 was measured on at most 3 RTX nodes: 4 and 8 nodes of 8 RTX GPUs get a step time (Pollux's
    model fitted to the type's measurements, from the largest measured shape), never faster than 3 nodes."""
    sim = sia_sim(sia_dir, 40)
    job = next(j for j in range(len(sim.jobs)) if sim.application(j).name == "cifar10")
    rtx = sim.app_on_type(job, "RTX2080Ti")
    assert int(rtx.steps.nodes.max()) == 3
    three, four, eight = (rtx.step_time((8,) * k, 64)[0] for k in (3, 4, 8))
    assert np.isfinite([four, eight]).all() and three <= four <= eight


def test_a_profile_folder_needs_only_its_workloads_applications_and_bad_rows_are_named(
    sia_dir: Path, tmp_path: Path
) -> None:
    import shutil

    from cluster_sim.workload_spec import WorkloadSpecError

    shutil.copytree(sia_dir / "traces" / "cifar10", tmp_path / "cifar10")
    (tmp_path / "w.csv").write_text("name,time,application,num_replicas,batch_size\na,1,cifar10,2,128\n")
    spec = f"pollux:{tmp_path / 'w.csv'},profiles={tmp_path}"
    assert build_simulator("sia-hetero", spec).run(get_policy("sia")).metrics()["jobs_completed"] == 1
    path = tmp_path / "cifar10" / "placements-rtx.csv"
    lines = path.read_text().splitlines()
    cells = lines[2].split(",")
    cells[1] = "fast"
    lines[2] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")
    from cluster_sim.pollux_apps import _load

    _load.cache_clear()
    with pytest.raises(WorkloadSpecError, match=r"placements-rtx\.csv:3: step_time='fast' is not a number"):
        build_simulator("sia-hetero", spec)


def test_an_unknown_gpu_type_names_the_field_and_the_known_types() -> None:
    from topology import parse_spec
    from topology.spec import ClusterSpecError

    spec = {"name": "x", "pods": 1, "racks_per_pod": 1, "servers_per_rack": 2,
            "mix": [{"gpu_type": "V100", "fraction": 0.5, "server": "nvswitch-8"},
                    {"gpu_type": "H900", "fraction": 0.5, "server": "pcie-8"}]}  # fmt: skip
    with pytest.raises(ClusterSpecError, match=r"mix\[1\]\.gpu_type.*unknown GPU type 'H900'.*RTX2080Ti"):
        parse_spec(spec, source="cluster.yaml")


def test_gavel_model_rule_draws_only_models_measured_on_every_type(traces_dir: Path, monkeypatch) -> None:
    """On small-hetero, Philly-like jobs with Gavel's job types run at measured speeds on every type; the
    default rule (Pollux's six models) has four without K80/P100 measurements: building it warns (once a
    process, naming the types and how many jobs), and the result counts the jobs that ran on estimates."""
    import warnings

    from cluster_sim import build
    from cluster_sim.build import EstimatedSpeedWarning

    monkeypatch.setattr(build, "_WARNED", set())
    counts = {}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for rule in ("gavel", "independent", "independent"):
            sim = build_simulator("small-hetero", f"synthetic:300,load=1.2,model_rule={rule}", seed=3)
            counts[rule] = sim.run(get_policy("qssf")).metrics()["estimated_jobs"]
    assert counts["gavel"] == 0 and counts["independent"] > 0
    estimated = [str(w.message) for w in seen if issubclass(w.category, EstimatedSpeedWarning)]
    assert (
        len(estimated) == 1 and "on small-hetero, some jobs' models were never measured on P100 or K80" in estimated[0]
    )
    assert re.search(r"\(jobs that may run there: \d+ on P100, \d+ on K80, of the workload's 300\)", estimated[0])
    # the agents' environment probes the cluster with a placeholder job: no warning of it, nor one it silences
    from marl.env.priority_env import PriorityEnv

    monkeypatch.setattr(build, "_WARNED", set())
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        PriorityEnv({"cluster": "small-hetero", "workload": "synthetic:300,load=1.2", "placing": True})
    assert not [w for w in seen if issubclass(w.category, EstimatedSpeedWarning)] and not build._WARNED


def test_named_regimes_are_runnable_and_hold_out_the_later_weeks() -> None:
    """Every regime's workloads parse and its policies exist; trace windows lie in 2017-11-01..14 (the
    selection weeks), and its reference is among its policies."""
    from cluster_sim.build import build_simulator
    from cluster_sim.workload_spec import check_workload_spec
    from experiments.regimes import DEV_END, DEV_START, REGIMES, regime
    from experiments.simulate import make_scheduler_by_name

    assert {"hetero", "sharing", "uplinks", "sia-hetero"} <= set(REGIMES)
    for reg in REGIMES.values():
        assert reg.reference in reg.policies
        sharing = {"gpu_sharing": True, "interference": "oracle"} if reg.gpu_sharing else {}
        sim = build_simulator(reg.cluster, reg.workloads()[0][0], **sharing, **reg.sim_options)
        assert len(sim.jobs) > 0
        for name in reg.policies:
            make_scheduler_by_name(name, 0)
        for spec, _ in reg.workloads():
            check_workload_spec(spec)
            if reg.trace is not None:
                opts = dict(kv.split("=", 1) for kv in spec.split(",")[1:])
                assert DEV_START <= float(opts["start"]) < float(opts["end"]) <= DEV_END + 1
    with pytest.raises(ValueError, match="unknown regime"):
        regime("nope")


# three 8-GPU servers of Gavel's generations: small enough that jobs queue and the round order matters
TINY_HETERO = {
    "name": "tiny-hetero",
    "pods": 1,
    "racks_per_pod": 3,
    "servers_per_rack": 1,
    "mix": [
        {"gpu_type": "V100", "fraction": 1 / 3, "server": "nvswitch-8"},
        {"gpu_type": "P100", "fraction": 1 / 3, "server": "pcie-8"},
        {"gpu_type": "K80", "fraction": 1 / 3, "server": "pcie-8"},
    ],
}
QUEUED = "synthetic:60,load=1.2,model_rule=gavel,max_gpus=8"


def test_a_cloned_simulator_runs_on_alone_and_as_the_original_would() -> None:
    """A deep copy taken mid-run (what look-ahead references do) continues to the same schedule as the
    original, and running it leaves the original untouched."""
    import copy

    from cluster_sim.policies.lookahead import job_seconds

    def midway():
        sim = build_simulator(TINY_HETERO, QUEUED, seed=5)
        policy = get_policy("gavel-las")
        sim.elastic, sim.mix_gpu_types = False, False
        sim.reset()
        policy.reset(sim)
        while sim.advance() and sim.now < 4 * 3600:
            if len(sim.queue):
                decisions = policy.schedule(sim)
                if decisions:
                    sim.apply(decisions)
        return sim, policy

    sim, policy = midway()
    assert len(sim.running) and len(sim.queue)
    before = (sim.now, np.asarray(sim.gpu_job).copy(), sim.num_completed)
    a = job_seconds(*copy.deepcopy((sim, policy)), sim.now + 6 * 3600)
    b = job_seconds(*copy.deepcopy((sim, policy)), sim.now + 6 * 3600)
    assert a == b > 0
    assert (sim.now, sim.num_completed) == (before[0], before[2]) and np.array_equal(sim.gpu_job, before[1])
    clone = copy.deepcopy(sim)
    assert not np.shares_memory(clone.gpu_job, sim.gpu_job) and clone.free_counts.gpu_job is clone.gpu_job
    original, other = midway()
    assert job_seconds(original, other, original.now + 6 * 3600) == a  # the uncopied run gives the same


def test_lookahead_oracle_plays_its_settings_ahead_without_touching_the_run() -> None:
    """With only the base setting to try, ``lookahead-oracle`` is ``gavel-las`` decision for decision (its
    rollouts on clones leave the real run alone); with all of them it chooses among them, and that changes
    the schedule."""
    from cluster_sim.policies.lookahead import VARIANTS, LookaheadRounds

    base = build_simulator(TINY_HETERO, QUEUED, seed=5).run(get_policy("gavel-las"))
    only = build_simulator(TINY_HETERO, QUEUED, seed=5).run(LookaheadRounds(variants=VARIANTS[:1], every=3))
    assert np.array_equal(only.end, base.end)
    policy = get_policy("lookahead-oracle", every=3, horizon=3 * 3600.0, terminal=0.0)
    ahead = build_simulator(TINY_HETERO, QUEUED, seed=5).run(policy)
    assert policy.chosen and set(policy.chosen) <= set(range(len(VARIANTS))) and len(set(policy.chosen)) > 1
    assert not np.array_equal(ahead.end, base.end)  # what it chose changed the schedule
    las_only = get_policy("lookahead-las-oracle", every=3, horizon=3 * 3600.0, terminal=0.0)
    assert las_only.variants == VARIANTS[:3] and all(v["oracle"] == 0.0 for v in las_only.variants)


def test_native_solver_output_stays_out_of_the_results(capfd) -> None:
    """What C++ writes to descriptor 1 while Sia's program is solved (HiGHS's debugging lines) is dropped; Python's
    output before and after, and everything on stderr, is kept."""
    import os

    from cluster_sim.native_output import native_stdout_silenced

    print("before")
    with native_stdout_silenced():
        os.write(1, b"HighsMipSolverData::transformNewIntegerFeasibleSolution tmpSolver.run();\n")
        os.write(2, b"kept on stderr\n")
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n" and err == "kept on stderr\n"


def test_the_ilp_skips_the_solver_only_where_its_optimum_is_each_jobs_own_cheapest_and_unique() -> None:
    """Sia's allocation program without HiGHS where the solver could return nothing else (so the schedule is
    bit for bit the solver's): each job on its unique cheapest configuration below 0, within every type's
    capacity. A binding capacity, a tie at a chosen job's least cost or a least cost of exactly 0 go to HiGHS."""
    rng = np.random.default_rng(0)
    skipped = 0
    for _ in range(200):
        jobs, types = int(rng.integers(1, 8)), int(rng.integers(1, 4))
        job = np.sort(rng.integers(0, jobs, size=int(rng.integers(1, 25))))
        cost = np.round(rng.uniform(-2.0, 1.0, size=len(job)), 1)  # rounded: ties happen, as in Sia's costs
        gpu_type, gpus = rng.integers(0, types, size=len(job)), rng.choice([1.0, 2.0, 4.0, 8.0], size=len(job))
        capacity = rng.choice([4.0, 8.0, 64.0], size=types)
        shortcut = unique_unconstrained_optimum(cost, job, gpu_type, gpus, capacity)
        if shortcut is not None:
            skipped += 1
            assert np.array_equal(shortcut, _solve_ilp(cost, job, gpu_type, gpus, capacity, jobs))
    assert 20 < skipped < 180  # both paths are taken

    def least(cost: list[float], job: list[int]) -> np.ndarray | None:  # one type of one GPU, 1-GPU configurations
        n = len(cost)
        return unique_unconstrained_optimum(np.array(cost), np.array(job), np.zeros(n, int), np.ones(n), np.ones(1))

    assert least([-1.0, -1.0], [0, 0]) is None  # a tie at the chosen job's least cost
    assert least([-1.0, 0.5], [0, 0]).tolist() == [0]
    assert least([0.0, 0.5], [0, 0]) is None  # running it or not costs the same
    assert least([-1.0, -2.0], [0, 1]) is None  # two jobs want the one GPU: the capacity binds


def test_a_program_the_ilp_solved_before_is_answered_again_without_the_solver(monkeypatch) -> None:
    """A round that poses the very program an earlier one did gets the earlier answer (HiGHS's own, copied), and
    HiGHS is not run again; a program that differs in anything (one cost, the capacity) is solved."""
    import cluster_sim.policies.sia as sia

    cost, job = np.array([-1.0, -2.0, -1.5, -0.5]), np.array([0, 0, 1, 1])
    gpu_type, gpus, capacity = np.array([0, 0, 0, 0]), np.array([1.0, 2.0, 1.0, 2.0]), np.array([2.0])
    calls = []
    highs = sia._run_highs
    monkeypatch.setattr(sia, "_run_highs", lambda *a: calls.append(1) or highs(*a))
    monkeypatch.setattr(sia, "_SOLVED", {})
    first = sia._solve_ilp(cost, job, gpu_type, gpus, capacity, 2)
    first[:] = -1  # the caller's copy: what is kept is not changed through it
    again = sia._solve_ilp(cost.copy(), job, gpu_type, gpus, capacity, 2)
    assert len(calls) == 1 and np.array_equal(again, highs(cost, job, gpu_type, gpus, capacity, 2))
    sia._solve_ilp(cost, job, gpu_type, gpus, np.array([3.0]), 2)
    sia._solve_ilp(np.array([-1.0, -2.0, -1.5, -0.6]), job, gpu_type, gpus, capacity, 2)
    assert len(calls) == 3


def test_sia_weighs_duration_jobs_by_their_models_speed_on_each_type(traces_dir: Path) -> None:
    """Jobs with a duration and no measured application (a Philly window with Gavel's models): Sia's goodput
    is their GPUs at their model's profiled speed on each type, so it is as type-aware as Gavel on them and
    ahead of the type-blind order (counting GPUs alone, it was 4x behind Gavel here)."""
    window = "start=2017-11-05,end=2017-11-05T12:00,load=0.4,max_jobs=30"
    spec = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel,{window}"
    jct = {
        name: build_simulator("small-hetero", spec, seed=0).run(get_policy(name)).jct.mean()
        for name in ("sia", "gavel", "rounds-blind")
    }
    assert jct["sia"] < 1.1 * jct["gavel"] and jct["sia"] < jct["rounds-blind"], jct


def test_sia_runs_rigid_jobs_of_counts_outside_its_tables(tmp_path: Path) -> None:
    """Sia's configurations are 1, 2, 4 GPUs and whole nodes; a rigid job of 3, 5 or 6 GPUs gets its own count
    as a configuration (it waited forever before), and Sia still finishes every job first on an empty cluster."""
    trace = tmp_path / "odd.csv"
    rows = [(0, 3), (60, 6), (120, 1), (180, 5)]
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        + "".join(f"2024-03-10 00:0{m // 60}:00,3600,{g},{3600 * g},a\n" for m, g in rows)
    )
    result = build_simulator("small-hetero", f"philly:{trace}", seed=0).run(get_policy("sia"))
    assert result.metrics()["jobs_completed"] == 4 and result.jct.max() < 3600 * 1.01 + 60


def test_applications_profiled_on_t4_only_run_at_estimated_speeds_on_other_types(
    tmp_path: Path, traces_dir: Path, monkeypatch
) -> None:
    """Pollux's applications (``apps=`` its traces: T4 step times only) on a cluster of other types: each type's
    step times are the T4 ones with the compute scaled by the model's speed there, so the type a job runs on
    matters (it did not: T4 times served every type), the run says so before it starts and counts the jobs that
    ran on estimates. A job larger than every type is refused before the run by a scheduler that keeps counts."""
    from cluster_sim import build
    from cluster_sim.build import EstimatedSpeedWarning

    monkeypatch.setattr(build, "_WARNED", set())  # warned once a process: not by an earlier test here
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2024-03-10 00:00:00,3600,4,14400,a\n2024-03-10 12:00:00,3600,2,7200,a\n2024-03-11 00:00:00,3600,1,3600,a\n"
    )
    spec = f"philly:{trace},apps={traces_dir}/pollux-osdi21/traces"
    with pytest.warns(EstimatedSpeedWarning, match=r"applications were never profiled on V100 or P100 or K80"):
        sim = build_simulator("small-hetero", spec, seed=0)
    fastest, slowest = (sim.run(get_policy(f"fifo@{order}")) for order in ("fastest", "slowest"))
    assert fastest.jct.mean() < 0.8 * slowest.jct.mean()  # nothing else waits: only the type differs
    assert fastest.metrics()["estimated_jobs"] == slowest.metrics()["estimated_jobs"] == 3
    trace.write_text(trace.read_text() + "2024-03-11 06:00:00,3600,128,460800,a\n")  # larger than every type (96 V100)
    with pytest.raises(ValueError, match=r"128 GPUs and gavel keeps each job's GPU count.* max_gpus=96"):
        build_simulator("small-hetero", spec, seed=0, warn_estimated=False).run(get_policy("gavel"))
    with pytest.raises(ValueError, match=r"128 GPUs and fifo does not resize jobs"):
        build_simulator("small-hetero", spec, seed=0, warn_estimated=False).run(get_policy("fifo"))
