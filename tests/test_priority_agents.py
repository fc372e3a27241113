"""The preemptive priority agents: QSSF as a special case, no leak, preemption without loss, the env's
relative reward, export, the shipped policy, and a brief real RLlib training run."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.build import build_simulator
from cluster_sim.policies import get_policy
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from cluster_sim.workload import Workload
from marl.env.priority_agents import PriorityAgents, qssf_scores
from marl.env.priority_env import PriorityEnvConfig
from marl.models.priority_net import NetScorer, PriorityNet

DEV = HELD_OUT_START
SHIPPED = Path(__file__).resolve().parents[1] / "experiments" / "policies" / "philly-small"


@pytest.fixture(scope="module")
def window(traces_dir: Path) -> str:
    start = DEV + 6 * DAY
    return window_spec(f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv", start, start + DAY, 0.9)


def _run(spec: str, policy, cluster: str = "small"):
    return build_simulator(cluster, spec, seed=0, restart_cost=30.0).run(policy)


def _first_choice(agents: PriorityAgents, window: str):
    """The agents' observation at the first round of ``window`` in which they have a choice."""
    sim = build_simulator("small", window, seed=0)
    agents.reset(sim)
    sim.advance()
    obs = None
    while obs is None and sim.advance():
        obs = agents.observe(sim)
    assert obs is not None
    return obs


def test_one_agent_with_qssf_scores_is_qssf(window: str) -> None:
    qssf = _run(window, get_policy("qssf", seed=0))
    ours = _run(window, PriorityAgents(qssf_scores, num_agents=1))
    assert qssf.metrics()["preemptions"] > 0 or qssf.jct.size > 100
    np.testing.assert_array_equal(ours.jct, qssf.jct)


def test_untrained_network_scores_equal_qssf_scores(window: str) -> None:
    obs = _first_choice(PriorityAgents(num_agents=4), window)
    net_scores = NetScorer(PriorityNet(32))(obs.arrays)
    valid = obs.job_ids >= 0
    np.testing.assert_allclose(net_scores[valid], qssf_scores(obs.arrays)[valid], rtol=1e-5)


def test_policy_flushes_subnormals_only_while_it_scores_and_keeps_its_scores(window: str) -> None:
    """Subnormal activations made the DAgger-trained network ~20x slower; scoring flushes them, which must
    leave every score as it was and the processor's IEEE behaviour restored after (other code relies on it)."""
    from marl.deploy.registry import load_policy
    from marl.models.inference import subnormals_flushed

    tiny = torch.tensor([1e-39])
    with subnormals_flushed():
        if (tiny * 2.0).item() != 0.0:
            pytest.skip("this CPU cannot flush subnormals")
    sched = load_policy(SHIPPED.parent / "philly-small-dagger")
    obs = _first_choice(sched, window)
    flushed = sched.scorer(obs.arrays)
    assert (tiny * 2.0).item() > 0.0  # restored after scoring
    with torch.no_grad():
        kept, _ = sched.scorer.net(torch.as_tensor(obs.arrays["jobs"]), torch.as_tensor(obs.arrays["parts"]))
    np.testing.assert_array_equal(flushed, kept.numpy())


class _Recorder:
    """QSSF's scores, remembering every observation before ``until``."""

    def __init__(self, until: float) -> None:
        self.until, self.seen, self.view = until, [], None

    def __call__(self, arrays):
        if self.view.now < self.until:
            self.seen.append((self.view.now, {k: v.copy() for k, v in arrays.items()}))
        return qssf_scores(arrays)


def test_changing_unfinished_jobs_durations_leaves_every_observation_unchanged(window: str) -> None:
    base = build_simulator("small", window, seed=0)
    res = _run(window, PriorityAgents(qssf_scores, num_agents=4))
    cut = float(np.quantile(res.end, 0.5))
    unfinished = ~(res.end <= cut)
    jobs: Workload = base.jobs
    longer = dataclasses.replace(jobs, duration=np.where(unfinished, jobs.duration * 3.0 + 100.0, jobs.duration))
    seen = []
    for workload in (jobs, longer):
        rec = _Recorder(cut)
        agents = PriorityAgents(rec, num_agents=4)
        sim = build_simulator("small", workload, seed=0, restart_cost=30.0)
        rec.view = sim
        sim.run(agents, until=cut)  # what comes after is not compared
        seen.append(rec.seen)
    assert len(seen[0]) > 50 and len(seen[0]) == len(seen[1])
    for (t0, a), (t1, b) in zip(*seen, strict=True):
        assert t0 == t1
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])


def test_random_scores_preempt_and_lose_no_job(window: str) -> None:
    rng = np.random.default_rng(0)

    def noisy(arrays):
        return qssf_scores(arrays) + rng.normal(0.0, 4.0, size=arrays["jobs"].shape[:2])

    res = _run(window, PriorityAgents(noisy, num_agents=4, hysteresis=0.0))
    m = res.metrics()
    assert m["jobs_completed"] == len(res.jct)
    assert res.preemptions.sum() > 10
    # every job ran its full work: executed wall time covers its duration (restart stalls only add)
    assert np.all(res.executed >= res.workload.duration - 1e-6)


@pytest.mark.slow
def test_env_with_qssf_actions_has_zero_relative_return(window: str) -> None:
    from marl.env.priority_env import PriorityEnv

    env = PriorityEnv({"workload": window, "interference": "none", "interference_data": None})
    obs, _ = env.reset()
    total, steps, done = 0.0, 0, False
    while not done:
        # the critic's inputs: QSSF's own actions keep the system exactly where the reference is
        assert obs["p0"]["critic"][2] == 0.0 and obs["p0"]["critic"][0] == obs["p0"]["critic"][1]
        obs, rew, term, _, info = env.step({a: qssf_scores({"jobs": o["jobs"]}) for a, o in obs.items()})
        total += rew["p0"]
        steps += 1
        done = term["__all__"]
    assert steps > 20
    assert info["p0"]["avg_jct"] == pytest.approx(info["p0"]["reference_jct"])
    assert abs(total) < 1e-6
    # worse scores (reversed) give a negative relative return
    obs, _ = env.reset()
    total, done, deficits = 0.0, False, []
    while not done:
        deficits.append(float(obs["p0"]["critic"][2]))
        obs, rew, term, _, info = env.step({a: -qssf_scores({"jobs": o["jobs"]}) for a, o in obs.items()})
        total += rew["p0"]
        done = term["__all__"]
    assert max(deficits) > 0.0  # the reversed order falls behind the reference, and the critic sees it
    assert info["p0"]["avg_jct"] > info["p0"]["reference_jct"]
    assert total == pytest.approx(-(info["p0"]["avg_jct"] - info["p0"]["reference_jct"]) * info["p0"]["jobs"] / 360000)


def test_env_labels_each_slot_with_its_true_remaining_time_in_the_info_never_in_the_observation(
    window: str,
) -> None:
    """``imitation_label`` (set by training for PPO's imitation term): every agent's info carries ln(true
    remaining s) of the job in each of its slots, 0 on padding; the observations are those without it."""
    from marl.env.priority_env import LABEL, PriorityEnv

    cfg = {"workload": window, "interference": "none", "interference_data": None}
    plain, labelled = PriorityEnv(cfg), PriorityEnv({**cfg, "imitation_label": True})
    (obs_a, info_a), (obs_b, info_b) = plain.reset(), labelled.reset()
    checked = 0
    for _ in range(15):
        assert info_a.keys() <= {"p0", "p1", "p2", "p3"} and not any(LABEL in i for i in info_a.values())
        assert all(np.array_equal(obs_a[a][k], obs_b[a][k]) for a in obs_a for k in obs_a[a])
        ids = labelled._obs.job_ids
        for k, agent in enumerate(labelled.agents):
            label, ok = info_b[agent][LABEL], ids[k] >= 0
            assert label.shape == (labelled.layout.N,) and np.all(label[~ok] == 0.0)
            want = np.log(np.maximum([labelled.sim.remaining_time(int(j)) for j in ids[k][ok]], 1.0))
            assert np.allclose(label[ok], want, rtol=1e-6)
            checked += int(ok.sum())
        actions = {a: qssf_scores({"jobs": o["jobs"]}) for a, o in obs_a.items()}
        obs_a, _, _, _, info_a = plain.step(actions)
        obs_b, _, _, _, info_b = labelled.step(actions)
    assert checked > 50


def test_env_runs_with_the_learned_predictor_which_matters_only_on_shared_gpus(
    window: str, traces_dir: Path, small_predictor: Path
) -> None:
    # `interference: learned` trains against the predictor's file. The predictor learns GPU-sharing pairs; the
    # server and uplink terms are the ground truth's, so without GPU sharing both worlds are the same.
    from marl.env.priority_env import PriorityEnv

    model = small_predictor
    data = f"gavel:{traces_dir}/gavel/simulation_throughputs.json"
    env = PriorityEnv({"workload": window, "interference": "learned", "interference_data": str(model)})
    obs, _ = env.reset()
    obs, *_ = env.step({a: qssf_scores({"jobs": o["jobs"]}) for a, o in obs.items()})
    assert set(obs) == set(env.agents)
    runs = {
        (mode, sharing): build_simulator("small", window, seed=0, interference=mode, gpu_sharing=sharing,
                                         interference_data=str(model) if mode == "learned" else data).run(
            get_policy("pack-blind" if sharing else "qssf", seed=0)).jct
        for mode in ("learned", "oracle") for sharing in (False, True)
    }  # fmt: skip
    np.testing.assert_array_equal(runs["learned", False], runs["oracle", False])
    assert not np.array_equal(runs["learned", True], runs["oracle", True])


def test_critic_inputs_move_the_value_and_never_the_scores() -> None:
    from ray.rllib.core.columns import Columns

    from marl.env.priority_features import JobSetLayout
    from marl.models.priority_module import priority_module_spec

    torch.manual_seed(0)
    module = priority_module_spec(JobSetLayout(N=6, K=2), hidden=8).build()
    jobs = torch.rand(3, 6, 13)
    jobs[..., 0] = 1.0
    batch = {"jobs": jobs, "parts": torch.rand(3, 2, 6), "critic": torch.zeros(3, 3)}
    ahead = {**batch, "critic": torch.tensor([[0.5, 0.3, 2.0]] * 3)}
    with torch.no_grad():
        dist = [module.forward_inference({Columns.OBS: b})[Columns.ACTION_DIST_INPUTS] for b in (batch, ahead)]
        values = [module.compute_values({Columns.OBS: b}) for b in (batch, ahead)]
    assert torch.equal(dist[0], dist[1])
    assert not torch.allclose(values[0], values[1])


@pytest.mark.slow
def test_export_equals_the_network_and_runs_on_another_cluster(tmp_path: Path, window: str) -> None:
    from marl.deploy.priority_export import load_priority_policy, save_priority_policy

    torch.manual_seed(0)
    net = PriorityNet(16)
    for p in net.parameters():
        torch.nn.init.normal_(p, std=0.1)
    save_priority_policy(net, tmp_path / "pol", {"agents": {"hysteresis": 3.0}})
    scripted = torch.jit.load(str(tmp_path / "pol" / "policy.pt"))
    for n, k in ((5, 1), (300, 8)):
        jobs = torch.rand(3, n, net.job[0].in_features)
        jobs[..., 0] = (jobs[..., 0] > 0.3).float()
        parts = torch.rand(3, k, net.part[0].in_features)
        with torch.no_grad():
            np.testing.assert_allclose(scripted(jobs, parts)[0].numpy(), net(jobs, parts)[0].numpy(), atol=1e-5)
    sched = load_priority_policy(tmp_path / "pol")
    sim = build_simulator("dc-1k", build_simulator("small", window).jobs, seed=0)
    res = sim.run(sched)
    assert sched.num_agents == sim.topo.num_racks > 4
    assert res.metrics()["jobs_completed"] == len(res.jct)
    # trained other than one per rack (one agent on small's 4 racks), a folder says so and runs as trained
    from marl.deploy.priority_export import agents_as_trained

    assert agents_as_trained("small", 4) == {} and agents_as_trained("small", 1) == {"num_agents": 1}
    save_priority_policy(net, tmp_path / "one", {"agents": {"hysteresis": 3.0, **agents_as_trained("small", 1)}})
    assert load_priority_policy(tmp_path / "one").agents_wanted == 1 and sched.agents_wanted is None  # per rack


@pytest.mark.skipif(not (SHIPPED / "metadata.json").is_file(), reason="no shipped policy")
def test_shipped_policy_loads_and_schedules(window: str) -> None:
    from experiments.simulate import make_scheduler_by_name

    sched = make_scheduler_by_name(f"marl:{SHIPPED}", 0)
    res = _run(window, sched)
    assert sched.num_agents == 4
    assert res.metrics()["jobs_completed"] == len(res.jct)
    # unchanged on twice the racks: one agent per rack
    medium = SHIPPED.parents[1] / "configs" / "clusters" / "medium-512.yaml"
    sched = make_scheduler_by_name(f"marl:{SHIPPED}", 0)
    half = window.replace("load=0.9", "load=0.5")  # a day of Philly offers at most 0.87 of 512 GPUs
    assert _run(half, sched, cluster=str(medium)).metrics()["jobs_completed"] > 0 and sched.num_agents == 8
    # it says how it was made, and the config it names is the one shipped beside it
    import json

    meta = json.loads((SHIPPED / "metadata.json").read_text())
    assert meta["trained"]["command"].startswith(
        "marlsched train-priority --config experiments/configs/marl_philly.yaml"
    )
    assert (SHIPPED / "config.yaml").read_text() == (SHIPPED.parents[1] / "configs" / "marl_philly.yaml").read_text()
    # its margin was selected on training windows only (before the held-out 2017-11-01), by the training command
    # itself (the config's tune section), and is the one it runs with
    tuned = meta["tuned"]
    assert tuned["command"] == meta["trained"]["command"]
    assert all(float(w.split("end=")[1].split(",")[0]) <= DEV for w in tuned["windows"])
    assert sched.hysteresis == pytest.approx(np.log(tuned["factor"]))


@pytest.mark.slow
def test_brief_rllib_training_is_seeded_and_exports_a_policy_with_its_tuned_margin(
    ray_local, tmp_path: Path, traces_dir: Path
) -> None:
    # Two env runners, episodes ending inside the batch, two PPO updates: the same seed trains the same
    # network bit for bit. The first run also selects its margin (the tune section) on two training windows.
    import json

    import yaml

    from marl.deploy.priority_export import load_priority_policy
    from marl.training.priority_train import train_priority

    cfg = {
        "env": {"trace": f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv", "window_days": 0.1,
                "load": [0.5, 0.6], "train_start": 2_592_000, "train_end": 3_600_000, "interference": "none",
                "interference_data": None},
        "model": {"hidden": 16},
        "ppo": {"iterations": 2, "train_batch_size": 800, "minibatch_size": 400, "num_epochs": 2,
                "num_env_runners": 2},
        "seed": 3,
    }  # fmt: skip
    tune = {"factors": [1.5, 31], "days": 0.25, "stride": 6.0, "load": 0.3, "workers": 1}
    states, outs = [], {}
    for run in ("a", "b"):
        path = tmp_path / f"{run}.yaml"
        path.write_text(yaml.safe_dump({**cfg, "tune": tune} if run == "a" else cfg))
        outs[run] = out = train_priority(path, tmp_path / run, log=lambda s: None)
        assert out["iterations"] == 2 and out["rows"][-1]["episodes"] >= 1
        net = torch.jit.load(str(tmp_path / run / "policy" / "policy.pt")).state_dict()
        meta = json.loads((tmp_path / run / "policy" / "metadata.json").read_text())
        states.append((net, meta["trained"]["log_std"]))
    (a, std_a), (b, std_b) = states
    assert std_a == std_b and all(torch.equal(a[k], b[k]) for k in a)
    assert std_a != -1.0  # and it did learn something: the score noise moved from its initial value
    assert (tmp_path / "a" / "learning_curve.png").stat().st_size > 1000
    # the tune section selected the exported policy's margin on two training windows, and it runs with it
    tuned = outs["a"]["tuned"]
    assert len(tuned["windows"]) == 2 and tuned["factor"] in (1.5, 31.0) and "tuned" not in outs["b"]
    assert tuned["command"] == f"marlsched train-priority --config {tmp_path / 'a.yaml'} --out {tmp_path / 'a'}"
    table = np.array(tuned["avg_jct"])
    assert table.shape == (2, 2)
    assert tuned["factor"] == tuned["factors"][int(np.argmin((table / table.mean(1, keepdims=True)).mean(0)))]
    sched = load_priority_policy(tmp_path / "a" / "policy", num_agents=4)
    assert sched.hysteresis == pytest.approx(np.log(tuned["factor"]))
    meta = json.loads((tmp_path / "a" / "policy" / "metadata.json").read_text())
    assert meta["tuned"]["factor"] == tuned["factor"]
    # the recorded figure is what the loaded policy does on that window
    spec = tuned["windows"][1]
    assert _run(spec, sched).jct.mean() == pytest.approx(table[1, tuned["factors"].index(tuned["factor"])], abs=0.1)


def test_the_select_stage_ships_the_best_iterate_on_select_windows_and_its_start_when_none_beats_it(
    tmp_path: Path, traces_dir: Path
) -> None:
    """After training, ``select:`` runs the warm start, each snapshot and the last iterate on the select period's
    windows and makes the best, paired against the warm start, ``OUT/policy`` with the table in its metadata; a
    tie keeps the earlier iterate, so iterates that are only as good leave the warm start in place."""
    import json

    from marl.deploy.priority_export import save_priority_policy
    from marl.training.priority_select import select_iterate
    from marl.training.priority_tune import run_window

    cluster = tmp_path / "tiny.yaml"  # 32 GPUs in 4 racks: a quarter-day window at load 0.9 queues, and briefly
    cluster.write_text("name: tiny\npods: 1\nracks_per_pod: 4\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: V100\n")
    env = {"cluster": str(cluster), "trace": f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv",
           "interference": "none", "interference_data": None, "restart_cost": 30.0}  # fmt: skip
    out = tmp_path / "run"
    nets = {"warm_start": PriorityNet(8)}
    for k, name in enumerate(("snapshots/iter-001", "policy")):
        torch.manual_seed(k)
        nets[name] = net = PriorityNet(8)
        for param in net.score.parameters():  # scores that differ from QSSF's, so the schedules differ
            torch.nn.init.normal_(param, std=2.0)
    for name, net in nets.items():
        save_priority_policy(net, out / name, {"agents": {"hysteresis": float(np.log(8))}})
    settings = {"days": 0.25, "stride": 6.0, "load": 0.9, "workers": 1}
    logs: list[str] = []
    record = select_iterate(out, env, **settings, command="the command", log=logs.append)
    assert record["candidates"] == ["warm start", "iter-001", "last"] and len(record["windows"]) == 3
    assert all(spec.startswith(env["trace"]) for spec in record["windows"])
    table = np.array(record["avg_jct"])
    ratio = (table / table[:, :1]).mean(axis=0)
    assert record["chosen"] == record["candidates"][int(np.argmin(ratio))] and ratio[0] == 1.0
    assert len({tuple(col) for col in table.T}) == 3  # three different schedules were compared
    chosen = {"warm start": "warm_start", "iter-001": "snapshots/iter-001", "last": "policy"}[record["chosen"]]
    shipped = torch.jit.load(str(out / "policy" / "policy.pt")).state_dict()
    want = nets[chosen].state_dict()
    assert all(torch.equal(shipped[k], want[k]) for k in want)
    meta = json.loads((out / "policy" / "metadata.json").read_text())
    assert meta["selected"]["chosen"] == record["chosen"] and meta["selected"]["command"] == "the command"
    # the recorded figure is what the shipped policy does on that window
    shipped_jct = run_window((str(out / "policy"), env, record["windows"][2], None))
    assert shipped_jct == pytest.approx(table[2, np.argmin(ratio)], abs=0.1)
    # every iterate as good as the warm start: the warm start is shipped
    for name in ("snapshots/iter-001", "policy"):
        save_priority_policy(nets["warm_start"], out / name, {"agents": {"hysteresis": float(np.log(8))}})
    last = json.loads((out / "policy" / "metadata.json").read_text())
    (out / "policy" / "metadata.json").write_text(json.dumps({**last, "trained": {"iterations": 2}}))
    again = select_iterate(out, env, **settings, log=logs.append)
    assert again["chosen"] == "warm start" and again["mean_ratio"] == [1.0, 1.0, 1.0]
    assert logs[-2].startswith(f"  no iterate beat the warm start on the select windows: {out / 'policy'} is a copy")
    assert logs[-1] == f"  the last iterate is kept as {out / 'snapshots' / 'iter-002'}"
    # the iterate the warm start replaced stays at hand, as the snapshot of its iteration
    assert json.loads((out / "snapshots" / "iter-002" / "metadata.json").read_text())["trained"] == {"iterations": 2}


@pytest.mark.slow
def test_training_starts_from_a_policy_folder(ray_local, tmp_path: Path, traces_dir: Path) -> None:
    # PPO fine-tuning of a trained policy (the DAgger stage's): every module copy starts from its weights and
    # the env runs with its margin; with a learning rate of 0 the exported network is the start, bit for bit.
    # The start folder holds only its torch.export program (as under a torch without TorchScript).
    import yaml

    from marl.deploy.priority_export import save_priority_policy
    from marl.training.priority_train import load_config, train_priority

    torch.manual_seed(5)
    start = PriorityNet(16)
    torch.nn.init.normal_(start.score[-1].weight, std=0.3)  # not the QSSF start: a residual that matters
    save_priority_policy(start, tmp_path / "start", {"agents": {"hysteresis": float(np.log(4.0))}})
    (tmp_path / "start" / "policy.pt").unlink()
    cfg = {
        "env": {"trace": f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv", "window_days": 0.1,
                "load": 0.9, "train_start": 2_592_000, "train_end": 3_600_000},
        "model": {"init_policy": str(tmp_path / "start")},
        "ppo": {"iterations": 1, "train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1,
                "num_env_runners": 1, "lr": 0.0},
    }  # fmt: skip
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    loaded = load_config(path)
    assert loaded["model"]["hidden"] == 16 and loaded["env"]["hysteresis"] == pytest.approx(np.log(4.0))
    train_priority(path, tmp_path / "run", log=lambda s: None)
    got = torch.jit.load(str(tmp_path / "run" / "policy" / "policy.pt")).state_dict()
    want = start.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)
    # a size that disagrees with the folder, or a folder that is no policy, is named with the fix
    cfg["model"]["hidden"] = 32
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=r"cfg\.yaml: model\.hidden 32 differs from init_policy's 16"):
        load_config(path)
    cfg["model"] = {"init_policy": str(tmp_path / "nowhere")}
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=r"cfg\.yaml: model\.init_policy: .*nowhere is not a policy folder"):
        load_config(path)


def test_quiet_windows_are_drawn_again_and_impossible_settings_say_so(
    window: str, traces_dir: Path, monkeypatch
) -> None:
    import marl.env.priority_env as penv

    trace = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv"
    # 6-hour windows at loads near 1: many nights of the trace cannot offer that; the env draws another
    env = penv.PriorityEnv({"trace": trace, "window_days": 0.25, "load": [0.9, 1.1], "train_start": 2_592_000,
                            "train_end": 3_600_000, "relative": False})  # fmt: skip
    for seed in range(3):
        env.reset(seed=seed)
        assert len(env.sim.jobs) >= 2 and "load=" in env.spec
    assert env.quiet_windows > 0
    # a fixed workload is never replaced by another
    with pytest.raises(penv.QuietWorkloadSpecError, match="offer at most"):
        penv.PriorityEnv({"workload": window.replace("load=0.9", "load=50"), "relative": False}).reset(seed=0)
    monkeypatch.setattr(penv, "MAX_DRAWS", 3)
    env = penv.PriorityEnv({"trace": trace, "window_days": 0.25, "load": 40, "relative": False})
    with pytest.raises(ValueError, match=r"3 windows in a row of window_days=0.25 .* load=\[40.0, 40.0\]; lower"):
        env.reset(seed=0)
    # before training starts: settings that one lucky draw meets but nearly every window does not are refused
    # (loads near 1, which many nights cannot offer, pass; a load no window offers does not)
    penv.PriorityEnv({"trace": trace, "window_days": 0.25, "load": [0.9, 1.1], "train_start": 2_592_000,
                      "train_end": 3_600_000}).refuse_mostly_quiet()  # fmt: skip
    busiest = penv.PriorityEnv({"trace": trace, "window_days": 0.25, "load": 40})
    said = r"64 of 64 windows of window_days=0.25 between train_start=2017-\S+ and train_end=2017-\S+ cannot offer load"
    with pytest.raises(ValueError, match=said):  # the span in the trace's dates
        busiest.refuse_mostly_quiet()


def test_an_iteration_that_sampled_nothing_stops_training() -> None:
    # RLlib takes failed env runners out of service and goes on; training must not export the warm start.
    from marl.training.ppo_iteration import train_iteration

    class AllRunnersFailed:
        def train(self) -> dict:
            return {"env_runners": {}, "num_env_steps_sampled_lifetime": 0}

    with pytest.raises(RuntimeError, match=r"PPO iteration 3 sampled no environment step.*worker logs"):
        train_iteration(AllRunnersFailed(), 3)


def test_a_failing_environment_shows_its_error_in_the_driver(window: str) -> None:
    # the runners' tracebacks stay in Ray's worker logs; the driver replays the env's reset to show the cause
    from types import SimpleNamespace

    from marl.env.priority_env import PriorityEnv, QuietWorkloadSpecError
    from marl.training.ppo_iteration import train_iteration

    class AllRunnersFailed:
        config = SimpleNamespace(env=PriorityEnv, env_config={"workload": window.replace("load=0.9", "load=50")})

        def train(self) -> dict:
            return {"env_runners": {"num_env_steps_sampled": 0}}

    with pytest.raises(
        RuntimeError, match=r"iteration 2 .* fails the same way: QuietWorkloadSpecError: .*load=50"
    ) as e:
        train_iteration(AllRunnersFailed(), 2)
    assert isinstance(e.value.__cause__, QuietWorkloadSpecError)


def test_bad_config_names_the_key(tmp_path: Path) -> None:
    from marl.training.priority_train import load_config

    path = tmp_path / "bad.yaml"
    path.write_text("env:\n  windw_days: 3\n")
    with pytest.raises(ValueError, match="windw_days"):
        load_config(path)
    path.write_text("ppo:\n  lr_rate: 3\n")
    with pytest.raises(ValueError, match="lr_rate"):
        load_config(path)
    path.write_text("tune:\n  factor: [4, 8]\n")
    with pytest.raises(ValueError, match="factor"):
        load_config(path)
    path.write_text("ppo:\n  num_envs_per_env_runner: 0\n")
    with pytest.raises(ValueError, match=r"bad\.yaml, line 2: ppo\.num_envs_per_env_runner: must be an integer >= 1"):
        load_config(path)
    path.write_text("env:\n  load: 0.9\n  window_days: half\n")  # a value of the wrong type: its key and line
    with pytest.raises(ValueError, match=r"bad\.yaml, line 3: env\.window_days: expected a finite number, got 'half'"):
        load_config(path)
    path.write_text("model:\n  hidden: 6.5\n")
    with pytest.raises(ValueError, match=r"line 2: model\.hidden: expected an integer, got 6\.5"):
        load_config(path)
    path.write_text("ppo:\n  imitation_coef: -1\n")
    with pytest.raises(ValueError, match=r"line 2: ppo\.imitation_coef: must be >= 0 \(0: no imitation\), got -1"):
        load_config(path)
    path.write_text("env:\n  imitation_label: true\n")  # training decides it, from ppo.imitation_coef
    with pytest.raises(ValueError, match=r"line 2: env\.imitation_label: set by training from ppo\.imitation_coef"):
        load_config(path)
    path.write_text("algo: appo\nppo:\n  imitation_coef: 1.0\n")
    with pytest.raises(ValueError, match=r"line 3: ppo\.imitation_coef: imitation in the learner is PPO's"):
        load_config(path)
    path.write_text("tune:\n  factors: [4, 8]\n")  # given keys replace the defaults, the rest stay
    assert load_config(path)["tune"] == {"factors": [4, 8], "days": 7.0, "stride": 3.5, "load": 0.9, "workers": None}
    path.write_text("ppo:\n  lr: 0.001\n")
    assert load_config(path)["tune"] is None  # no tune section: no margin selection after training


def test_a_checkpoint_of_another_config_is_not_resumed(tmp_path: Path) -> None:
    """``--resume`` continues only the training that saved the checkpoint; another config is refused, naming
    the folder and the fix, before anything is restored; a folder without a checkpoint starts afresh."""
    import json

    from marl.training.priority_train import _resume_point, parse_config

    cfg = parse_config({"env": {"workload": "synthetic:30,load=0.9"}, "ppo": {"lr": 0.001}}, "a.yaml")
    assert _resume_point(None, cfg, tmp_path / "checkpoint", log=print) is None
    (tmp_path / "checkpoint").mkdir()
    other = parse_config({"env": {"workload": "synthetic:30,load=0.9"}, "ppo": {"lr": 0.002}}, "a.yaml")
    (tmp_path / "checkpoint" / "progress.json").write_text(json.dumps({"config": json.loads(json.dumps(other))}))
    with pytest.raises(ValueError, match=r"checkpoint: saved by a training with another config; .* delete"):
        _resume_point(None, cfg, tmp_path / "checkpoint", log=print)
    # a training resumed after k iterations draws other windows and exploration than iteration 1 (seeds moved on
    # by k, the same for the same k), while the config it checks against the checkpoint is unchanged
    from marl.training.priority_train import ppo_config, resumed_seeds

    assert resumed_seeds(cfg, 0) is cfg
    seeds = [(c["seed"], c["env"]["seed"]) for c in (resumed_seeds(cfg, k) for k in (1, 2, 2))]
    assert seeds[0] != (cfg["seed"], cfg["env"]["seed"]) and seeds[0] != seeds[1] == seeds[2]
    assert ppo_config(resumed_seeds(cfg, 1)).seed == seeds[0][0] and cfg["seed"] == 0


def test_a_training_span_outside_the_trace_or_overlapped_by_select_is_named_in_dates() -> None:
    """The training span is checked against the trace before any window is drawn, in the config's dates: one
    after the trace's jobs, one that ends before it starts, and a select period inside it are refused at their keys."""
    from marl.training.config import TrainConfigError
    from marl.training.priority_train import parse_config

    lab = "philly:experiments/examples/lab_jobs.csv"
    env = {"cluster": "experiments/configs/clusters/small-64.yaml", "trace": lab, "num_agents": 1,
           "train_start": "2024-03-01", "train_end": "2024-03-08", "window_days": 1, "interference": "none",
           "interference_data": None}  # fmt: skip
    cases = [
        ({"train_start": "2024-04-01", "train_end": "2024-04-05"}, None,
         "env.train_start: the training span 2024-04-01..2024-04-05 holds no job of philly:experiments/examples/"
         "lab_jobs.csv: its jobs arrive from 2024-03-01T08:00:00 to 2024-03-13T07:37:42"),
        ({"train_start": "2024-03-05", "train_end": "2024-03-03"}, None,
         "env.train_end: the training span 2024-03-05..2024-03-03 ends before it starts"),
        ({}, {"start": "2024-03-06", "end": "2024-03-10", "days": 1, "stride": 1, "load": 0.9},
         "select.start: 2024-03-06 lies inside the training span (train_end 2024-03-08): the iterate shipped would "
         "be chosen on windows it trained on"),
    ]  # fmt: skip
    for change, select, message in cases:
        with pytest.raises(TrainConfigError, match=re.escape(message)):
            parse_config({"env": {**env, **change}, **({"select": select} if select else {})}, "own.yaml")


def test_training_windows_refuse_a_period_too_short_for_one() -> None:
    from marl.training.priority_tune import training_windows

    env = {"trace": "philly:x.csv", "train_start": 2_592_000, "train_end": 2_592_000 + 86400, "window_days": 0.5}
    assert len(training_windows(PriorityEnvConfig.from_dict(env), 0.5, 0.25, 0.9)) == 3
    with pytest.raises(ValueError, match="--days"):
        training_windows(PriorityEnvConfig.from_dict(env), 5.0, 1.0, 0.9)


def test_training_windows_that_reach_the_report_period_are_refused_by_name(monkeypatch) -> None:
    """A training period that reaches into the report weeks (2017-11-01..14) is refused wherever it is given: the
    agents' env (PPO, the tune and select stages read it), the DAgger recipe and a run's train section; it may
    end where the report period starts, and another trace has no periods."""
    from experiments.run_config import ExperimentConfigError, load_experiment_config
    from marl.env.priority_env import EnvConfigError
    from marl.training.priority_dagger import PriorityDaggerConfig

    philly = {"trace": "philly:x.csv", "train_start": "2017-10-20", "window_days": 1.0}
    assert PriorityEnvConfig.from_dict({**philly, "train_end": "2017-11-01"}).train_end == HELD_OUT_START
    with pytest.raises(EnvConfigError, match=r"train_end: the span 2017-10-20\.\.2017-11-10 reaches into the report"):
        PriorityEnvConfig.from_dict({**philly, "train_end": "2017-11-10"})
    gavel = {**philly, "trace": "gavel:x.json", "train_start": 4e6, "train_end": 6e6}  # seconds of its own
    assert PriorityEnvConfig.from_dict(gavel).train_end == 6e6
    with pytest.raises(ValueError, match=r"train_end: the span .*\.\.2017-11-03 reaches into the report period"):
        PriorityDaggerConfig(train_end=HELD_OUT_START + 2 * DAY)
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    with pytest.raises(ExperimentConfigError, match=r"train\.env\.train_end: .* reaches into the report period"):
        load_experiment_config("experiments/configs/quickstart.yaml", sets=["train.env.train_end=2017-11-10"])
