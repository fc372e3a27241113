"""TopDRL (marl.baselines): valid rigid placements, no leak of durations, export without RLlib, the
returns it learns from, its config errors, the shipped folder, and a brief seeded training run."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.build import build_simulator
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from marl.baselines.topdrl import TopDRL, TopDRLNet, load_topdrl_policy, save_topdrl_policy
from marl.baselines.topdrl_train import parse_topdrl_config, returns_at, train_topdrl
from marl.training.config import TrainConfigError

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "experiments" / "policies" / "topdrl-small"
CLUSTER_64 = str(REPO / "experiments" / "configs" / "clusters" / "small-64.yaml")
DEV = HELD_OUT_START


@pytest.fixture(scope="module")
def trace(traces_dir: Path) -> str:
    return f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv"


@pytest.fixture(scope="module")
def window(trace: str) -> str:
    start = DEV + 6 * DAY
    return window_spec(trace, start, start + DAY, 0.9)


def _net(seed: int = 0) -> TopDRLNet:
    torch.manual_seed(seed)
    return TopDRLNet(hidden=16, pooled=4).eval()


def test_rigid_jobs_on_their_request_never_preempted_one_gpu_type(window: str) -> None:
    for cluster in ("small", "small-hetero"):
        sim = build_simulator(cluster, window, seed=0)
        sched = TopDRL(_net(), slots=6, sample=True, record=True, seed=3)
        res = sim.run(sched)  # the simulator rejects a GPU given twice or a wrong count
        m = res.metrics()
        assert m["jobs_completed"] == len(res.jct) > 100
        assert res.preemptions.sum() == 0 and res.restarts.sum() == 0
        assert np.all(res.gpus_held == res.workload.num_gpus)
        assert np.all((res.attained_by_type > 0).sum(axis=1) == 1)  # one GPU type per job
        assert len(sched.steps) > 20  # real choices among several fitting jobs were made
        for cluster_img, _, _, mask, pick, _ in sched.steps:
            assert mask[pick] and mask.sum() >= 2 and cluster_img.shape[1] == sim.topo.num_servers


def test_changing_unfinished_jobs_durations_leaves_every_observation_unchanged(window: str) -> None:
    base = build_simulator("small", window, seed=0)
    first = base.run(TopDRL(_net(), slots=6))
    cut = float(np.quantile(first.end, 0.5))
    unfinished = ~(first.end <= cut)
    jobs = base.jobs
    longer = dataclasses.replace(jobs, duration=np.where(unfinished, jobs.duration * 3.0 + 100.0, jobs.duration))
    seen = []
    for workload in (jobs, longer):
        probe = TopDRL(_net(), slots=6, record=True)
        build_simulator("small", workload, seed=0).run(probe, until=cut)  # what comes after is not compared
        seen.append([s for s in probe.steps if s[5] < cut])
    assert len(seen[0]) > 20 and len(seen[0]) == len(seen[1])
    for a, b in zip(*seen, strict=True):
        assert a[5] == b[5] and a[4] == b[4]
        for x, y in zip(a[:4], b[:4], strict=True):
            np.testing.assert_array_equal(x, y)


def test_export_equals_the_network_and_runs_without_rllib(tmp_path: Path, window: str) -> None:
    net = _net(1)
    save_topdrl_policy(net, tmp_path / "p", {"slots": 6, "gpu_type": "any"})
    loaded = load_topdrl_policy(tmp_path / "p")
    gen = torch.Generator().manual_seed(5)
    args = (
        torch.rand(3, 32, 40, generator=gen),
        torch.rand(3, 3, generator=gen),
        torch.rand(3, 6, 8, generator=gen),
        torch.rand(3, 6, generator=gen) > 0.3,
    )
    args[3][:, 0] = True
    with torch.no_grad():
        a, b = loaded.net(*args), net(*args)
    np.testing.assert_allclose(a[args[3]].numpy(), b[args[3]].numpy(), rtol=1e-5, atol=1e-6)
    ours = build_simulator("small", window, seed=0).run(TopDRL(net, slots=6)).jct
    theirs = build_simulator("small", window, seed=0).run(loaded).jct
    np.testing.assert_array_equal(ours, theirs)
    code = (
        "import sys; from experiments.simulate import make_scheduler_by_name; "
        "from cluster_sim.build import build_simulator; "
        f"s = make_scheduler_by_name('topdrl:{tmp_path / 'p'}', 0); "
        f"r = build_simulator('small', {window!r}, seed=0).run(s); "
        "assert not any(m.startswith(('ray', 'ray.rllib')) for m in sys.modules), 'ray imported'; "
        "print(r.metrics()['jobs_completed'])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) == len(ours)
    # the torch.export program alone (a torch without TorchScript) schedules the same
    (tmp_path / "p" / "policy.pt").unlink()
    program = build_simulator("small", window, seed=0).run(load_topdrl_policy(tmp_path / "p")).jct
    np.testing.assert_array_equal(program, ours)


def test_export_program_fills_a_folder_from_before_programs(window: str, refilled_by_export_program) -> None:
    older = refilled_by_export_program(SHIPPED)
    ours = build_simulator("small", window, seed=0).run(load_topdrl_policy(SHIPPED)).jct
    np.testing.assert_array_equal(build_simulator("small", window, seed=0).run(load_topdrl_policy(older)).jct, ours)


def test_a_folder_of_another_version_is_refused_with_the_file(tmp_path: Path) -> None:
    save_topdrl_policy(_net(), tmp_path / "p", {"slots": 6})
    meta = tmp_path / "p" / "metadata.json"
    meta.write_text(meta.read_text().replace('"span"', '"spread"'))
    with pytest.raises(ValueError, match=r"metadata.json: job_features .* retrain"):
        load_topdrl_policy(tmp_path / "p")


def test_returns_discount_completions_and_job_seconds_in_time() -> None:
    arrival = np.array([0.0, 10.0, 50.0])
    end = np.array([20.0, 40.0, 100.0])
    tau = 30.0
    t = np.array([0.0, 30.0])
    tp = returns_at(t, arrival, end, "throughput", tau)
    assert tp[0] == pytest.approx(np.exp(-20 / 30) + np.exp(-40 / 30) + np.exp(-100 / 30))
    assert tp[1] == pytest.approx(np.exp(-10 / 30) + np.exp(-70 / 30))
    jct = returns_at(t, arrival, end, "jct", tau)

    def stay(a: float, c: float, t0: float) -> float:  # ∫_a^c exp(-(s - t0)/tau) ds
        return tau * (np.exp(-(a - t0) / tau) - np.exp(-(c - t0) / tau))

    assert jct[0] == pytest.approx(-(stay(0, 20, 0) + stay(10, 40, 0) + stay(50, 100, 0)) / 3600)
    assert jct[1] == pytest.approx(-(stay(30, 40, 30) + stay(50, 100, 30)) / 3600)


def test_a_bad_config_names_the_key_and_the_choices() -> None:
    choices = r"train\.reward: unknown reward 'latency'; choose one of throughput, jct"
    with pytest.raises(TrainConfigError, match=choices):
        parse_topdrl_config({"agent": "topdrl", "train": {"reward": "latency"}}, "cfg.yaml")
    with pytest.raises(TrainConfigError, match=r"train\.rollouts: .*at least 2"):
        parse_topdrl_config({"agent": "topdrl", "train": {"rollouts": 1}}, "cfg.yaml")
    with pytest.raises(TrainConfigError, match=r"env\.validation\.start: .*held out by time"):
        parse_topdrl_config(
            {
                "agent": "topdrl",
                "env": {"train": {"start": 0, "count": 3, "days": 2}, "validation": {"start": 86400, "count": 1}},
            },
            "c.yaml",
        )
    with pytest.raises(TrainConfigError, match=r"c\.yaml: model\.width: unknown key; allowed keys here: hidden"):
        parse_topdrl_config({"agent": "topdrl", "model": {"width": 3}}, "c.yaml")


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="no shipped TopDRL policy")
def test_the_shipped_policy_loads_and_schedules_every_cluster_validly(window: str) -> None:
    from experiments.simulate import make_scheduler_by_name

    for cluster in ("small", "small-hetero", CLUSTER_64):
        sched = make_scheduler_by_name(f"topdrl:{SHIPPED}", 0)
        res = build_simulator(cluster, window, seed=0).run(sched)
        assert res.metrics()["jobs_completed"] == len(res.jct) > 100
        assert res.preemptions.sum() == 0


@pytest.mark.slow
def test_brief_training_is_seeded_and_exports_a_policy_that_loads(tmp_path: Path, trace: str, train_command) -> None:
    start = DEV - 10 * 86400.0
    data = {
        "agent": "topdrl",
        "seed": 7,
        "env": {
            "cluster": CLUSTER_64,
            "trace": trace,
            "load": 0.4,
            "train": {"start": start, "count": 2, "days": 0.25, "stride_days": 0.5},
            "validation": {"start": start + 1.5 * 86400, "count": 1, "days": 0.25},
            "report": {"start": DEV, "count": 1, "days": 0.25},
        },
        "model": {"hidden": 8, "pooled": 2, "slots": 4},
        "train": {"iterations": 2, "rollouts": 2, "workers": 1, "eval_every": 1, "minibatch": 256, "epochs": 2},
        "evaluation": {"heuristics": ["closest-gpus"]},
    }
    cfg = parse_topdrl_config(data, "brief.yaml")
    first = train_topdrl(cfg, tmp_path / "a", log=lambda m: None)
    train_command(data, tmp_path / "b", "--no-eval")  # the one command, the same seed: the same policy
    a = torch.jit.load(str(tmp_path / "a" / "policy" / "policy.pt")).state_dict()
    b = torch.jit.load(str(tmp_path / "b" / "policy" / "policy.pt")).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rows = (tmp_path / "a" / "progress.csv").read_text().splitlines()
    assert len(rows) == 4 and (tmp_path / "a" / "policy" / "learning_curve.png").is_file()
    table = {r["scheduler"]: r for r in first["evaluation"]}
    assert set(table) == {"topdrl", "topdrl-untrained", "closest-gpus"}
    assert table["closest-gpus"]["vs_reference"] == 0.0
    sched = load_topdrl_policy(tmp_path / "a" / "policy")
    assert sched.slots == 4


def test_train_refuses_an_agent_it_does_not_know_and_a_bad_topdrl_key(tmp_path: Path, capsys) -> None:
    from experiments.cli import main

    cfg = tmp_path / "dl3.yaml"
    cfg.write_text("agent: dl3\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}, line 1: agent: 'dl3' is not an agent marlsched trains; did you mean 'dl2'? agents: priority," in err
    cfg.write_text("agent: topdrl\ntrain:\n  rollout: 4\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{cfg}, line 3: train.rollout: unknown key; did you mean 'rollouts'? allowed keys here: iterations" in err
    assert not (tmp_path / "o").exists()
