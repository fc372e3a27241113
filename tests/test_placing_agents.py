"""Priority agents that also place: each started job's GPU type from the network's type scores, through the
hierarchical topology encoder. Untrained they are the agents with each job on its fastest type; placements
keep one type per job and follow the scores; no leak; export equals the module; any grid size."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.build import build_simulator
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from cluster_sim.workload import Workload
from marl.deploy.priority_export import load_priority_policy, save_priority_policy
from marl.env.priority_agents import PriorityAgents, qssf_scores
from marl.env.priority_features import JobSetLayout
from marl.env.rounds_agents import RoundsAgents
from marl.env.topology_obs import cand_column
from marl.models.priority_net import PLACING_INPUTS, NetScorer, PlacingPriorityNet, PriorityNet

DEV = HELD_OUT_START
GAVEL = "gavel:{}/gavel/simulation_throughputs.json"


@pytest.fixture(scope="module")
def hetero_window(traces_dir: Path) -> str:
    start = DEV + 2 * DAY
    return window_spec(f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel", start, start + DAY, 0.9)


def _sim(spec, traces_dir: Path, cluster: str = "small-hetero"):
    return build_simulator(cluster, spec, seed=0, restart_cost=30.0, interference="oracle",
                           interference_data=GAVEL.format(traces_dir))  # fmt: skip


def _first_choice(spec: str, traces_dir: Path):
    """((placing agents, simulator), their observation) at the first round of ``spec`` with a choice."""
    sim = _sim(spec, traces_dir)
    agents = PriorityAgents(num_agents=4, placing=True)
    agents.reset(sim)
    obs = None
    while obs is None and sim.advance():
        obs = agents.observe(sim)
    assert obs is not None
    return (agents, sim), obs


class _TypeScores:
    """QSSF's order; each slot's type scores from ``key(log_speed)`` (recording the observations)."""

    def __init__(self, key) -> None:
        self.key, self.seen, self.view, self.until = key, [], None, np.inf

    def __call__(self, arrays):
        if self.view is None or self.view.now < self.until:
            self.seen.append({k: v.copy() for k, v in arrays.items()})
        speed = arrays["cands"][..., cand_column("log_speed")]
        k, n, t = speed.shape
        return np.concatenate([qssf_scores(arrays), self.key(speed).reshape(k, n * t)], axis=1)


def test_untrained_placing_policy_is_the_agents_on_each_jobs_fastest_type(
    tmp_path: Path, hetero_window: str, traces_dir: Path
) -> None:
    torch.manual_seed(0)
    save_priority_policy(PlacingPriorityNet(16), tmp_path / "p", {"agents": {"hysteresis": float(np.log(31.0))}})
    placing = load_priority_policy(tmp_path / "p", num_agents=4)
    assert placing.placing
    ours = _sim(hetero_window, traces_dir).run(placing)
    fastest = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4))
    assert len(ours.jct) > 100
    np.testing.assert_array_equal(ours.jct, fastest.jct)
    slowest = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4, gpu_type="slowest"))
    assert slowest.jct.mean() > 1.1 * fastest.jct.mean()  # the type matters in this window


def test_interference_inputs_need_the_topology_and_none_without_it_is_the_same_agents() -> None:
    """The predictor's estimates are columns of the placing agents' topology: agents without it take
    ``interference_inputs: none`` (the ablation of both parts at once) as no inputs, and refuse a predictor."""
    from marl.env.priority_agents import PriorityAgents

    assert PriorityAgents(None, placing=False, interference_inputs="none").inputs is None
    with pytest.raises(ValueError, match=r"set placing too, or leave interference_inputs out \(null or none\)"):
        PriorityAgents(None, placing=False, interference_inputs="learned:model.json")


def test_type_scores_choose_the_type_and_keep_one_type_per_job(hetero_window: str, traces_dir: Path) -> None:
    sims = {}
    for name, key in (("fast", lambda s: s), ("slow", lambda s: -s)):
        sim = _sim(hetero_window, traces_dir)
        sims[name] = sim.run(PriorityAgents(_TypeScores(key), num_agents=4, placing=True))
        assert sims[name].metrics()["jobs_completed"] == len(sims[name].jct)  # the simulator checks one type
    # the same run with the speeds' order reversed by the scores is the slowest-first heuristic, decision
    # for decision (ties between equal speeds break by type index in both)
    slowest = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4, gpu_type="slowest"))
    fastest = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4))
    np.testing.assert_array_equal(sims["fast"].jct, fastest.jct)
    assert sims["slow"].jct.mean() > 1.1 * sims["fast"].jct.mean()
    assert abs(sims["slow"].jct.mean() - slowest.jct.mean()) < 0.05 * slowest.jct.mean()


def test_running_jobs_move_up_to_a_faster_type_only_past_the_margin(hetero_window: str, traces_dir: Path) -> None:
    base = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4))
    moved = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4, migrate=float(np.log(1.2))))
    assert moved.metrics()["jobs_completed"] == len(moved.jct)  # every move kept one GPU type (checked)
    # moves are restarts without a preemption
    assert (moved.restarts - moved.preemptions).sum() > (base.restarts - base.preemptions).sum() + 10
    never = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4, migrate=50.0))
    np.testing.assert_array_equal(never.jct, base.jct)
    with pytest.raises(ValueError, match="migrate"):
        PriorityAgents(num_agents=4, gpu_type="any", migrate=0.5)


def test_random_type_scores_lose_no_job(hetero_window: str, traces_dir: Path) -> None:
    rng = np.random.default_rng(0)

    def noisy(arrays):
        k, n, t, _ = arrays["cands"].shape
        return np.concatenate([qssf_scores(arrays), rng.normal(0.0, 3.0, size=(k, n * t))], axis=1)

    agents = PriorityAgents(noisy, num_agents=4, placing=True, hysteresis=0.0, migrate=0.0)
    res = _sim(hetero_window, traces_dir).run(agents)
    assert res.metrics()["jobs_completed"] == len(res.jct)  # each start was checked to be on one GPU type
    assert res.preemptions.sum() > 10


def test_placing_observations_never_read_unfinished_jobs_durations(hetero_window: str, traces_dir: Path) -> None:
    res = _sim(hetero_window, traces_dir).run(PriorityAgents(num_agents=4))
    cut = float(np.quantile(res.end, 0.5))
    unfinished = ~(res.end <= cut)
    jobs: Workload = _sim(hetero_window, traces_dir).jobs
    longer = dataclasses.replace(jobs, duration=np.where(unfinished, jobs.duration * 3.0 + 100.0, jobs.duration))
    seen = []
    for workload in (jobs, longer):
        rec = _TypeScores(lambda s: s)
        sim = _sim(workload, traces_dir)
        rec.view, rec.until = sim, cut
        sim.run(PriorityAgents(rec, num_agents=4, placing=True), until=cut)  # what comes after is not compared
        seen.append(rec.seen)
    assert len(seen[0]) > 30 and len(seen[0]) == len(seen[1])
    assert {"gpus", "servers", "racks", "server_type", "cands"} <= set(seen[0][0])
    for a, b in zip(*seen, strict=True):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_export_equals_the_network_and_one_network_fits_any_grid(
    tmp_path: Path, hetero_window: str, traces_dir: Path
) -> None:
    torch.manual_seed(1)
    net = PlacingPriorityNet(16)
    for head in (net.score, net.place):  # trained-looking heads: non-zero residuals
        torch.nn.init.normal_(head[-1].weight, std=0.5)
    save_priority_policy(net, tmp_path / "p", {})
    scripted = torch.jit.load(str(tmp_path / "p" / "policy.pt"))
    _, obs = _first_choice(hetero_window, traces_dir)
    x = [torch.as_tensor(obs.arrays[k]) for k in PLACING_INPUTS]
    for a, b in zip(scripted(*x), net(*x), strict=True):
        torch.testing.assert_close(a, b)
    # the folder scores in a process without ray or torch-geometric (TorchScript only)
    np.savez(tmp_path / "obs.npz", **obs.arrays)
    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        from marl.deploy.priority_export import load_priority_policy
        agents = load_priority_policy({str(tmp_path / "p")!r})
        obs = dict(np.load({str(tmp_path / "obs.npz")!r}))
        print("SHAPE", agents.scorer(obs).shape)
        print("IMPORTED", sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "torch_geometric")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "IMPORTED []" in out.stdout and f"SHAPE {(4, obs.arrays['jobs'].shape[1] * 4)}" in out.stdout
    # another cluster's grid (dc-1k: 16-server racks, one type) through the same file
    big = build_simulator("dc-1k", "synthetic:200,load=0.9,gpu_scale=8", seed=0)
    agents = PriorityAgents(num_agents=8, placing=True)
    agents.reset(big)
    lay = agents.layout
    assert (lay.S, lay.T) == (16, 1) and lay.R != 4
    res = build_simulator("dc-1k", "synthetic:200,load=0.9,gpu_scale=8", seed=0).run(
        load_priority_policy(tmp_path / "p", num_agents=8)
    )
    assert res.metrics()["jobs_completed"] == 200


@pytest.mark.parametrize("interference", [False, True])
def test_skipping_padded_slots_scores_as_the_dense_network_and_trains(interference: bool) -> None:
    # The rollouts' and the learner's pass (skip_padding) against forward, the pass the exported files hold:
    # the same scores, type scores and context where slots and types are padded, and gradients reach the heads.
    torch.manual_seed(4)
    for net in (PriorityNet(16), PlacingPriorityNet(16, interference)):
        for head in (net.score, getattr(net, "place", net.score)):
            torch.nn.init.normal_(head[-1].weight, std=0.5)
        shapes = JobSetLayout(N=12, K=3, R=2, S=2, G=4, T=3, interference=interference).shapes()
        keys = PLACING_INPUTS if isinstance(net, PlacingPriorityNet) else ("jobs", "parts")
        x = {k: torch.rand(4, *shapes[k]) for k in keys}
        x["jobs"][..., 0] = (torch.rand(4, 12) < 0.3).float()
        x["jobs"][1, :, 0] = 0.0  # an agent with no job at all
        if "cands" in x:
            x["cands"][..., 0] = (torch.rand(4, 12, 3) < 0.5).float() * x["jobs"][..., :1]
        if isinstance(net, PlacingPriorityNet):
            dense, sparse = net.encode_all(*x.values()), net.encode_all(*x.values(), skip_padding=True)
        else:
            dense, sparse = net.encode(*x.values()), net.encode(*x.values(), skip_padding=True)
        for a, b in zip(dense, sparse, strict=True):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
        sum(t.sum() for t in sparse).backward()
        assert net.score[-1].weight.grad.abs().sum() > 0 and net.job[0].weight.grad.abs().sum() > 0


def test_order_head_starts_from_a_priority_network_exactly() -> None:
    torch.manual_seed(2)
    old = PriorityNet(16)
    torch.nn.init.normal_(old.score[-1].weight, std=0.5)
    net = PlacingPriorityNet(16)
    net.load_order_head(old.state_dict())
    shapes = JobSetLayout(N=9, K=3, R=2, S=2, G=4, T=3).shapes()
    x = {k: torch.rand(2, *shapes[k]) for k in PLACING_INPUTS}
    x["jobs"][..., 0] = 1.0
    scores, types, _ = net(*(x[k] for k in PLACING_INPUTS))
    torch.testing.assert_close(scores, old(x["jobs"], x["parts"])[0])
    prior = x["cands"][..., cand_column("log_speed")] * x["cands"][..., 0]
    torch.testing.assert_close(types, prior)  # the type head starts at its prior
    with pytest.raises(ValueError, match="hidden"):
        PlacingPriorityNet(8).load_order_head(old.state_dict())


def test_interference_inputs_are_the_predictors_estimates_and_leave_the_untrained_order_alone(
    tmp_path: Path, hetero_window: str, traces_dir: Path, small_predictor: Path
) -> None:
    from marl.env.interference_obs import PREDICTOR_FILE

    window = hetero_window.replace("load=0.9", "load=0.9,max_jobs=250")
    spec = f"learned:{small_predictor}"
    torch.manual_seed(0)
    plain = PlacingPriorityNet(16)
    torch.nn.init.normal_(plain.place[-1].weight, std=0.5)  # type scores that differ from the speeds' order
    net = PlacingPriorityNet(16, interference=True)
    net.load_order_head(plain.state_dict())  # zero weights on the two new columns: the same scores

    seen: list[tuple[np.ndarray, np.ndarray]] = []

    class Recording(NetScorer):
        def __call__(self, obs):
            if len(seen) < 400:
                view = agents_in.sim
                gpus = obs["gpus"]
                holder = np.asarray(view.gpu_job)[np.where(agents_in.grid.gpu >= 0, agents_in.grid.gpu, 0)]
                held = (agents_in.grid.gpu >= 0) & (holder >= 0)
                seen.append((gpus[..., -1][held], np.asarray(view.job_factor)[holder[held]], obs["cands"]))
            return super().__call__(obs)

    agents_in = PriorityAgents(Recording(net), num_agents=4, placing=True, migrate=float(np.log(1.2)),
                               interference_inputs=spec)  # fmt: skip
    agents_in.sim = sim = _sim(window, traces_dir)
    with_inputs = sim.run(agents_in)
    without = _sim(window, traces_dir).run(
        PriorityAgents(NetScorer(plain), num_agents=4, placing=True, migrate=float(np.log(1.2)))
    )
    np.testing.assert_array_equal(with_inputs.jct, without.jct)  # the new columns enter only learned weights
    # the holder's predicted factor: on servers the predictor composes the ground truth's contention term, so
    # without GPU sharing it is what the simulator applies
    predicted = np.concatenate([p for p, _, _ in seen])
    truth = np.concatenate([t for _, t, _ in seen])
    np.testing.assert_allclose(predicted, truth, rtol=1e-5)
    assert predicted.min() < 0.95 and predicted.max() == 1.0
    cands = np.concatenate([c[..., -1][c[..., 0] > 0] for _, _, c in seen])
    assert 0.0 < cands.min() < 0.95 and cands.max() == 1.0  # some types offer a busy server, some a quiet one
    # exported with its predictor: the folder runs alone and reproduces the schedule
    meta = {"agents": {"hysteresis": float(np.log(31.0)), "num_agents": 4, "migrate": float(np.log(1.2)),
                       "interference_inputs": spec}}  # fmt: skip
    folder = save_priority_policy(net, tmp_path / "p", meta)
    saved = json.loads((folder / "metadata.json").read_text())
    assert saved["agents"]["interference_inputs"] == f"learned:{PREDICTOR_FILE}"
    assert saved["gpu_features"][-1] == "holder_factor" and saved["cand_features"][-1] == "factor"
    assert (folder / PREDICTOR_FILE).read_bytes() == small_predictor.read_bytes()
    np.testing.assert_array_equal(_sim(window, traces_dir).run(load_priority_policy(folder)).jct, without.jct)
    with pytest.raises(ValueError, match="does not match the network"):
        save_priority_policy(plain, tmp_path / "q", meta)
    with pytest.raises(ValueError, match="MODE"):
        PriorityAgents(num_agents=4, placing=True, interference_inputs="learnd:x.json")
    with pytest.raises(FileNotFoundError, match="interference train"):
        PriorityAgents(num_agents=4, placing=True, interference_inputs=f"learned:{tmp_path / 'none.json'}")
    with pytest.raises(ValueError, match="placing"):
        PriorityAgents(num_agents=4, interference_inputs=spec)


def test_scorer_output_and_bad_widths(hetero_window: str, traces_dir: Path) -> None:
    (agents, sim), obs = _first_choice(hetero_window, traces_dir)
    out = NetScorer(PlacingPriorityNet(16))(obs.arrays)
    lay = agents.layout
    assert out.shape == (4, lay.N * (1 + lay.T))
    with pytest.raises(ValueError, match="scores"):
        agents.apply(sim, np.zeros((4, lay.N + 1)))


@pytest.mark.slow
def test_brief_rllib_training_of_placing_agents_on_the_rounds_exports_a_placing_policy(
    ray_local, tmp_path: Path, traces_dir: Path, hetero_window: str, small_predictor: Path
) -> None:
    import yaml

    from marl.training.priority_train import train_priority

    cfg = {
        "env": {
            "cluster": "small-hetero",
            "trace": f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel",
            "window_days": 0.25,
            "load": 0.9,
            "train_start": 2_592_000,
            "train_end": 3_000_000,
            "placing": True,
            "interference": "none",
            "interference_data": None,
            "interference_inputs": f"learned:{small_predictor}",  # the agents consult a predictor
            "decision": "gavel-las",  # the default agent on mixed GPUs: they lean gavel-las's rounds
        },
        "model": {"hidden": 16},
        "ppo": {"iterations": 1, "train_batch_size": 50, "minibatch_size": 25, "num_epochs": 1,
                "num_env_runners": 0},  # a step is a round with two LPs; sampled in the driver
    }  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = train_priority(path, tmp_path / "run", log=lambda s: None)
    assert out["iterations"] == 1
    meta = json.loads((tmp_path / "run" / "policy" / "metadata.json").read_text())
    assert meta["placing"] and meta["export_max_abs_diff"] < 1e-5 and "type_log_std" in meta["trained"]
    assert meta["program_max_abs_diff"] < 1e-5  # the torch.export program too
    assert meta["agents"]["interference_inputs"] == "learned:interference.json"
    assert (tmp_path / "run" / "policy" / "interference.json").is_file()
    assert meta["agents"]["decision"] == "gavel-las"
    sched = load_priority_policy(tmp_path / "run" / "policy", num_agents=4)
    assert sched.inputs is not None and isinstance(sched, RoundsAgents)
    res = _sim(hetero_window.replace("load=0.9", "load=0.7,max_jobs=150"), traces_dir).run(sched)
    assert res.metrics()["jobs_completed"] == len(res.jct)


@pytest.mark.slow
def test_placing_policy_on_ray_actors_matches_in_process(
    ray_local, tmp_path: Path, hetero_window: str, traces_dir: Path
) -> None:
    from marl.deploy.actors import deploy_policy

    torch.manual_seed(3)
    net = PlacingPriorityNet(16)
    torch.nn.init.normal_(net.place[-1].weight, std=0.5)  # type scores that differ from the speeds' order
    meta = {"agents": {"hysteresis": float(np.log(31.0)), "num_agents": 4, "migrate": float(np.log(1.2))}}
    folder = save_priority_policy(net, tmp_path / "p", meta)
    window = hetero_window.replace("load=0.9", "load=0.7,max_jobs=150")  # the day's first 150 jobs
    ref = _sim(window, traces_dir).run(load_priority_policy(folder))
    sched, policy = deploy_policy(folder, num_agents=4, num_actors=2, num_cpus=0.25)
    try:
        res = _sim(window, traces_dir).run(sched)
        np.testing.assert_array_equal(res.jct, ref.jct)
        assert sum(s["decisions"] for s in policy.info()) == 4 * policy.calls > 0
    finally:
        policy.shutdown()
    fastest = _sim(window, traces_dir).run(PriorityAgents(num_agents=4, migrate=float(np.log(1.2))))
    assert not np.array_equal(ref.jct, fastest.jct)  # the type head changed where jobs ran


@pytest.mark.slow
def test_evolution_strategies_on_the_type_head_export_a_placing_policy(
    tmp_path: Path, traces_dir: Path, train_command
) -> None:
    import json
    from dataclasses import asdict

    from marl.training.placing_es import PlacingESConfig, train

    nov1 = HELD_OUT_START
    cfg = PlacingESConfig(
        trace=f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel",
        interference_data=GAVEL.format(traces_dir),
        load=0.15,
        days=0.25,
        train_first=nov1 - 12 * 86400.0,
        train_last=nov1 - 10 * 86400.0,
        validation_first=nov1 - 2 * 86400.0,
        validation_windows=1,
        validation_days=0.25,
        hidden=8,
        pairs=1,
        iterations=1,
        eval_every=1,
        workers=1,
    )
    meta = train(cfg, tmp_path / "es", log=lambda s: None)
    assert len(meta["progress"]) == 2 and meta["progress"][0]["validation_vs_warm"] == 0.0
    # the same seed gives the same candidates' figures and the same policy, bit for bit
    again = train_command({"agent": "priority", "algo": "es", **asdict(cfg)}, tmp_path / "again")  # the command
    assert [r["best_jct"] for r in again["progress"]] == [r["best_jct"] for r in meta["progress"]]
    first, second = (torch.jit.load(str(tmp_path / d / "policy.pt")).state_dict() for d in ("es", "again/policy"))
    assert all(torch.equal(first[k], second[k]) for k in first)
    saved = json.loads((tmp_path / "es" / "metadata.json").read_text())
    assert saved["placing"] and saved["agents"]["migrate"] == pytest.approx(0.1823)
    last = torch.jit.load(str(tmp_path / "es" / "policy.pt")).state_dict()["place.4.weight"]
    assert bool(last.abs().sum() > 0) == (meta["selected_iteration"] > 0)  # the selected θ is what ships
    assert (tmp_path / "es" / "learning_curve.png").stat().st_size > 1000
    agents = load_priority_policy(tmp_path / "es")
    assert agents.placing and agents.num_agents == 4 and agents.migrate == pytest.approx(0.1823)
