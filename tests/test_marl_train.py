"""MARL training: config validation, imitation warm start, PPO with checkpoint/resume, export, evaluation."""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from marl.env.obs_layout import OBS_KEYS
from marl.env.placement_env import MarlSchedEnv
from marl.models.rl_module import hgnn_module_spec
from marl.training.config import TrainConfigError, load_train_config, parse_train_config
from marl.training.expert import ExpertPolicy
from marl.training.warm_start import collect_expert_data, equivalent_actions, split_holdout, train_imitation

REPO = Path(__file__).resolve().parents[1]

TINY = {
    "name": "tiny",
    "seed": 0,
    "env": {
        "cluster": "small",
        "workload": "synthetic:16,load=0.95",
        "num_agents": 4,
        "interference": "none",
        "reward_scale": 36000,
    },
    "model": {"hidden": 16, "gpu_layers": 1, "server_layers": 1, "rack_layers": 1},
    "warm_start": {"episodes": 2, "epochs": 2, "batch_size": 64},
    "ppo": {
        "iterations": 2,
        "num_env_runners": 1,
        "num_envs_per_env_runner": 2,  # the runner steps two environments, scored in one pass
        "train_batch_size": 64,
        "minibatch_size": 32,
        "num_epochs": 1,
        "checkpoint_every": 2,
    },
    "evaluation": {"seeds": [1_000_001], "interference": "none", "heuristics": ["fifo", "sjf"]},
}


# ---------------------------------------------------------------------------------------------- config


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_shipped_config_is_valid() -> None:
    cfg = load_train_config(REPO / "experiments" / "configs" / "marl_small.yaml")
    assert cfg.env["num_agents"] == 4 and cfg.warm_start.enabled
    assert cfg.ppo.num_env_runners >= 2 and cfg.ppo.num_cpus_per_env_runner < 1  # fractional on 2 cores
    assert cfg.evaluation.interference == "oracle" and cfg.env["interference"] == "learned"
    assert cfg.predictor_training.data and cfg.evaluation.oracle_data
    assert cfg.to_dict()["ppo"]["lambda"] == cfg.ppo.lambda_


def test_unknown_key_names_path_line_and_allowed_keys(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
        name: x
        ppo:
          iterations: 3
          learning_rate: 0.1
        """,
    )
    with pytest.raises(TrainConfigError) as err:
        load_train_config(path)
    msg = str(err.value)
    assert str(path) in msg and "line 4" in msg and "ppo.learning_rate" in msg
    assert "allowed keys here" in msg and "lr" in msg and "minibatch_size" in msg


@pytest.mark.parametrize(
    ("patch", "fragment"),
    [
        ({"bogus": 1}, "bogus: unknown key; allowed keys here: name, seed, env"),
        ({"env": {"num_agentz": 4}}, "env.num_agentz: unknown key; allowed keys here: cluster"),
        ({"ppo": {"iterations": "many"}}, "ppo.iterations: expected an integer"),
        ({"ppo": {"lr": True}}, "ppo.lr: expected a finite number"),
        ({"ppo": {"minibatch_size": 999, "train_batch_size": 10}}, "ppo.minibatch_size: 999 exceeds"),
        ({"ppo": {"lambda": 1.5}}, "ppo.lambda: must be in (0, 1]"),
        ({"ppo": {"num_envs_per_env_runner": 0}}, "ppo.num_envs_per_env_runner: must be > 0"),
        ({"warm_start": {"strategy": "spread-out"}}, "warm_start.strategy: 'spread-out' is not among env.placements"),
        ({"env": {"interference": "learned"}}, "env.interference_model: interference 'learned' needs"),
        ({"env": {"interference": "magic"}}, "env.interference: 'magic' is not one of"),
        ({"evaluation": {"heuristics": ["fifo", "nope"]}}, "evaluation.heuristics.1: unknown scheduler 'nope'"),
        ({"evaluation": {"seeds": []}}, "evaluation.seeds: give at least one"),
        ({"model": []}, "model: expected a mapping with keys hidden"),
    ],
)
def test_bad_values_name_the_field(patch: dict, fragment: str) -> None:
    data = json.loads(json.dumps(TINY))
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key].update(value)
        else:
            data[key] = value
    with pytest.raises(TrainConfigError, match=r"x\.yaml") as err:
        parse_train_config(data, "x.yaml")
    assert fragment in str(err.value)


# ---------------------------------------------------------------------------------------------- warm start


def test_warm_start_reduces_imitation_loss_and_reproduces_expert() -> None:
    env_config = {"cluster": "small", "workload": "synthetic:40,load=0.95", "num_agents": 4, "reward_scale": 36000}
    data = collect_expert_data(env_config, episodes=4, seed=3)
    assert data.env_steps > 0 and data.choice.sum() >= 100
    # The recorded actions are what the expert picks from the recorded masks.
    env = MarlSchedEnv(env_config)
    expert = ExpertPolicy(env.layout, env.config.placements)
    np.testing.assert_array_equal(expert.actions(data.obs["action_mask"]), data.actions)
    # Returns are discounted sums of the (negative) shared reward.
    assert (data.returns <= 0).all() and data.returns.min() < 0

    train, holdout = split_holdout(data)
    assert holdout is not None and set(np.unique(holdout.episode)) == {3}
    torch.manual_seed(0)
    net = hgnn_module_spec(env.layout, env.hierarchy(), hidden=32).build().net
    history = train_imitation(net, train, epochs=6, batch_size=32, lr=3e-3, holdout=holdout)
    first, last = history[0], history[-1]
    assert last["train_loss"] < 0.6 * first["train_loss"]
    assert last["train_value_mse"] < first["train_value_mse"]
    # Held-out states (a workload the imitation never saw): the policy's greedy choice is the expert's
    # candidate (or one that starts the same job on the same GPUs) on most decision states.
    assert first["holdout_equivalent_accuracy"] < 0.5
    assert last["holdout_equivalent_accuracy"] >= 0.9, history
    assert last["holdout_accuracy"] <= last["holdout_equivalent_accuracy"]


def test_equivalent_actions_match_same_job_and_gpus() -> None:
    env = MarlSchedEnv({"cluster": "small", "workload": "synthetic:20", "num_agents": 4})
    obs, _ = env.reset(seed=0)
    o = next(v for v in obs.values() if v["action_mask"][:-1].sum() >= 2)
    batch = {k: o[k][None].repeat(3, axis=0) for k in OBS_KEYS}
    lay = env.layout
    p = len(env.config.placements)
    # consolidate and closest-gpus of the queue head on an empty partition propose the same GPUs
    same = bool((o["cand_gpus"][0] == o["cand_gpus"][1]).all())
    got = equivalent_actions(lay, batch, np.array([0, 0, lay.C]), np.array([1, p, 0]))
    assert got.tolist() == [same, False, False]


# ---------------------------------------------------------------------------------------------- PPO


def _rows(run: Path) -> list[dict[str, str]]:
    with (run / "progress.csv").open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_warm_start_weights_reach_learner_and_env_runners(ray_local) -> None:
    from marl.training.train import build_ppo_config, load_module_weights, module_spec_for, training_env_config

    cfg = parse_train_config(TINY)
    env_config = training_env_config(cfg)
    spec, _ = module_spec_for(cfg, env_config)
    torch.manual_seed(123)
    module = spec.build()
    algo = build_ppo_config(cfg, env_config, spec).build_algo()
    try:
        want = module.state_dict()
        learner = algo.learner_group.get_weights()["shared"]
        assert any(not np.array_equal(learner[k], want[k].numpy()) for k in want)  # differs before loading
        load_module_weights(algo, module.get_state())
        learner = algo.learner_group.get_weights()["shared"]
        remote = algo.env_runner_group.foreach_env_runner(
            lambda er: er.module["shared"].get_state(), local_env_runner=False
        )
        assert len(remote) == cfg.ppo.num_env_runners
        for k, v in want.items():
            np.testing.assert_array_equal(learner[k], v.numpy())
            np.testing.assert_array_equal(remote[0][k], v.numpy())
    finally:
        algo.stop()


@pytest.mark.slow
def test_train_checkpoint_resume_export_and_evaluate(ray_local, tmp_path: Path, monkeypatch) -> None:
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModule

    from marl.cli import add_train_commands
    from marl.deploy.export import MODULE_SUBDIR, TorchScriptPolicy, read_metadata
    from marl.training.train import resume_config, train

    cfg = parse_train_config(TINY)
    run = tmp_path / "run"
    logs: list[str] = []
    monkeypatch.chdir(tmp_path)  # a relative --out, as users type it (RLlib itself wants absolute paths)
    train(cfg, Path("run"), evaluate=False, log=logs.append)
    state = json.loads((run / "state.json").read_text())
    assert state["iteration"] == 2 and state["checkpoint"] == "checkpoints/iter_000002"
    assert (run / "warm_start" / "module").is_dir() and (run / "learning_curve.png").stat().st_size > 1000
    warm = json.loads((run / "warm_start" / "metrics.json").read_text())
    assert warm["history"][-1]["train_loss"] < warm["history"][0]["train_loss"]
    rows = _rows(run)
    assert [int(r["iteration"]) for r in rows] == [1, 2]
    steps = [int(r["env_steps"]) for r in rows]
    assert steps[0] >= 64 and steps[1] > steps[0]
    assert all(np.isfinite(float(r["policy_loss"])) and float(r["entropy"]) >= 0 for r in rows)
    assert any(r["avg_jct"] for r in rows)  # some episode finished and reported its JCT
    # The same seed trains the same: warm start, sampled episodes and learner updates repeat exactly.
    train(cfg, Path("again"), iterations=1, evaluate=False, log=lambda s: None)
    keys = ("env_steps", "avg_jct", "episode_return_mean", "policy_loss", "vf_loss", "entropy")
    assert [[r.get(k) for k in keys] for r in _rows(tmp_path / "again")] == [[r.get(k) for k in keys] for r in rows[:1]]

    # Resume the "killed" run: the algorithm (and its sample counter) continue at iteration 3.
    logs.clear()
    train(resume_config(run), run, resume=True, iterations=3, log=logs.append)
    assert any("resumed from" in line and "iteration 2" in line for line in logs)
    assert not any(line.startswith("warm start") for line in logs)
    rows = _rows(run)
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]
    assert int(rows[2]["env_steps"]) > steps[1]
    assert json.loads((run / "state.json").read_text())["iteration"] == 3

    # Export through the CLI entry point; the TorchScript logits equal the trained RLModule's.
    parser = argparse.ArgumentParser()
    add_train_commands(parser.add_subparsers(dest="command"))
    policy = tmp_path / "policy"
    args = parser.parse_args(["export", "--checkpoint", str(run), "--out", str(policy)])
    assert args.func(args) == 0
    meta = read_metadata(policy)
    assert meta["trained_with"]["iteration"] == 3 and meta["num_agents"] == 4
    assert meta["layout"]["G"] == 64 and meta["placements"] == ["consolidate", "closest-gpus", "spread"]
    assert meta["feature_names"]["queue_feats"][0] == "valid" and "torch" in meta["versions"]
    module = RLModule.from_checkpoint(str(run / "checkpoints" / "iter_000003" / MODULE_SUBDIR))
    env = MarlSchedEnv(cfg.env_config())
    obs, _ = env.reset(seed=5)
    expert = ExpertPolicy(env.layout, env.config.placements)
    batches = []
    for _ in range(6):
        batches.append({k: np.stack([obs[a][k] for a in env.possible_agents]) for k in OBS_KEYS})
        obs, _, term, _, _ = env.step(expert.act(obs))
        if term["__all__"]:
            break
    batch = {k: np.concatenate([b[k] for b in batches]) for k in OBS_KEYS}
    assert (batch["action_mask"].sum(axis=1) > 1).any()
    ref = module.forward_inference({Columns.OBS: {k: torch.from_numpy(v) for k, v in batch.items()}})
    ref_logits = ref[Columns.ACTION_DIST_INPUTS].numpy()
    got = TorchScriptPolicy(policy / "policy.pt", num_threads=None)(batch)
    allowed = batch["action_mask"] > 0
    np.testing.assert_allclose(got[allowed], ref_logits[allowed], atol=1e-5, rtol=0)
    assert (got[~allowed] < -1e38).all()

    # The resumed run evaluated the policy, the expert and the heuristics on an unseen workload seed.
    report = json.loads((run / "eval.json").read_text())
    assert {"marl", "marl-warm-start", "expert", "fifo", "sjf"} <= set(report["mean"])
    jobs = 16
    assert all(m["jobs_completed"] == jobs for m in report["mean"].values())
    table = (run / "comparison.md").read_text()
    assert "| marl |" in table and "| fifo |" in table and "1.000" in table


def test_policy_with_learned_predictor_exports_and_runs_without_ray(tmp_path: Path, traces_dir: Path) -> None:
    from marl.deploy.export import export_policy_dir, read_metadata
    from marl.training.run_folder import RunFolder
    from marl.training.train import module_spec_for, prepare_predictor, training_env_config
    from marl.training.warm_start import run_warm_start

    data = json.loads(json.dumps(TINY))
    data["env"]["interference"] = "learned"  # trains a (tiny) predictor into the run folder
    gavel = traces_dir / "gavel" / "simulation_throughputs.json"
    data["predictor_training"] = {"data": f"gavel:{gavel}", "steps": 20}
    cfg = prepare_predictor(parse_train_config(data), tmp_path, log=lambda m: None)
    assert Path(cfg.env["interference_model"]) == (tmp_path / "interference_model.json").resolve()
    env_config = training_env_config(cfg)
    spec, _ = module_spec_for(cfg, env_config)
    run_warm_start(cfg, env_config, spec.build(), RunFolder(tmp_path), log=lambda m: None)
    export_policy_dir(tmp_path / "warm_start", tmp_path / "policy", log=lambda m: None)
    meta = read_metadata(tmp_path / "policy")
    assert meta["predictor"]["mode"] == "learned"
    assert (tmp_path / "policy" / meta["predictor"]["model_file"]).is_file()  # self-contained folder
    code = textwrap.dedent(
        f"""
        import sys
        from marl.deploy.export import load_marl_policy
        from marl.training.config import parse_train_config
        from marl.training.evaluation import eval_simulator
        sched = load_marl_policy({str(tmp_path / "policy")!r})
        assert sched.predictor.name == "learned", sched.predictor
        cfg = parse_train_config({TINY!r})
        result = eval_simulator(cfg, "synthetic:30,load=0.95", 11).run(sched)
        assert result.metrics()["jobs_completed"] == 30, result.metrics()
        assert sched.policy_calls > 0
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("ray", "torch_geometric"))
        print("IMPORTED", bad)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "IMPORTED []" in out.stdout
