"""DL2 (marl.baselines): its steps reproduce Optimus exactly as the teacher, the NumPy and TorchScript
forwards equal the module, allocations are valid, observations never touch a job's length, config errors,
the shipped folder, and a brief seeded training run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.build import build_simulator
from cluster_sim.policies import get_policy
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from marl.baselines.dl2 import (
    DL2,
    GLOBAL_FEATURES,
    JOB_FEATURES,
    DL2Net,
    NumpyForward,
    load_dl2_policy,
    save_dl2_policy,
)
from marl.baselines.dl2_train import parse_dl2_config, train_dl2
from marl.training.config import TrainConfigError

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "experiments" / "policies" / "dl2-pollux"
DEV = HELD_OUT_START
COSTS = {"restart_cost": 30.0, "start_cost": 30.0}


@pytest.fixture(scope="module")
def workload(pollux_dir: Path) -> str:
    return f"pollux:{pollux_dir}/workloads/workload-3.csv,max_jobs=40"


@pytest.fixture(scope="module")
def philly(traces_dir: Path) -> str:
    t = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,apps={traces_dir}/pollux-osdi21/traces"
    return t


def _net(seed: int = 0) -> DL2Net:
    torch.manual_seed(seed)
    return DL2Net(hidden=16).eval()


def _sim(spec: str):
    return build_simulator("pollux-testbed", spec, seed=0, **COSTS)


def test_the_teacher_mode_is_optimus_step_for_step(workload: str) -> None:
    optimus = _sim(workload).run(get_policy("optimus", 0))
    teacher = DL2(_net(), mode="teacher", record=True)
    ours = _sim(workload).run(teacher)
    np.testing.assert_array_equal(ours.end, optimus.end)
    np.testing.assert_array_equal(ours.resizes, optimus.resizes)
    assert teacher.agree[0] == teacher.agree[1] > 500  # every step is Optimus' own
    assert all(st[3] == st[4] for st in teacher.steps)


def test_numpy_and_torchscript_forwards_equal_the_module(tmp_path: Path) -> None:
    net = _net(3)
    gen = torch.Generator().manual_seed(1)
    jobs = torch.rand(4, 9, len(JOB_FEATURES), generator=gen)
    glob = torch.rand(4, len(GLOBAL_FEATURES), generator=gen)
    mask = torch.rand(4, 10, generator=gen) > 0.4
    mask[:, 0] = True
    mask[2, -1] = False  # stop not allowed in this state
    with torch.no_grad():
        ref = net(jobs, glob, mask)
    fast = NumpyForward(net)
    for b in range(4):
        fast.embed(jobs[b].double().numpy())
        got = fast.logits(glob[b].double().numpy(), mask[b, :-1].numpy(), bool(mask[b, -1]))
        keep = mask[b].numpy()
        np.testing.assert_allclose(got[keep], ref[b].numpy()[keep], rtol=1e-5, atol=1e-5)
        assert np.all(got[~keep] <= -1e8)
    save_dl2_policy(net, tmp_path / "p", {"hidden": 16})
    loaded = load_dl2_policy(tmp_path / "p")
    with torch.no_grad():
        np.testing.assert_allclose(loaded.net(jobs, glob, mask)[mask], ref[mask], rtol=1e-6, atol=1e-6)


def test_allocations_are_valid_and_the_export_runs_without_rllib(tmp_path: Path, workload: str) -> None:
    workload = workload.replace("max_jobs=40", "max_jobs=20")  # ~3,000 steps of the network's
    net = _net(1)
    sched = DL2(net, mode="sample", record=True, seed=4)
    res = _sim(workload).run(sched)  # the simulator rejects a GPU given twice or a count out of range
    assert res.metrics()["jobs_completed"] == len(res.jct) == 20
    assert res.resizes.sum() > 0  # elastic: jobs were resized
    assert len(sched.steps) > 100
    for feats, _glob, mask, pick, best, _ in sched.steps:
        assert mask[pick] and mask[best] and feats.shape == (len(mask) - 1, len(JOB_FEATURES))
    save_dl2_policy(net, tmp_path / "p", {"hidden": 16})
    code = (
        "import sys; from experiments.simulate import make_scheduler_by_name; "
        "from cluster_sim.build import build_simulator; "
        f"s = make_scheduler_by_name('dl2:{tmp_path / 'p'}', 0); "
        f"r = build_simulator('pollux-testbed', {workload!r}, seed=0, restart_cost=30, start_cost=30).run(s); "
        "assert not any(m.startswith(('ray', 'ray.rllib')) for m in sys.modules), 'ray imported'; "
        "print(r.metrics()['avg_jct'])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    mine = _sim(workload).run(DL2(net)).metrics()["avg_jct"]
    assert float(out.stdout.split()[-1]) == pytest.approx(mine)
    # the torch.export program alone (a torch without TorchScript) schedules the same
    (tmp_path / "p" / "policy.pt").unlink()
    program = load_dl2_policy(tmp_path / "p")
    assert _sim(workload).run(program).metrics()["avg_jct"] == mine


class NoLengthView:
    """The simulator as a scheduler sees it, minus what a deployed one cannot know: a job's length (any read
    raises). Shared by the no-leak tests of the learned baselines."""

    FORBIDDEN = frozenset(
        {"remaining_time", "remaining_times", "_remaining", "_scale", "duration", "estimated_duration"}
    )

    def __init__(self, inner) -> None:
        object.__setattr__(self, "_inner", inner)

    def __getattr__(self, name: str):
        if name in self.FORBIDDEN:
            raise AssertionError(f"the scheduler read {name!r}")
        value = getattr(self._inner, name)
        return NoLengthView(value) if name == "jobs" else value

    def __len__(self) -> int:
        return len(self._inner)


class _GuardedDL2(DL2):
    def reset(self, view) -> None:
        super().reset(NoLengthView(view))

    def schedule(self, view):
        return super().schedule(NoLengthView(view))


def test_observations_never_read_a_jobs_length(philly: str) -> None:
    spec = window_spec(philly, DEV, DEV + DAY, 0.6, ["max_jobs=40"])
    probe = _GuardedDL2(_net(), record=True, keep=1.0)
    res = _sim(spec).run(probe)
    assert res.metrics()["jobs_completed"] == 40 and len(probe.steps) > 100
    with pytest.raises(AssertionError, match="read 'remaining_time'"):
        NoLengthView(_sim(spec)).remaining_time(0)


def test_a_bad_config_names_the_key_and_the_fix() -> None:
    with pytest.raises(TrainConfigError, match=r"c\.yaml: train\.keep: is a share of the steps"):
        parse_dl2_config({"agent": "dl2", "train": {"keep": 2}}, "c.yaml")
    with pytest.raises(TrainConfigError, match=r"warm_start\.rounds: must be >= 0"):
        parse_dl2_config({"agent": "dl2", "warm_start": {"rounds": -1}}, "c.yaml")
    with pytest.raises(TrainConfigError, match=r"evaluation\.heuristics\.1: .*optimuss"):
        parse_dl2_config({"agent": "dl2", "evaluation": {"heuristics": ["optimus", "optimuss"]}}, "c.yaml")
    with pytest.raises(TrainConfigError, match=r"env\.validation\.start: .*held out by time"):
        parse_dl2_config(
            {"agent": "dl2", "env": {"train": {"start": 0, "count": 2, "days": 1}, "validation": {"start": 3600}}},
            "c.yaml",
        )
    with pytest.raises(TrainConfigError, match="this trainer trains 'dl2'"):
        parse_dl2_config({"agent": "topdrl"}, "c.yaml")


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="no shipped DL2 policy")
def test_the_shipped_policy_loads_and_schedules_validly(workload: str) -> None:
    from experiments.simulate import make_scheduler_by_name

    res = _sim(workload).run(make_scheduler_by_name(f"dl2:{SHIPPED}", 0))
    assert res.metrics()["jobs_completed"] == len(res.jct) == 40


@pytest.mark.slow
def test_brief_training_is_seeded_and_reports_the_warm_start(tmp_path: Path, philly: str, train_command) -> None:
    start = DEV - 10 * 86400.0
    cluster = tmp_path / "quarter.yaml"  # a quarter of Pollux's testbed: 12 jobs keep it busy, and briefly
    cluster.write_text(
        "name: pollux-quarter\npods: 1\nracks_per_pod: 1\nservers_per_rack: 4\nserver: pcie-4\ngpu_type: T4\n"
    )
    data = {
        "agent": "dl2",
        "seed": 5,
        "env": {
            "cluster": str(cluster),
            "trace": f"{philly},max_jobs=12",
            "load": 0.5,
            "train": {"start": start, "count": 2, "days": 0.5, "stride_days": 0.5},
            "validation": {"start": start + 4 * 86400, "count": 1, "days": 0.5},
            "report": {"start": DEV, "count": 1, "days": 1},
        },
        "model": {"hidden": 8},
        "warm_start": {"rounds": 1, "windows": 1, "keep": 0.2, "epochs": 2},
        "train": {"iterations": 1, "rollouts": 2, "workers": 1, "segment_h": 1, "horizon_h": 0.5, "eval_every": 1},
        "evaluation": {"heuristics": ["optimus"]},
    }
    cfg = parse_dl2_config(data, "brief.yaml")
    first = train_dl2(cfg, tmp_path / "a", log=lambda m: None)
    train_command(data, tmp_path / "b", "--no-eval")  # the one command, the same seed: the same policy
    a = torch.jit.load(str(tmp_path / "a" / "policy" / "policy.pt")).state_dict()
    b = torch.jit.load(str(tmp_path / "b" / "policy" / "policy.pt")).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    meta = load_dl2_policy(tmp_path / "a" / "policy")
    assert isinstance(meta, DL2)
    import json

    doc = json.loads((tmp_path / "a" / "policy" / "metadata.json").read_text())
    rounds = doc["warm_start"]["rounds"]
    assert [r["visited_by"] for r in rounds] == ["optimus", "network"]
    assert all(0.0 <= r["accuracy_on_teacher_states"] <= 1.0 for r in rounds)
    table = {r["scheduler"]: r for r in first["evaluation"]["report windows"]["table"]}
    assert set(table) == {"dl2", "dl2-warm-start", "optimus"} and table["optimus"]["vs_reference"] == 0.0
    assert (tmp_path / "a" / "policy" / "learning_curve.png").is_file()
