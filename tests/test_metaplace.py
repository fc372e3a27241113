"""Meta-RL placement (marl.baselines): measured speeds only (no profile, no job length), the initial network
is type-blind LAS, the context adapts across episodes, config errors, the shipped folder without RLlib, and a
brief meta-training run with its adaptation report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cluster_sim.build import build_simulator
from cluster_sim.policies import get_policy
from cluster_sim.policies.rigid_rounds import ScoredRounds, las_score
from cluster_sim.sim_presets import SIM_PRESETS
from marl.baselines.metaplace import (
    FEATURES,
    MetaPlace,
    MetaPlaceWeights,
    SpeedContext,
    load_metaplace_policy,
    save_metaplace_policy,
)
from marl.baselines.metaplace_train import mix_cluster, parse_metaplace_config, train_metaplace
from marl.training.config import TrainConfigError
from tests.test_dl2 import NoLengthView

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "experiments" / "policies" / "metaplace-philly"
SIA_OPTS = dict(SIM_PRESETS["sia"].costs)


@pytest.fixture(scope="module")
def sia(traces_dir: Path) -> dict[str, str]:
    root = traces_dir / "sia-sosp23"
    if not (root / "workloads" / "philly" / "workload-1.csv").is_file():
        pytest.skip("Sia's workloads not present")
    return {
        f"w{k}": f"pollux:{root}/workloads/philly/workload-{k}.csv,profiles={root}/traces,max_jobs=40" for k in (1, 2)
    }


def _sim(spec: str):
    return build_simulator("sia-hetero", spec, **SIA_OPTS)


def _weights(**linear: float) -> MetaPlaceWeights:
    w = MetaPlaceWeights.initial(4, np.random.default_rng(0))
    for k, v in linear.items():
        w.linear[FEATURES.index(k)] = v
    return w


def test_the_initial_network_is_type_blind_las(sia: dict[str, str]) -> None:
    mine = _sim(sia["w1"]).run(MetaPlace(_weights())).metrics()
    ref = _sim(sia["w1"]).run(get_policy("rounds-blind")).metrics()
    assert mine["avg_jct"] == ref["avg_jct"] and mine["jobs_completed"] == 40


def _perturb(rates: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Every job's speed on every type it does not run on, scaled at random."""
    noisy = rates * np.random.default_rng(len(rates)).uniform(0.2, 5.0, rates.shape)
    on = np.flatnonzero(current >= 0)
    noisy[on, current[on]] = rates[on, current[on]]
    return noisy


class _Perturbed(MetaPlace):
    def _score(self, view, jobs, rates, current):
        return super()._score(view, jobs, _perturb(rates, current), current)


class _Guarded(_Perturbed):
    def reset(self, view) -> None:
        super().reset(NoLengthView(view))

    def schedule(self, view):
        return super().schedule(NoLengthView(view))


def test_observations_are_measured_speeds_only(sia: dict[str, str]) -> None:
    """The decisions are the same whatever the speeds of (job, type) pairs that never ran, and no job's
    length is read: the policy knows only what running jobs show."""
    w = _weights(relative_speed=1.0, uncertainty=0.3, advantage=0.5)
    plain = _sim(sia["w1"]).run(MetaPlace(w)).metrics()["avg_jct"]
    guarded = _sim(sia["w1"]).run(_Guarded(w)).metrics()["avg_jct"]
    assert guarded == plain
    # a profiled score (rounds-las) reads those speeds: the same perturbation changes its decisions
    las = ScoredRounds(lambda v, j, r, c: las_score(v, j, _perturb(r, c), c))
    profiled = _sim(sia["w1"]).run(ScoredRounds("las")).metrics()["avg_jct"]
    assert _sim(sia["w1"]).run(las).metrics()["avg_jct"] != profiled


def test_the_context_carries_across_episodes_and_changes_decisions(sia: dict[str, str]) -> None:
    w = _weights(relative_speed=2.0)
    ctx = SpeedContext()
    first = _sim(sia["w2"]).run(MetaPlace(w, context=ctx)).metrics()["avg_jct"]
    assert len(ctx) > 0 and all(c > 0 for _, c in ctx.table.values())
    measured = {k: c for k, (_, c) in ctx.table.items()}
    again = _sim(sia["w2"]).run(MetaPlace(w, context=ctx)).metrics()["avg_jct"]
    assert again != first  # it starts knowing what the first episode measured
    assert sum(c for _, c in ctx.table.values()) > sum(measured.values())
    frozen = SpeedContext()
    _sim(sia["w2"]).run(MetaPlace(w, context=frozen, adapt=False))
    assert len(frozen) == 0
    assert SpeedContext.from_json(json.loads(json.dumps(ctx.to_json()))).table == ctx.table


def test_weights_round_trip_and_the_folder_runs_without_ray(tmp_path: Path, sia: dict[str, str]) -> None:
    w = MetaPlaceWeights.initial(4, np.random.default_rng(1))
    w.linear[:] = np.arange(len(FEATURES)) / 10
    w.w2[:] = 0.3
    back = MetaPlaceWeights.from_flat(w.flat(), 4)
    assert np.array_equal(back.flat(), w.flat())
    save_metaplace_policy(w, tmp_path / "p", {"interval": 360.0, "stay": 0.1})
    mine = _sim(sia["w1"]).run(MetaPlace(w)).metrics()["avg_jct"]
    code = (
        "import sys; from experiments.simulate import make_scheduler_by_name; "
        "from cluster_sim.build import build_simulator; "
        f"s = make_scheduler_by_name('metaplace:{tmp_path / 'p'}', 0); "
        f"r = build_simulator('sia-hetero', {sia['w1']!r}, **{SIA_OPTS!r}).run(s); "
        "assert not any(m.startswith('ray') for m in sys.modules), 'ray imported'; "
        "print(r.metrics()['avg_jct'])"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.split()[-1]) == pytest.approx(mine)


def test_shipped_policy_loads_and_schedules_validly(sia: dict[str, str]) -> None:
    if not SHIPPED.is_dir():
        pytest.skip("no shipped policy")
    res = _sim(sia["w2"]).run(load_metaplace_policy(SHIPPED)).metrics()
    assert res["jobs_completed"] == 40
    meta = json.loads((SHIPPED / "metadata.json").read_text())
    assert meta["agent"] == "metaplace" and meta["command"].startswith("marlsched train")


def test_mix_cluster_gives_every_type_a_server() -> None:
    spec = mix_cluster(["V100", "P100", "K80"], np.array([0.9, 0.08, 0.02]), 8)
    servers = [round(m["fraction"] * 8) for m in spec["mix"]]
    assert sum(servers) == 8 and min(servers) == 1
    sim = build_simulator(spec, "synthetic:5", seed=0)
    assert sorted(set(sim.topo.gpu_types)) == ["K80", "P100", "V100"]


def test_a_bad_config_names_the_key_and_the_fix() -> None:
    with pytest.raises(TrainConfigError, match=r"c\.yaml: env\.gpu_types\.1: unknown GPU type 'P200'"):
        parse_metaplace_config({"agent": "metaplace", "env": {"gpu_types": ["V100", "P200"]}}, "c.yaml")
    with pytest.raises(TrainConfigError, match=r"train\.sigma: must be > 0"):
        parse_metaplace_config({"agent": "metaplace", "train": {"sigma": 0}}, "c.yaml")
    with pytest.raises(TrainConfigError, match=r"env\.loads\.1: must be > 0"):
        parse_metaplace_config({"agent": "metaplace", "env": {"loads": [0.5, 0]}}, "c.yaml")
    with pytest.raises(TrainConfigError, match=r"env\.train\.count: a trial plays two training windows"):
        parse_metaplace_config({"agent": "metaplace", "env": {"train": {"count": 1}}}, "c.yaml")
    with pytest.raises(TrainConfigError, match=r"adaptation\.heuristics\.0: .*gavell"):
        parse_metaplace_config({"agent": "metaplace", "adaptation": {"heuristics": ["gavell"]}}, "c.yaml")
    with pytest.raises(TrainConfigError, match="this trainer trains 'metaplace'"):
        parse_metaplace_config({"agent": "dl2"}, "c.yaml")


@pytest.mark.slow
def test_brief_meta_training_writes_a_policy_and_the_adaptation_report(
    tmp_path: Path, traces_dir: Path, sia: dict[str, str], train_command
) -> None:
    philly = traces_dir / "pollux-osdi21" / "traces" / "philly.csv"
    data = {
        "agent": "metaplace",
        "env": {
            "trace": f"philly:{philly},model_rule=gavel,max_gpus=8",
            "load": 0.5,
            "servers": 4,
            "train": {"start": 2208559, "count": 2, "days": 0.1, "stride_days": 1},
            "validation": {"start": 4505359, "count": 2, "days": 0.1, "stride_days": 0.25},
        },
        "model": {"hidden": 4},
        "train": {"iterations": 2, "pairs": 1, "workers": 1, "eval_every": 1},
        "adaptation": {"workloads": sia, "episodes": [0, 1], "scratch_episodes": 2, "heuristics": ["gavel"]},
    }
    cfg = parse_metaplace_config(data, "tiny.yaml")
    summary = train_metaplace(cfg, tmp_path / "run", command="marlsched train --config tiny.yaml", log=lambda m: None)
    assert summary["iterations"] == 2
    policy = load_metaplace_policy(tmp_path / "run" / "policy")
    assert isinstance(policy, MetaPlace) and len(policy.context) == 0
    (doc,) = json.loads((tmp_path / "run" / "evaluation" / "adaptation.json").read_text())["shifts"]
    assert doc["cluster"] == "sia-hetero"
    assert set(doc["meta"]) == {"0", "1"} and set(doc["scratch"]) == {"0", "1", "2"}
    assert len(doc["no_adaptation"]) == len(doc["type_blind"]) == len(doc["heuristics"]["gavel"]) == 2
    # from scratch with no episode is the initial network: type-blind LAS, on the same workloads
    assert doc["scratch"]["0"] == doc["type_blind"]
    assert (tmp_path / "run" / "evaluation" / "adaptation.png").stat().st_size > 0
    assert "| 0 |" in (tmp_path / "run" / "evaluation" / "adaptation.md").read_text()
    # the same config without the adaptation, through the one command: the same selection
    rerun = train_command({**data, "adaptation": {**data["adaptation"], "enabled": False}}, tmp_path / "run2")
    assert rerun["selected_iteration"] == summary["selected"]
    w1 = json.loads((tmp_path / "run" / "policy" / "weights.json").read_text())
    w2 = json.loads((tmp_path / "run2" / "policy" / "weights.json").read_text())
    assert w1 == w2  # the same seed, the same weights
