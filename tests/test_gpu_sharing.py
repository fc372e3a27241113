"""GPU sharing: two single-GPU jobs on one GPU, the packing schedulers, and what a predictor buys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cluster_sim.job_descriptors import DescriptorCache
from cluster_sim.policies import get_policy
from cluster_sim.policies.gpu_packing import GpuPacking
from cluster_sim.protocol import InvalidDecision, Start
from cluster_sim.simulator import Simulator
from interference.base import Sharing
from interference.gavel_data import load_gavel_pairs
from interference.ground_truth import GroundTruthInterference
from interference.training import TrainConfig, fit
from tests.test_simulator import Script, gpus, tiny_cluster, workload


@pytest.fixture(scope="module")
def truth(traces_dir: Path) -> GroundTruthInterference:
    path = traces_dir / "gavel" / "simulation_throughputs.json"
    if not path.is_file():
        pytest.skip("Gavel throughput tables not present")
    return GroundTruthInterference(load_gavel_pairs(f"gavel:{path}"))


def _sim(w, truth, **kw) -> Simulator:
    view = tiny_cluster(servers=1, server="pcie-4").view
    return Simulator(view, w, interference=truth, gpu_sharing=True, record_history=True, **kw)


class Probe(Script):
    """A script that also records who holds GPU 0 and how many GPUs are free at each scheduling point."""

    def __init__(self, plan, at):
        super().__init__({**plan, **{t: [] for t in at if t not in plan}})
        self.seen: dict[float, tuple[int, int, int]] = {}

    def schedule(self, view) -> list:
        self.seen[view.now] = (int(view.gpu_job[0]), int(view.gpu_guest[0]), int(view.num_free))
        return super().schedule(view)


def test_two_jobs_share_a_gpu_at_the_measured_speeds(truth):
    w = workload([0, 0], [1, 1], [100.0, 300.0], model="lstm-lm")
    sim = _sim(w, truth)
    d = DescriptorCache(w, sim.topo).get(0, 0)
    f = truth.pair_factor(d, d, Sharing.GPU)  # parametric: Gavel ran the LM at batch 5-80 only
    assert 0.2 < f < 0.9
    t_first = 100.0 / f
    probe = Probe({0.0: [Start(0, gpus(0)), Start(1, gpus(0))]}, at=[1.0, t_first + 1.0])
    res = sim.run(probe)
    # job 0 finishes at 100/f; job 1 has done 100 s of work by then and runs its last 200 s alone
    np.testing.assert_allclose(res.jct, [t_first, t_first + 200.0], rtol=1e-9)
    assert probe.seen[1.0] == (0, 1, 3)  # one GPU held by two jobs: 3 of 4 free
    assert probe.seen[t_first + 1.0] == (1, -1, 3)  # the guest became the holder


def test_sharing_is_validated(truth):
    w = workload([0, 0, 0, 0], [1, 1, 1, 2], [100.0] * 4)
    with pytest.raises(InvalidDecision, match=r"jobs 0 and 1 already share it"):
        _sim(w, truth).run(Script({0.0: [Start(0, gpus(0)), Start(1, gpus(0)), Start(2, gpus(0))]}))
    with pytest.raises(InvalidDecision, match=r"GPUs already held"):  # a 2-GPU job never shares
        _sim(w, truth).run(Script({0.0: [Start(0, gpus(0)), Start(3, gpus(0, 1))]}))
    with pytest.raises(InvalidDecision, match=r"holder, job 3, spans several GPUs"):
        _sim(w, truth).run(Script({0.0: [Start(3, gpus(0, 1)), Start(0, gpus(0))]}))
    view = tiny_cluster(servers=1, server="pcie-4").view
    with pytest.raises(InvalidDecision, match=r"GPUs already held"):  # without gpu_sharing, as always
        Simulator(view, w, interference=truth).run(Script({0.0: [Start(0, gpus(0)), Start(1, gpus(0))]}))
    with pytest.raises(ValueError, match="gpu_sharing needs an interference model"):
        Simulator(view, w, gpu_sharing=True)


def test_packing_modes(truth, tmp_path: Path, traces_dir: Path):
    # 4 GPUs, 8 one-GPU jobs at once: without sharing half of them wait; blind packing starts all eight
    w = workload([0.0] * 8, [1] * 8, [1000.0] * 8, model="resnet18-cifar10")
    none = _sim(w, truth).run(get_policy("pack-none"))
    blind = _sim(w, truth).run(get_policy("pack-blind"))
    assert (np.sort(none.jct)[4:] >= 2000.0).all()  # the second four waited for the first
    assert (blind.jct > 1000.0).all() and blind.jct.mean() < none.jct.mean()  # ResNet-18 pairs keep > 0.5 each
    again = _sim(w, truth).run(get_policy("pack-blind"))
    np.testing.assert_array_equal(blind.jct, again.jct)
    # aware: consults the predictor; a threshold no pair reaches means it never shares
    model = tmp_path / "predictor.json"
    fit(load_gavel_pairs(f"gavel:{traces_dir / 'gavel'}"), TrainConfig(steps=40, members=2)).save(model)
    aware = _sim(w, truth).run(GpuPacking(mode="aware", predictor=str(model)))
    refuse = _sim(w, truth).run(GpuPacking(mode="aware", predictor=str(model), min_gain=2.5))
    assert aware.jct.mean() < none.jct.mean()
    np.testing.assert_array_equal(refuse.jct, none.jct)
    with pytest.raises(ValueError, match="mode=aware needs predictor=MODEL"):
        GpuPacking(mode="aware")
    # the predictor replaces only the slowdown of jobs sharing a GPU: where none shares, a simulator that
    # runs on it (--interference learned) gives the ground truth's schedule, bit for bit
    from cluster_sim.build import build_simulator

    gavel = f"gavel:{traces_dir / 'gavel'}"
    runs = [build_simulator("small", "synthetic:600,window_load=1.2", seed=3, interference=mode, interference_data=data,
                            restart_cost=30.0).run(get_policy("qssf"))
            for mode, data in (("learned", str(model)), ("oracle", gavel), ("none", None))]  # fmt: skip
    np.testing.assert_array_equal(runs[0].end, runs[1].end)
    assert not np.array_equal(runs[1].end, runs[2].end)  # while the truth does slow jobs down here
    view = tiny_cluster(servers=1, server="pcie-4").view
    with pytest.raises(ValueError, match="run the simulator with gpu_sharing"):
        Simulator(view, w).run(get_policy("pack-blind"))


def test_guests_move_to_free_gpus(truth):
    # 4 jobs fill the GPUs, 2 more join GPUs 0 and 1 as guests; when job 2 ends, GPU 2 is free and a guest
    # moves there
    w = workload([0.0] * 6, [1] * 6, [5000.0, 5000, 100, 5000, 3000, 3000], model="resnet18-cifar10")
    sim = Simulator(
        tiny_cluster(servers=1, server="pcie-4").view, w, interference=truth, gpu_sharing=True, record_history=True
    )
    res = sim.run(get_policy("pack-blind"))
    moves = [(t, j, g.tolist()) for t, kind, j, g in sim.history if kind == "start" and j in (4, 5) and t > 0]
    assert moves[0] == (pytest.approx(res.jct[2]), 4, [2])
    assert moves[1] == (pytest.approx(res.jct[4]), 5, [2])  # and when that one ends, the other guest
    assert res.jct[4] < res.jct[5]


def test_qssf_order_serves_the_queue_as_qssf_np_does_and_packs_in_that_order(traces_dir: Path):
    # The same Philly window (history of earlier jobs included): without sharing, packing's QSSF order starts
    # every job when qssf-np does; with blind packing it still differs from the arrival order's schedule.
    from cluster_sim.build import build_simulator

    spec = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,start=2017-11-01,end=2017-11-02,load=1.1"
    data = f"gavel:{traces_dir}/gavel/simulation_throughputs.json"

    def run(name: str, sharing: bool):
        sim = build_simulator("small", spec, seed=0, interference="oracle", interference_data=data, gpu_sharing=sharing)
        return sim.run(get_policy(name))

    qssf_np, none_qssf = run("qssf-np", False), run("pack-none-qssf", False)
    np.testing.assert_array_equal(none_qssf.end, qssf_np.end)
    assert not np.array_equal(none_qssf.end, run("pack-none", False).end)
    blind_qssf, blind = run("pack-blind-qssf", True), run("pack-blind", True)
    assert blind_qssf.scheduler == "pack-blind-qssf" and not np.array_equal(blind_qssf.end, blind.end)
    with pytest.raises(ValueError, match="unknown packing order 'srtf'; choose one of arrival, qssf"):
        GpuPacking(order="srtf")


def test_packing_under_tiresias_preempts_hosts_with_their_guests(traces_dir: Path):
    # Tiresias decides who runs on a view without the guests; blind packing fills in. Every decision is
    # validated by the simulator; a preempted host takes its guest along, so its GPU is really free.
    from cluster_sim.build import build_simulator
    from cluster_sim.protocol import Preempt

    spec = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,start=5664559,end=5750959,load=1.1"
    data = f"gavel:{traces_dir}/gavel/simulation_throughputs.json"

    def sim(sharing: bool):
        return build_simulator(
            "small", spec, seed=0, interference="oracle", interference_data=data, gpu_sharing=sharing
        )

    tiresias = sim(False).run(get_policy("tiresias"))
    alone = sim(False).run(GpuPacking(mode="none", under="tiresias"))
    np.testing.assert_array_equal(alone.end, tiresias.end)  # without packing it is Tiresias itself

    packer = get_policy("pack-blind-tiresias")
    seen = {"shared_rounds": 0, "guests_evicted": 0}
    schedule = packer.schedule

    def watched(view):
        out = schedule(view)
        guests = set(np.asarray(view.gpu_guest)[np.asarray(view.gpu_guest) >= 0].tolist())
        seen["shared_rounds"] += bool(guests)
        seen["guests_evicted"] += sum(isinstance(d, Preempt) and d.job in guests for d in out)
        return out

    packer.schedule = watched
    res = sim(True).run(packer)
    assert np.isfinite(res.end).all() and res.scheduler == "pack-blind-tiresias"
    assert seen["shared_rounds"] > 0 and seen["guests_evicted"] > 0
    assert not np.array_equal(res.end, tiresias.end)
    with pytest.raises(ValueError, match="packing runs under tiresias, qssf, not 'fifo'"):
        GpuPacking(under="fifo")
    with pytest.raises(ValueError, match="pack-blind-tiresias shares GPUs: run the simulator with gpu_sharing"):
        sim(False).run(get_policy("pack-blind-tiresias"))


def test_a_learned_model_used_beyond_its_fitted_range_is_said_before_the_run(monkeypatch) -> None:
    """In learned mode the predictor is the simulation's truth: jobs whose inputs lie outside the range it was
    fitted on are counted by model and GPU type, as the model's own range check finds them, once per cluster."""
    import warnings

    from cluster_sim.build import InterferenceRangeWarning, build_simulator
    from interference.learned import LearnedInterference

    monkeypatch.setattr("cluster_sim.build._WARNED", set())  # as in a new process (another test may have said it)
    path = Path(__file__).resolve().parents[1] / "experiments" / "policies" / "interference-gavel" / "model.json"
    with pytest.warns(InterferenceRangeWarning) as seen:
        sim = build_simulator("small", "synthetic:150,load=0.9", seed=5, interference="learned",
                              interference_data=str(path), gpu_sharing=True)  # fmt: skip
    model, cache = LearnedInterference.load(path), DescriptorCache(sim.jobs, sim.topo, sim.perf)
    outside = model.outside_fitted_range([cache.get(j, 0) for j in range(len(sim.jobs))])
    names = sorted({sim.jobs.models[int(sim.jobs.model[j])] for j in np.flatnonzero(outside)})
    said = str(seen[0].message)
    assert 0 < outside.sum() < len(outside) and f"{int(outside.sum())} of the workload's 150 jobs lie outside" in said
    assert all(f"{m} on V100" in said for m in names)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InterferenceRangeWarning)  # said once a process for this cluster and model
        build_simulator("small", "synthetic:150,load=0.9", seed=5, interference="learned", interference_data=str(path))
