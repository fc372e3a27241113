"""The learned (job, GPU type) scorer for rigid jobs in rounds: no leak, valid schedules, imitation that
learns the teacher's order, export and seeded reproducibility."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.build import build_simulator
from cluster_sim.policies.rigid_rounds import ScoredRounds
from marl.rounds_agent import NetRoundsScorer, PairScorer, pair_features
from marl.rounds_imitation import ImitationConfig, load_rounds_policy, round_loss, train

TINY = dict(
    first_start=4_973_359.0 - 86_400.0, days=0.25, load=0.2, windows=1, iterations=1, epochs=2, every=1, hidden=16
)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory, traces_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("rounds") / "policy"
    trace = f"philly:{traces_dir / 'pollux-osdi21' / 'traces' / 'philly.csv'},model_rule=gavel"
    train(ImitationConfig(trace=trace, teacher="oracle-area", **TINY), out)
    return out


def test_features_never_read_a_duration() -> None:
    """The same jobs with two early, long jobs' true durations swapped: every round's features are the
    same until the first job finishes."""
    base = build_simulator("small-hetero", "synthetic:150,load=1.2,model_rule=gavel", seed=4).jobs
    a, b = np.argsort(base.duration[:10])[-2:]
    duration = base.duration.copy()
    duration[[a, b]] = duration[[b, a]]
    runs = []
    for w in (base, replace(base, duration=duration)):
        record: list = []
        torch.manual_seed(0)
        net = PairScorer(hidden=8)
        res = build_simulator("small-hetero", w).run(ScoredRounds(NetRoundsScorer(net, record)))
        runs.append((res, record))
    first_end = min(runs[0][0].end.min(), runs[1][0].end.min())
    pairs = [(p, q) for p, q in zip(runs[0][1], runs[1][1], strict=False) if p[0] < first_end and q[0] < first_end]
    assert len(pairs) >= 2
    for (ta, xa, ma), (tb, xb, mb) in pairs:
        assert ta == tb and np.array_equal(xa, xb) and np.array_equal(ma, mb)


def test_round_loss_prefers_the_teachers_order() -> None:
    """Two jobs, two types: the teacher runs job 0 on type 1 and leaves job 1 waiting. Scores in that order
    cost less than the reverse, and the gradient pushes toward it."""
    mask = torch.ones(2, 2, dtype=torch.bool)
    types = torch.tensor([1, -1])
    good = torch.tensor([[0.0, 2.0], [0.0, -1.0]])
    bad = torch.tensor([[2.0, 0.0], [0.0, 3.0]])
    assert round_loss(good, mask, types) < round_loss(bad, mask, types)
    s = bad.clone().requires_grad_(True)
    round_loss(s, mask, types).backward()
    assert s.grad[0, 1] < 0 and s.grad[1, 1] > 0  # raise the teacher's pair, lower the waiting job's


def test_imitation_writes_a_policy_that_schedules_validly(tiny_policy: Path) -> None:
    """The trained folder loads without RLlib as ``marl:DIR``; every job it starts runs on one GPU type
    with the GPUs it asked for, and every job finishes; the TorchScript export equals the module."""
    import json

    from experiments.simulate import make_scheduler_by_name

    meta = json.loads((tiny_policy / "metadata.json").read_text())
    assert meta["agent"] == "rounds" and meta["export_max_abs_diff"] < 1e-5
    assert meta["teacher"] == "rounds-oracle-area"
    assert (tiny_policy / "progress.csv").read_text().count("\n") == TINY["iterations"] + 2
    assert (tiny_policy / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    policy = make_scheduler_by_name(f"marl:{tiny_policy}", 0)
    sim = build_simulator("small-hetero", "synthetic:120,load=1.0,model_rule=gavel", seed=1)
    res = sim.run(policy)
    assert res.metrics()["jobs_completed"] == 120
    used = res.attained_by_type > 0
    assert (used.sum(axis=1) >= 1).all()


def test_bad_imitation_config_names_the_field() -> None:
    with pytest.raises(
        ValueError, match="teacher: 'las' is not a privileged round scorer; use one of oracle, oracle-area"
    ):
        ImitationConfig(teacher="las")
    with pytest.raises(ValueError, match=r"drop: unknown feature\(s\) speed;"):
        ImitationConfig(drop="rel_speed,speed")


def test_same_seed_same_policy(tmp_path: Path, traces_dir: Path) -> None:
    """Training twice with the same seed gives the same scores on the same state (behaviour cloning on
    the teacher's rounds: the part where seeding matters, the data order and the initial weights)."""
    trace = f"philly:{traces_dir / 'pollux-osdi21' / 'traces' / 'philly.csv'},model_rule=gavel"
    cfg = ImitationConfig(trace=trace, **{**TINY, "iterations": 0})
    for k in ("a", "b", "untrained"):
        train(cfg if k != "untrained" else replace(cfg, iterations=-1), tmp_path / k)
    a, b, untrained = (load_rounds_policy(tmp_path / k) for k in ("a", "b", "untrained"))
    sim = build_simulator("small-hetero", "synthetic:60,load=1.0,model_rule=gavel", seed=2)
    sim.reset()
    jobs = np.arange(10)
    rates = np.random.default_rng(0).uniform(0.2, 1.0, size=(10, 3))
    x = torch.from_numpy(pair_features(sim, jobs, rates, np.full(10, -1)))
    m = torch.ones(10, 3, dtype=torch.bool)
    assert torch.equal(a.scorer.net(x, m), b.scorer.net(x, m))
    assert not torch.equal(a.scorer.net(x, m), untrained.scorer.net(x, m)), "training changed nothing"


def test_shipped_small_hetero_policy_loads_and_schedules() -> None:
    """The shipped folder loads as ``marl:DIR`` with this version's features and finishes every job of a
    small workload on small-hetero and on Sia's cluster (another GPU mix)."""
    from experiments.simulate import make_scheduler_by_name

    folder = Path(__file__).resolve().parents[1] / "experiments" / "policies" / "small-hetero"
    for cluster in ("small-hetero", "sia-hetero"):
        sim = build_simulator(cluster, "synthetic:80,load=1.0,model_rule=gavel", seed=5)
        res = sim.run(make_scheduler_by_name(f"marl:{folder}", 0))
        assert res.metrics()["jobs_completed"] == 80, cluster
