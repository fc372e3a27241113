"""The priority agents trained on the true remaining time (DAgger): the fit, the folder, determinism, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from cluster_sim.traces.periods import DAY, HELD_OUT_START
from experiments.benchmarks import priority_room
from marl.deploy.registry import load_policy
from marl.env.priority_agents import OracleKeyAgents, PriorityAgents, qssf_scores
from marl.env.priority_features import JobSetLayout
from marl.models.priority_net import PriorityNet
from marl.training.priority_dagger import PriorityDaggerConfig, _collect, estimates, fit_priority, train

NOV1 = HELD_OUT_START


def tiny_config(traces_dir: Path, **kw) -> PriorityDaggerConfig:
    """Two 1-day windows just before 2017-11-01, at a load that queues; a short fit."""
    base = dict(
        trace=f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv",
        interference_data=f"gavel:{traces_dir}/gavel/simulation_throughputs.json",
        train_start=NOV1 - 1.5 * DAY, train_end=NOV1, days=1.0, stride=0.5, load=0.9,
        record_every=2, hidden=8, epochs=3, batch=64, tune_factors="4,8", workers=1,
    )  # fmt: skip
    return PriorityDaggerConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def rows(traces_dir: Path) -> dict[str, np.ndarray]:
    cfg = tiny_config(traces_dir)
    data = _collect((cfg, cfg.windows(0)[0], None))
    assert data is not None
    return data


def test_recorded_observations_are_what_the_deployed_agents_see(rows: dict[str, np.ndarray]) -> None:
    valid = rows["jobs"][..., 0] > 0
    assert valid.any(axis=1).all()  # only agents with a job are recorded
    assert (rows["label"][~valid] == 0).all() and (rows["label"][valid] >= 0).all()
    # untrained, the network is QSSF: its estimate is the history column, and that is what recorded the states
    net = PriorityNet(8)
    pred, hist, true = estimates(net, rows)
    assert np.allclose(pred, hist, atol=1e-4) and len(true) == int(valid.sum())
    assert np.allclose(-qssf_scores(rows)[valid], hist, atol=1e-4)


def test_the_fit_is_seeded_and_moves_the_estimate_toward_the_truth(rows: dict[str, np.ndarray]) -> None:
    a, b = (fit_priority(rows, hidden=8, epochs=30, batch=64, lr=3e-3, seed=5) for _ in range(2))
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    pred, hist, true = estimates(a, rows)
    assert np.mean((pred - true) ** 2) < 0.8 * np.mean((hist - true) ** 2)


def within_set_error(net: PriorityNet, rows: dict[str, np.ndarray]) -> float:
    """Mean squared error of the estimate after removing each agent's mean error: how well it orders a set."""
    with torch.no_grad():
        scores, _ = net.encode(torch.from_numpy(rows["jobs"]), torch.from_numpy(rows["parts"]))
    valid = rows["jobs"][..., 0]
    err = (-scores.numpy() - rows["label"]) * valid
    centred = (err - err.sum(1, keepdims=True) / np.maximum(valid.sum(1, keepdims=True), 1)) * valid
    return float((centred**2).sum() / valid.sum())


def test_the_rank_weight_fits_the_order_within_each_agents_set(rows: dict[str, np.ndarray]) -> None:
    plain = fit_priority(rows, hidden=8, epochs=30, batch=64, lr=3e-3, rank_weight=0.0, seed=5)
    ranked = fit_priority(rows, hidden=8, epochs=30, batch=64, lr=3e-3, rank_weight=10.0, seed=5)
    assert within_set_error(ranked, rows) < within_set_error(plain, rows)


def test_training_writes_a_seeded_policy_folder_that_loads_as_marl(
    tmp_path: Path, traces_dir: Path, train_command
) -> None:
    from dataclasses import asdict

    from marl.deploy.registry import policy_kind

    cfg = tiny_config(traces_dir)
    logs: list[str] = []
    meta = train(cfg, tmp_path / "a", log=logs.append)
    # the same config through the one command (a flat config: agent priority, algo dagger), into b/policy; the
    # margin's selection, which changes no weight, is left out of the repeat
    train_command({"agent": "priority", "algo": "dagger", **asdict(cfg), "tune_factors": ""}, tmp_path / "b")
    assert policy_kind(tmp_path / "b" / "policy") == "priority"
    assert [r["collected_by"] for r in meta["progress"]] == ["qssf", "policy"]
    assert meta["progress"][1]["rows"] > meta["progress"][0]["rows"] > 0
    assert -1.0 <= meta["progress"][1]["holdout_corr"] <= 1.0 and "holdout_corr" not in meta["progress"][0]
    a, b = (torch.jit.load(str(tmp_path / k / "policy.pt")) for k in ("a", "b/policy"))
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())  # same seed, same policy
    saved = json.loads((tmp_path / "a" / "metadata.json").read_text())
    assert saved["export_max_abs_diff"] < 1e-5 and saved["config"]["hidden"] == 8
    assert saved["program_max_abs_diff"] < 1e-5  # the torch.export program too
    assert saved["tuned"]["factors"] == [4.0, 8.0]  # the margin was selected on the training windows
    assert saved["agents"]["hysteresis"] == pytest.approx(np.log(saved["tuned"]["factor"]))
    assert any("hysteresis ln" in line for line in logs) and (tmp_path / "a" / "estimates.png").stat().st_size > 0
    # progress names each window by its dates and its place in the round, and says when a fit starts
    played = [line for line in logs if line.startswith("round 0/") and ", window " in line]  # R of N rounds
    window = rf"round 0/{cfg.dagger_rounds}, window \d+/\d+: 20\d\d-\d\d-\d\d\S*\.\.20"
    assert played and all(re.match(window, line) for line in played)
    assert any(line.startswith(f"round 1/{cfg.dagger_rounds}: fitting on ") for line in logs)
    policy = load_policy(tmp_path / "a", name="learned")
    assert isinstance(policy, PriorityAgents) and policy.name == "learned"
    assert policy.hysteresis == pytest.approx(saved["agents"]["hysteresis"])


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("factor", 0.5, "factor"),
        ("tune_factors", "4,x", "tune_factors"),
        ("tune_factors", "0.5", "tune_factors"),
        ("train_end", NOV1 + DAY, "train_end"),
        ("days", 10.0, "window"),
        ("record_every", 0, "record_every"),
        ("holdout", 1.0, "holdout"),
    ],
)
def test_bad_settings_fail_by_name(traces_dir: Path, field: str, value, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        tiny_config(traces_dir, **{field: value})


class CheckedOracle(OracleKeyAgents):
    """The oracle-key reference, checking at every round that its key is the true remaining time."""

    calls = 0

    def observe(self, view):
        obs = super().observe(view)
        if obs is not None:
            ok = obs.job_ids >= 0
            key = obs.arrays["jobs"][..., JobSetLayout.column("log_expected_remaining")][ok]
            true = np.log(np.maximum(view.remaining_times(obs.job_ids[ok]), 1.0)) / JobSetLayout.LOG_SCALE
            assert np.allclose(key, true, atol=1e-5)
            self.calls += 1
        return obs


def test_the_oracle_key_reference_ranks_by_true_remaining_time(traces_dir: Path) -> None:
    from cluster_sim.build import build_simulator

    cfg = tiny_config(traces_dir)

    def sim():
        return build_simulator("small", cfg.windows(0)[0], seed=0, interference="oracle",
                               interference_data=cfg.interference_data, restart_cost=30.0)  # fmt: skip

    oracle = CheckedOracle(None, num_agents=4)
    with_oracle = sim().run(oracle)
    untrained = sim().run(PriorityAgents(None, num_agents=4))
    assert oracle.calls > 0 and not np.array_equal(with_oracle.end, untrained.end)


def test_priority_room_runs_a_folder_with_the_agent_count_it_records(tmp_path: Path) -> None:
    """A folder trained as one agent is paired as one agent (it once ran as --agents' default, 4, without a word);
    --agents, given, or the variant's own option sets another count."""
    import json
    import shutil

    one = tmp_path / "one-agent"
    shutil.copytree(Path(__file__).resolve().parents[1] / "experiments" / "policies" / "philly-small-dagger", one)
    meta = json.loads((one / "metadata.json").read_text())
    meta["agents"] = {**meta.get("agents", {}), "num_agents": 1}
    meta["agents"].pop("per", None)
    (one / "metadata.json").write_text(json.dumps(meta))
    assert priority_room.variant_scheduler(f"marl:{one}", 8.0, None).agents_wanted == 1
    assert priority_room.variant_scheduler(f"marl:{one}", 8.0, 3).agents_wanted == 3
    assert priority_room.variant_scheduler(f"marl:{one},num_agents=2", 8.0, 3).agents_wanted == 2
    assert priority_room.variant_scheduler("untrained", 8.0, None).agents_wanted == priority_room.DEFAULT_AGENTS


def test_priority_room_rejects_unknown_variants_and_windows_too_long() -> None:
    for argv in (["--variants", "bogus"], ["--days", "20"], ["--factor", "0.5"]):
        with pytest.raises(SystemExit):
            priority_room.main(argv)
