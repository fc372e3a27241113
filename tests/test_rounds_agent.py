"""The learned (job, GPU type) scorer for rigid jobs in rounds: no leak, valid schedules, imitation that
learns the teacher's order, export and seeded reproducibility."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.build import build_simulator
from cluster_sim.policies.rigid_rounds import ScoredRounds
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from marl.deploy.rounds_policy import load_rounds_policy
from marl.models.rounds_scorer import FEATURES, NetRoundsScorer, PairScorer, pair_features
from marl.training.rounds_es import RoundsESConfig
from marl.training.rounds_imitation import ImitationConfig, round_loss, train
from tests.test_heterogeneous import run_to_first_end

TINY = dict(
    first_start=HELD_OUT_START - 86_400.0, days=0.25, load=0.2, windows=1, iterations=1, epochs=2, every=1, hidden=16
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
        sim, policy = build_simulator("small-hetero", w), ScoredRounds(NetRoundsScorer(net, record))
        runs.append((run_to_first_end(sim, policy), record))  # the rounds until the first job finishes
    first_end = min(runs[0][0], runs[1][0])
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
    with the GPUs it asked for, and every job finishes; the TorchScript export and the ``torch.export``
    program equal the module, and the program alone schedules as the TorchScript does."""
    import json
    import shutil

    from experiments.simulate import make_scheduler_by_name

    meta = json.loads((tiny_policy / "metadata.json").read_text())
    assert meta["agent"] == "rounds" and meta["export_max_abs_diff"] < 1e-5 and meta["program_max_abs_diff"] < 1e-5
    assert meta["teacher"] == "rounds-oracle-area"
    assert (tiny_policy / "progress.csv").read_text().count("\n") == TINY["iterations"] + 2
    assert (tiny_policy / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    policy = make_scheduler_by_name(f"marl:{tiny_policy}", 0)
    sim = build_simulator("small-hetero", "synthetic:40,load=1.0,model_rule=gavel", seed=1)  # ~1000 rounds
    res = sim.run(policy)
    assert res.metrics()["jobs_completed"] == 40
    used = res.attained_by_type > 0
    assert (used.sum(axis=1) >= 1).all()
    program_only = tiny_policy.parent / "program-only"
    shutil.copytree(tiny_policy, program_only)
    (program_only / "policy.pt").unlink()
    sim = build_simulator("small-hetero", "synthetic:40,load=1.0,model_rule=gavel", seed=1)
    assert np.array_equal(sim.run(make_scheduler_by_name(f"marl:{program_only}", 0)).end, res.end)


def test_bad_imitation_config_names_the_field() -> None:
    with pytest.raises(
        ValueError, match="teacher: 'las' is not a privileged round scorer; use one of oracle, oracle-area"
    ):
        ImitationConfig(teacher="las")
    with pytest.raises(ValueError, match=r"drop: unknown feature\(s\) speed;"):
        ImitationConfig(drop="rel_speed,speed")


def test_same_seed_same_policy(tmp_path: Path, traces_dir: Path, train_command) -> None:
    """Training twice with the same seed gives the same scores on the same state (behaviour cloning on
    the teacher's rounds: the part where seeding matters, the data order and the initial weights), also
    when the second run plays its two windows in two processes."""
    trace = f"philly:{traces_dir / 'pollux-osdi21' / 'traces' / 'philly.csv'},model_rule=gavel"
    cfg = ImitationConfig(trace=trace, **{**TINY, "iterations": 0, "windows": 2, "days": 0.125, "load": 0.1})
    runs = {"a": cfg, "untrained": replace(cfg, iterations=-1)}
    metas = {k: train(c, tmp_path / k) for k, c in runs.items()}
    # b plays in two processes and through the one command (agent: rounds, algo: dagger), into b/policy
    metas["b"] = train_command({"agent": "rounds", "algo": "dagger", **asdict(replace(cfg, workers=2))}, tmp_path / "b")
    same = [[(r["avg_jct"], r["rounds"], r["loss"]) for r in metas[k]["progress"]] for k in ("a", "b")]
    assert same[0] == same[1] and same[0][0][1] > 0
    a, untrained = (load_rounds_policy(tmp_path / k) for k in ("a", "untrained"))
    b = load_rounds_policy(tmp_path / "b" / "policy")
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


def queued_window(traces_dir: Path) -> str:
    """68 Philly jobs of 2017-10-31 (6 hours, load 0.9 of Sia's 64 GPUs): they queue, so the order counts."""
    start = HELD_OUT_START - DAY
    return window_spec(
        f"philly:{traces_dir / 'pollux-osdi21' / 'traces' / 'philly.csv'},model_rule=gavel", start, start + 21_600, 0.9
    )


def test_untrained_network_on_the_gavel_las_prior_is_that_heuristic(traces_dir: Path) -> None:
    """With the ``gavel-las`` prior the untrained network's schedule is ``gavel-las``'s, bit for bit, on jobs
    that queue, where ``gavel-las`` differs from Gavel's own order; moving one learned weight changes it."""
    from cluster_sim.policies import get_policy

    w = queued_window(traces_dir)
    runs = {n: build_simulator("sia-hetero", w, seed=1).run(get_policy(n)) for n in ("gavel-las", "rounds-gavel")}
    torch.manual_seed(0)
    net = PairScorer(hidden=8, prior="gavel-las")
    mine = build_simulator("sia-hetero", w, seed=1).run(ScoredRounds(NetRoundsScorer(net), stay=0.0))
    assert np.array_equal(mine.end, runs["gavel-las"].end)
    assert not np.array_equal(runs["rounds-gavel"].end, runs["gavel-las"].end)
    with torch.no_grad():
        net.linear.weight[0, list(FEATURES).index("attained_h")] = 3.0  # favour the jobs that ran most
    moved = build_simulator("sia-hetero", w, seed=1).run(ScoredRounds(NetRoundsScorer(net), stay=0.0))
    assert not np.array_equal(moved.end, mine.end)
    with pytest.raises(ValueError, match="prior: unknown 'las'"):
        PairScorer(prior="las")


def es_config(traces_dir: Path, **kw) -> RoundsESConfig:
    trace = f"philly:{traces_dir / 'pollux-osdi21' / 'traces' / 'philly.csv'},model_rule=gavel"
    gavel = f"gavel:{traces_dir / 'gavel' / 'simulation_throughputs.json'}"
    nov1 = HELD_OUT_START
    base = dict(cluster="sia-hetero", trace=trace, interference_data=gavel, days=0.25, train_first=nov1 - 1.5 * 86_400,
                train_last=nov1 - 1.25 * 86_400, validation_first=nov1 - 86_400, validation_windows=1,
                validation_days=0.25, hidden=8, pairs=1, iterations=1, eval_every=1, workers=1)  # fmt: skip
    return RoundsESConfig(**{**base, **kw})


def test_es_writes_a_policy_no_worse_than_its_warm_start_and_is_seeded(
    tmp_path: Path, traces_dir: Path, train_command
) -> None:
    """An ES iteration on 6-hour windows from the ``gavel-las`` warm start: the folder loads as ``marl:DIR``
    and schedules validly, the selected network is no worse than the warm start on validation (the warm
    start itself can be selected), the progress has a row per iteration, and the same seed gives the same
    weights."""
    import json

    from experiments.simulate import make_scheduler_by_name
    from marl.training.rounds_es import train as es_train

    # run b through the one command (agent: rounds, algo: es): the same loop, so the same policy, in b/policy
    metas = [es_train(es_config(traces_dir), tmp_path / "a", log=lambda *_: None), train_command(
        {"agent": "rounds", "algo": "es", **asdict(es_config(traces_dir))}, tmp_path / "b")]  # fmt: skip
    meta = json.loads((tmp_path / "a" / "metadata.json").read_text())
    assert meta["agent"] == "rounds" and meta["export_max_abs_diff"] < 1e-5
    assert meta["validation_vs_warm_start"] <= 0.0 and meta["selected_iteration"] in (0, 1)
    assert [r["iteration"] for r in metas[0]["progress"]] == [0, 1]
    assert (tmp_path / "a" / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    a, b = load_rounds_policy(tmp_path / "a"), load_rounds_policy(tmp_path / "b" / "policy")
    assert all(
        torch.equal(p, q)
        for p, q in zip(a.scorer.net.state_dict().values(), b.scorer.net.state_dict().values(), strict=True)
    )
    res = build_simulator("sia-hetero", queued_window(traces_dir), seed=1).run(
        make_scheduler_by_name(f"marl:{tmp_path / 'a'}", 0)
    )
    assert res.metrics()["jobs_completed"] == len(res.end)
    assert ((res.attained_by_type > 0).sum(axis=1) >= 1).all()


def test_bad_es_config_names_the_field(traces_dir: Path) -> None:
    with pytest.raises(ValueError, match="params: 'all'; choose one of linear, linear\\+last"):
        es_config(traces_dir, params="all")
    with pytest.raises(ValueError, match="train_last: training windows must end before validation_first"):
        es_config(traces_dir, train_last=HELD_OUT_START - 86_400)
    with pytest.raises(ValueError, match=r"validation_first: the span .* reaches into the report period"):
        es_config(traces_dir, validation_windows=9)
    with pytest.raises(ValueError, match="sigma: must be > 0"):
        es_config(traces_dir, sigma=0.0)


def test_antithetic_es_climbs_a_quadratic_and_checks_its_fitnesses() -> None:
    """Maximising -|θ - 1|² from 0: 60 steps of 4 antithetic pairs bring θ close to 1 in every coordinate;
    telling the wrong number of fitnesses is an error."""
    from marl.training.es import AntitheticES, centred_ranks

    es = AntitheticES(np.zeros(3), sigma=0.1, lr=0.05, pairs=4, rng=np.random.default_rng(0))
    for _ in range(60):
        cands = es.ask()
        es.tell(np.array([-np.sum((c - 1.0) ** 2) for c in cands]))
    assert np.all(np.abs(es.theta - 1.0) < 0.3), es.theta
    assert centred_ranks(np.array([3.0, 1.0, 2.0])).tolist() == [0.5, -0.5, 0.0]
    es.ask()
    with pytest.raises(ValueError, match="tell needs the 8 fitnesses"):
        es.tell(np.zeros(3))


def test_evolve_ships_the_best_evaluated_theta_and_stops_at_the_time_budget() -> None:
    """The ES loop on a quadratic (JCT exp|θ - 1|²): θ plays the validation task every ``eval_every``
    iterations and at the start, the best of those ships; with the time spent, it stops after one iteration,
    evaluated."""
    import time

    from marl.training.es import evolve

    def play(thetas: list[np.ndarray], tasks: list[np.ndarray]) -> np.ndarray:
        return np.array([[np.exp(np.sum((t - task) ** 2)) for task in tasks] for t in thetas])

    def run(**kw) -> tuple[dict, list, list[str]]:
        steps, lines = [], []
        best = evolve(np.zeros(3), play, lambda rng: (np.ones(3), {"task": "one"}), [np.ones(3)], sigma=0.1, lr=0.05,
                      pairs=4, rng=np.random.default_rng(0), progress=steps.append, log=lines.append, **kw)  # fmt: skip
        return best, steps, lines

    best, steps, lines = run(iterations=40, eval_every=10, minutes=None, started=time.perf_counter())
    gains = {s.iteration: s.gain for s in steps if s.gain is not None}
    assert [s.iteration for s in steps] == list(range(41)) and sorted(gains) == [0, 10, 20, 30, 40] and not lines
    assert best["iteration"] == min(gains, key=gains.get) > 0 and best["validation"] == min(gains.values()) < 0.0
    assert steps[1].about == {"task": "one"} and steps[1].jct.shape == (8,)
    _, steps, lines = run(iterations=40, eval_every=10, minutes=0.0, started=time.perf_counter() - 1.0)
    assert [s.iteration for s in steps] == [0, 1] and steps[1].gain is not None
    assert lines == ["time budget of 0.0 min reached after iteration 1"]


def test_lookahead_teacher_labels_the_students_states(tmp_path: Path) -> None:
    """With the look-ahead teacher (``lookahead-oracle``: gavel-las whose settings are played ahead on clones),
    imitation records labelled rounds from the teacher's run and the student's own, on a cluster small enough
    that jobs queue."""
    import json

    import yaml

    cluster = tmp_path / "tiny-hetero.yaml"
    mix = [
        {"gpu_type": t, "fraction": 1 / 3, "server": "nvswitch-8" if t == "V100" else "pcie-8"}
        for t in ("V100", "P100", "K80")
    ]
    cluster.write_text(yaml.safe_dump({"name": "tiny-hetero", "pods": 1, "racks_per_pod": 3, "servers_per_rack": 1,
                                       "mix": mix}))  # fmt: skip
    cfg = ImitationConfig(
        trace="synthetic:60,model_rule=gavel,max_gpus=8", cluster=str(cluster), teacher="lookahead",
        prior="gavel-las", stay=0.0, lookahead_every=3, horizon=3600.0,
        **{**TINY, "first_start": 0.4 * DAY, "days": 0.4, "load": 1.2, "windows": 1},  # ~270 rounds queue here
    )  # fmt: skip
    meta = train(cfg, tmp_path / "w1")
    assert meta["teacher"] == "lookahead-oracle"
    rows = meta["progress"]
    assert [r["acted"] for r in rows] == ["teacher", "student"] and rows[1]["rounds"] > rows[0]["rounds"] > 0
    assert json.loads((tmp_path / "w1" / "metadata.json").read_text())["export_max_abs_diff"] < 1e-5
