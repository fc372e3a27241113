"""`marlsched run`: experiment config validation, resuming an interrupted run, a two-node local Ray cluster."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import yaml

from cluster_sim.traces.periods import DAY, HELD_OUT_START, PERIODS, window_spec
from experiments.run_config import ExperimentConfigError, load_experiment_config, parse_experiment_config

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

TINY = {
    "name": "tiny",
    "cluster": "small",
    "workload": "synthetic:40,load=0.9",
    "interference": "none",
    "seeds": [1, 2, 3],
    "schedulers": ["fifo", "sjf"],
    "baselines": ["fifo"],
    "timeline_points": 50,
}
# The priority agents on a fixed workload, one small PPO iteration, sampled in the driver (a remote EnvRunner's
# start is about 4 s of CPU; the lost-node test below runs two).
TINY_TRAIN = {
    "env": {"workload": "synthetic:30,load=0.9", "interference": "none", "interference_data": None},
    "model": {"hidden": 16},
    "ppo": {"iterations": 1, "num_env_runners": 0, "train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1,
            "snapshot_every": 0},
}  # fmt: skip


def _write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ---------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "name",
    [
        "quickstart.yaml", "philly_dc1k.yaml", "scaling_dc1k.yaml", "pollux_osdi21.yaml", "pollux_osdi21_load0.5.yaml",
        "pollux_osdi21_load1.5.yaml", "pollux_osdi21_load2.0.yaml",
    ],
)  # fmt: skip
def test_shipped_configs_are_valid(name: str, traces_dir: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    cfg = load_experiment_config(REPO / "experiments" / "configs" / name)
    assert cfg.seeds and cfg.schedulers
    if "marl" in cfg.schedulers or cfg.scaling_config is not None:
        assert cfg.train_config is not None and cfg.train_config.env["cluster"] == cfg.cluster


def test_wrong_key_names_path_line_and_allowed_keys(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """\
        name: typo
        cluster: small
        schedulers: [fifo]
        train:
          env: {num_agents: 4}
          ppo:
            iterations: 2
            learning_rate: 0.001
        """,
    )
    with pytest.raises(ExperimentConfigError) as err:
        load_experiment_config(path)
    msg = str(err.value)
    assert f"{path}, line 8" in msg and "train.ppo.learning_rate" in msg
    assert "allowed keys here:" in msg and "lr" in msg and "minibatch_size" in msg

    path = _write(tmp_path, "name: x\nschedulerz: [fifo]\n")
    with pytest.raises(
        ExperimentConfigError,
        match=r"line 2: schedulerz: unknown key; did you mean 'schedulers'\? allowed keys here: .*schedulers",
    ):
        load_experiment_config(path)


@pytest.mark.parametrize(
    ("patch", "fragments"),
    [
        ({"interference": "exact"}, ["interference:", "'exact' is not one of none, oracle, learned"]),
        ({"schedulers": ["fifo", "fastest"]}, ["schedulers.1:", "unknown scheduler 'fastest'", "tiresias", "marl"]),
        ({"schedulers": ["fifo", "marl"]}, ["schedulers.1:", "add a train section"]),
        ({"baselines": ["srtf"]}, ["baselines.0:", "not among schedulers: fifo, sjf"]),
        ({"seeds": "1,2"}, ["seeds:", "expected a list"]),
        ({"seeds": 0}, ["seeds:", "expected a list, got 0; one item is a list too: [0]"]),
        ({"ray": {"num_cpus": 0}}, ["ray.num_cpus:", "must be >= 1"]),
        ({"workload": "trace.csv"}, ["workload:", "a file needs its kind in front", "philly:trace.csv"]),
        ({"workload": "helios:trace.csv"}, ["workload:", "unknown kind 'helios'", "synthetic:N_JOBS", "philly:PATH"]),
        ({"train": {**TINY_TRAIN, "env": {"load": [1.0, 0.5]}}}, ["train.env.load:", "load must be a number or [low"]),
        ({"train": {**TINY_TRAIN, "env": {"load": "high"}}}, ["train.env.load:", "expected a number or [low, high]"]),
        ({"train": {**TINY_TRAIN, "env": {"window_days": "half"}}}, ["train.env.window_days:", "got 'half'"]),
        (
            {"train": {**TINY_TRAIN, "ppo": {"num_envs_per_env_runner": 0}}},
            ["train.ppo.num_envs_per_env_runner:", "must be an integer >= 1"],
        ),
        ({"train": {**TINY_TRAIN, "agent": "dl3"}}, ["train.agent:", "'dl3' is not an agent marlsched trains"]),
        ({"train": {**TINY_TRAIN, "agent": "topdrl"}}, ["train.ppo:", "unknown key", "evaluation"]),
        ({"train": {"agent": "rounds", "algo": "es", "dayz": 1}}, ["train.dayz:", "unknown key", "days"]),
        ({"train": {"agent": "rounds", "algo": "pg"}}, ["train.algo:", "trains with algo es, dagger, not 'pg'"]),
        (
            {"train": {"agent": "priority", "algo": "dagger"}, "schedulers": ["marl", "marl-warm-start"]},
            ["schedulers.1:", "untrained network of the priority agents this run trains with PPO"],
        ),
        ({"train": {**TINY_TRAIN, "critic": {}}}, ["train.critic:", "unknown key", "ppo"]),
        ({"train": {**TINY_TRAIN, "env": {"cluster": "dc-1k"}}}, ["train.env.cluster:", "must equal"]),
        (
            {"train": {**TINY_TRAIN, "env": {"num_agents": 3}}},
            ["train.env.num_agents:", "small's 4 racks into 3 equal", "choose k among [1, 2, 4]"],
        ),
        ({"train": {"agent": "priority"}, "scaling": {"agents": [1, 3]}}, ["scaling.agents.1:", "allowed: [1, 2, 4]"]),
        ({"schedulers": ["marl-warm-start"]}, ["schedulers.0:", "untrained network", "add a train section"]),
        ({"train": {"agent": "priority", "ppo": {"epochs": 2}}}, ["train.ppo.epochs:", "unknown key", "num_epochs"]),
        ({"train": {"agent": "priority", "env": {"placng": True}}}, ["train.env.placng:", "unknown key", "placing"]),
        ({"scaling": {"agents": [1]}}, ["scaling:", "needs a train section"]),
        ({"train": {"agent": "priority"}, "scaling": {"policy": "best"}}, ["scaling.policy:", "best is not a policy"]),
        ({"workload": ..., "workloads": {}}, ["workloads:", "give at least one"]),
        ({"workload": ..., "workloads": {"a": "trace.csv"}}, ["workloads.a:", "KIND:PATH (e.g. philly:trace.csv"]),
        ({"workloads": {"a": "synthetic:30"}}, ["workload: give one workload (workload:) or labelled ones"]),
        ({"workload": "synthetic:fifty"}, ["workload:", "N_JOBS='fifty' is not an integer"]),
        ({"workload": "synthetic:50,lod=3"}, ["workload:", "unknown option 'lod=3'", "load=..."]),
        ({"workload": "synthetic:0"}, ["workload:", "no jobs"]),
        ({"workload": "philly:missing/philly.csv"}, ["workload:", "missing/philly.csv does not exist"]),
        ({"scheduler_options": {"srtf": {"policy": "srtf"}}}, ["scheduler_options.srtf:", "not among schedulers"]),
        (
            {"scheduler_options": {"sjf": {"policy": "tiresias", "thresholds": [-1]}}},
            ["scheduler_options.sjf:", "thresholds must be positive"],
        ),
        ({"scheduler_options": {"sjf": {"policy": "fifo", "speed": 2}}}, ["scheduler_options.sjf:", "speed"]),
        (  # a policy folder's options are its loader's; the scheduler names are not listed after them
            {"scheduler_options": {"sjf": {"policy": f"marl:{REPO}/experiments/policies/default-small", "nope": 1}}},
            ["scheduler_options.sjf:", "unknown option 'nope'; allowed: interference_inputs", "num_threads", "!fifo"],
        ),
        ({"scheduler_options": {"sjf": {"policy": "tiresiass"}}}, ["did you mean 'tiresias'", "!(policy 'tiresiass'"]),
        ({"published": {"fifo": {"w9": 100}}}, ["published.fifo.w9:", "or `mean`"]),
        ({"claims": {"srtf": "better"}}, ["claims.srtf:", "not among schedulers: fifo, sjf; list it there"]),
        ({"cluster": "smal"}, ["cluster: smal:", "neither a preset name nor a YAML file; did you mean 'small'?"]),
        (
            {"cluster": {"racks_per_pod": 2, "servers_per_rack": 2, "server": "pcie-4", "gpu_type": "X100"}},
            ["cluster.gpu_type: unknown GPU type 'X100'; did you mean 'V100'? allowed: K80"],
        ),
    ],
)
def test_bad_values_name_the_path_and_allowed_values(patch: dict, fragments: list[str]) -> None:
    config = {key: value for key, value in {**TINY, **patch}.items() if value is not ...}  # ...: the key left out
    with pytest.raises(ExperimentConfigError) as err:
        parse_experiment_config(config, "exp.yaml")
    for fragment in fragments:  # !TEXT: not said
        assert (fragment[1:] not in str(err.value)) if fragment.startswith("!") else (fragment in str(err.value))


def test_a_bad_cluster_file_is_named_before_ray_starts_or_the_folder_is_made(tmp_path: Path) -> None:
    """The experiment's cluster is built while the config is checked: its file's error, with that file's line,
    comes before Ray starts, and ``--out`` is not made (a rerun after the fix is not refused)."""
    from experiments.cli import main

    cluster = _write(
        tmp_path, "pods: 1\nrack_per_pod: 2\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: V100\n", "c.yaml"
    )
    config = _write(tmp_path, yaml.safe_dump({**TINY, "cluster": str(cluster)}), "exp.yaml")
    with pytest.raises(ExperimentConfigError) as err:
        load_experiment_config(config)
    line = next(i for i, text in enumerate(config.read_text().splitlines(), 1) if text.startswith("cluster:"))
    assert str(err.value).startswith(f"{config}, line {line}: cluster: {cluster}, line 2: rack_per_pod: unknown key;")
    assert main(["run", str(config), "--out", str(tmp_path / "out")]) == 2 and not (tmp_path / "out").exists()


def test_train_section_extends_a_training_file(tmp_path: Path) -> None:
    base = _write(
        tmp_path, yaml.safe_dump({**TINY_TRAIN, "name": "base", "ppo": {"iterations": 7, "lr": 0.01}}), "t.yaml"
    )
    cfg = parse_experiment_config(
        {**TINY, "schedulers": ["marl", "fifo"], "train": {"extends": str(base), "ppo": {"iterations": 2}}}
    )
    t = cfg.train_config
    assert t is not None and t.name == "base" and t.config["ppo"]["iterations"] == 2 and t.config["ppo"]["lr"] == 0.01
    assert t.env["cluster"] == "small" and t.env["workload"] == "synthetic:30,load=0.9"
    assert cfg.to_dict()["train"]["ppo"]["iterations"] == 2
    assert parse_experiment_config(cfg.to_dict()).to_dict() == cfg.to_dict()  # the saved copy reads back the same


@pytest.mark.slow
def test_run_trains_placing_priority_agents_beside_their_warm_start(
    ray_shared, tmp_path: Path, traces_dir: Path
) -> None:
    """The quickstart's shape: ``train: {agent: priority}`` trains the placing agents; ``marl-warm-start`` is
    the same network untrained, which is QSSF with each job on its fastest type, moved up past the margin."""
    import numpy as np

    from cluster_sim.build import build_simulator
    from experiments.run import run_experiment
    from experiments.tasks import task_id
    from marl.env.priority_agents import PriorityAgents

    philly = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel"
    start = HELD_OUT_START + 4 * DAY  # a held-out day (2017-11-05: 243 jobs)
    workload = window_spec(philly, start, start + DAY, 0.9)
    migrate = float(np.log(1.2))
    cfg = parse_experiment_config(
        {
            "name": "placing", "cluster": "small-hetero", "workload": workload, "interference": "none",
            "restart_cost": 30, "seeds": [0], "schedulers": ["marl", "marl-warm-start", "qssf@any"],
            "baselines": ["marl-warm-start"], "timeline_points": 50,
            "train": {
                "agent": "priority",
                "env": {"trace": philly, "train_start": 2_592_000, "train_end": 3_000_000, "window_days": 0.25,
                        "placing": True, "migrate": migrate, "interference": "none", "interference_data": None},
                "model": {"hidden": 16},
                "ppo": {"iterations": 1, "train_batch_size": 200, "minibatch_size": 100, "num_epochs": 1,
                        "num_env_runners": 0, "snapshot_every": 0},
            },
        },
        "placing.yaml",
    )  # fmt: skip
    assert cfg.train_config.env["cluster"] == "small-hetero"  # inherited from the experiment
    out = tmp_path / "out"
    logs: list[str] = []
    assert run_experiment(cfg, out, log=logs.append)["tasks_run"] == 3
    assert any("priority agents, PPO" in line for line in logs)
    for folder in ("policy", "warm_start"):
        meta = json.loads((out / "train" / folder / "metadata.json").read_text())
        assert meta["placing"] and meta["agents"]["migrate"] == migrate and meta["agents"]["num_agents"] == 4
    report = (out / "report.md").read_text()
    assert "| marl |" in report and "vs marl-warm-start" in report and "4 priority agents" in report
    gain = (avg_jct_of := lambda n: json.loads((out / "tasks" / task_id(n, 0) / "metrics.json").read_text())[
        "avg_jct"])("marl") / avg_jct_of("marl-warm-start") - 1  # fmt: skip
    assert f"paired on the same 1 run: average JCT {100 * gain:+.1f}% ± 0.0%" in report  # what training added
    if gain:  # the sign said in words (the improvement tables give reductions, + for better)
        words = "longer, worse" if gain > 0 else "shorter, better"
        said = f"± 0.0% ({words} (the tables' reduction: {-100 * gain + 0.0:+.1f}%); better in {int(gain < 0)} of 1"
        assert said in report  # and the figure the improvement tables give, for the same pair
    assert "Every workload lies outside the training span: held out." in report
    from experiments.report import _held_out

    inside = cfg.to_dict() | {"workload": window_spec(philly, 2_900_000, 2_900_000 + DAY, 0.9)}
    assert _held_out(parse_experiment_config(inside, "in.yaml")).startswith("Not held out:")
    # a select stage's windows chose what ships: a workload among them is not held out either
    selecting = cfg.to_dict()
    selecting["train"] = {**selecting["train"], "select": {"days": 2, "stride": 8, "load": 0.5}}
    select_day = window_spec(philly, PERIODS["select"].start_s + DAY, PERIODS["select"].start_s + 2 * DAY, 0.9)
    assert _held_out(parse_experiment_config(selecting, "s.yaml")).startswith("Every workload lies outside the train")
    assert _held_out(parse_experiment_config(selecting | {"workload": select_day}, "s.yaml")) == (
        f"Not held out: {select_day} overlaps the select span."
    )

    def avg_jct(name: str) -> float:
        return json.loads((out / "tasks" / task_id(name, 0) / "metrics.json").read_text())["avg_jct"]

    reference = PriorityAgents(None, num_agents=4, hysteresis=float(np.log(31.0)), migrate=migrate)
    sim = build_simulator("small-hetero", workload, seed=0, interference="none", restart_cost=30.0)
    assert avg_jct("marl-warm-start") == float(sim.run(reference).jct.mean())  # bit for bit
    assert avg_jct("qssf@any") > avg_jct("marl-warm-start")  # the type choice matters in this window
    assert run_experiment(cfg, out, log=logs.append)["tasks_run"] == 0  # trained once, kept


def test_a_train_section_trains_in_the_experiments_simulation_where_it_says_nothing(traces_dir: Path) -> None:
    """The cluster and interference (with its measurements) a ``train:`` section leaves out are the experiment's,
    for any agent: the policy is trained in the simulation it is compared in. What the section names stays."""
    gavel = f"gavel:{traces_dir}/gavel/simulation_throughputs.json"
    experiment = {**TINY, "cluster": "small-hetero", "interference": "oracle", "interference_data": gavel,
                  "schedulers": ["fifo", "marl"]}  # fmt: skip
    rounds = {"agent": "rounds", "algo": "dagger", "windows": 1, "days": 0.5}
    got = parse_experiment_config({**experiment, "train": rounds}, "r.yaml").train_config.settings
    assert (got.cluster, got.interference, got.interference_data) == ("small-hetero", "oracle", gavel)
    got = parse_experiment_config({**experiment, "train": {**rounds, "interference": "none"}}, "r.yaml")
    assert (got.train_config.settings.interference, got.train_config.settings.interference_data) == ("none", None)
    # an experiment without interference leaves the section's default (the priority agents' DAgger needs one)
    dagger = {"agent": "priority", "algo": "dagger", "interference_data": gavel}
    got = parse_experiment_config({**experiment, "interference": "none", "train": dagger}, "d.yaml")
    assert got.train_config.settings.interference == "oracle"
    ppo = parse_experiment_config({**experiment, "train": {"agent": "priority", "env": {"window_days": 0.5}}}, "p.yaml")
    env = ppo.train_config.env
    assert (env["cluster"], env["interference"], env["interference_data"]) == ("small-hetero", "oracle", gavel)


def test_run_trains_any_agent_its_train_section_names(ray_shared, tmp_path: Path, traces_dir: Path) -> None:
    """``train: {agent: priority, algo: dagger, ...}``: the one framework's loop trains it inside the run (the
    policy in ``train/policy``), ``marl`` is evaluated beside the heuristics, and the report says what trained it."""
    from experiments.run import run_experiment

    cfg = parse_experiment_config(
        {
            **TINY, "schedulers": ["fifo", "marl"],
            "train": {
                "agent": "priority", "algo": "dagger",
                "trace": f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv",
                "interference_data": f"gavel:{traces_dir}/gavel/simulation_throughputs.json",
                "train_start": HELD_OUT_START - 1.5 * DAY, "train_end": HELD_OUT_START, "days": 1.0, "stride": 0.5,
                "record_every": 2, "hidden": 8, "epochs": 2, "batch": 64, "dagger_rounds": 0, "workers": 1,
            },
        },
        "dagger.yaml",
    )  # fmt: skip
    assert cfg.train_config.to_dict()["algo"] == "dagger"
    out = tmp_path / "out"
    logs: list[str] = []
    assert run_experiment(cfg, out, log=logs.append)["tasks_run"] == 6
    assert any("training: starting priority-dagger" in line for line in logs)
    meta = json.loads((out / "train" / "policy" / "metadata.json").read_text())
    assert meta["agent"] == "priority" and meta["provenance"]["command"] == "marlsched run dagger.yaml"
    report = (out / "report.md").read_text()
    assert "| marl |" in report and "agent `priority` with algo `dagger`" in report
    assert run_experiment(cfg, out, log=logs.append)["tasks_run"] == 0  # trained once, kept


@pytest.mark.slow
def test_scaling_runs_one_policy_file_at_every_agent_count(ray_shared, tmp_path: Path) -> None:
    """The scaling experiment: the shipped priority policy at K = 1 and 4 agents, rollouts on RLlib's
    EnvRunners and one evaluation episode per K, the heuristics as reference lines; a rerun measures nothing."""
    from experiments.run import run_experiment

    cfg = parse_experiment_config(
        {
            **TINY, "workload": "synthetic:60,load=50", "seeds": [0], "schedulers": ["fifo", "qssf"],
            "train": {"agent": "priority", "env": {"workload": "synthetic:30,load=0.9", "interference": "none",
                                                   "interference_data": None}},
            "scaling": {"agents": [1, 4], "policy": str(REPO / "experiments/policies/philly-small-dagger"),
                        "env_runners": 1, "rollout_steps": 20, "rollout_workload": "synthetic:30,load=0.9"},
        },
        "scaling.yaml",
    )  # fmt: skip
    out = tmp_path / "out"
    logs: list[str] = []
    run_experiment(cfg, out, log=logs.append)
    assert any(line.startswith("scaling: measuring 2 agent count(s) (1, 4)") for line in logs)  # said before minutes
    assert "scaling: [2/2] 4 agents ..." in logs
    rows = [json.loads((out / "scaling" / f"agents_{k:03d}.json").read_text()) for k in (1, 4)]
    for k, row in zip((1, 4), rows, strict=True):
        assert row["agents"] == k and row["gpus_per_agent"] == 256 // k
        assert row["jobs_completed"] == row["jobs_total"] == 60 and row["policy_rounds"] > 0
        assert row["rollout_env_steps"] >= 20 and row["rollout_agent_steps_per_s"] > 0
        assert row["decision_ms"] == pytest.approx(row["round_ms"] / k)
    report = (out / "report.md").read_text()
    assert "## Agent-count scaling" in report and "philly-small-dagger" in report and "| preempt/job |" in report
    assert f"| {rows[1]['avg_jct']:.0f} | {rows[1]['preemptions_per_job']:.2f} | 60/60 |" in report
    assert (out / "plots" / "scaling.png").is_file()
    logs.clear()
    run_experiment(cfg, out, log=logs.append)
    assert "scaling: 1 agents measured before" in logs and "scaling: 4 agents measured before" in logs


# ---------------------------------------------------------------------------------------------- resume


class _Killed(Exception):
    """Raised from a run's log: the run stops there as a killed one would."""


def test_what_the_simulations_warn_of_reaches_the_user_and_the_report(ray_shared, tmp_path: Path, capsys) -> None:
    """A task's warnings (here a policy trained on `small` run on `small-hetero`) are printed by the driver once,
    not lost in a Ray worker, and listed in the report before the figures; the results table prints even when
    the progress lines do not (``--quiet``)."""
    from experiments.run import run_experiment

    policy = f"marl:{REPO / 'experiments/policies/philly-small-dagger'}"
    raw = {**TINY, "cluster": "small-hetero", "seeds": [1, 2], "schedulers": ["fifo", policy], "baselines": ["fifo"]}
    run_experiment(parse_experiment_config(raw, "warn.yaml"), tmp_path / "out", log=lambda s: None)
    said = "trained on small (256 V100), run on small-hetero (96 V100, 80 P100, 80 K80)"
    printed = capsys.readouterr()
    assert printed.err.count(said) == 1
    assert "avg JCT" in printed.out and "fifo" in printed.out  # the results table, with no progress log (--quiet)
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.index("## Warnings") < report.index("## Metrics") and f"- {policy}: {said}" in report


def test_a_run_stopped_on_a_ray_that_outlives_it_cancels_its_unfinished_tasks(ray_shared, tmp_path: Path) -> None:
    """A run stopped by an error (or Ctrl-C in a notebook) on a Ray it did not start cancels what it had queued:
    the CPUs are free within moments instead of computing, for seconds, results nobody collects."""
    import time

    from experiments.run import run_experiment

    ray = ray_shared
    raw = {**TINY, "workload": "synthetic:6000,window_load=1.1", "seeds": list(range(32)), "schedulers": ["tiresias"],
           "baselines": []}  # fmt: skip
    cfg = parse_experiment_config(raw, "slow.yaml")  # 32 tasks of 1 to 2 s on 2 CPUs: 20 s or more left at the stop

    def stopped_after_the_first(line: str) -> None:
        if line.startswith("[1/32]"):
            raise _Killed

    with pytest.raises(_Killed):
        run_experiment(cfg, tmp_path / "out", log=stopped_after_the_first)
    # a few seconds' grace for a busy machine (the worker interrupted, the task's CPU returned): far less than
    # the queued tasks would hold them
    total, deadline = ray.cluster_resources()["CPU"], time.monotonic() + 6.0
    while ray.available_resources().get("CPU", 0) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.available_resources().get("CPU", 0) == total, "tasks of the stopped run still hold CPUs"


def test_a_stalled_scheduler_is_named_the_others_run_and_the_folder_takes_the_config_without_it(
    ray_shared, tmp_path: Path, capsys
) -> None:
    """A scheduler that cannot finish a workload (one that starts nothing) stalls its runs alone: each is named with
    the reason, the other schedulers' runs finish and are kept, and the command says what to do (status 1, no
    report); the same folder then takes the config without that scheduler and reuses every run."""
    from cluster_sim.simulator import SimulationStalled
    from experiments.cli import main
    from experiments.run import run_experiment

    never = tmp_path / "never.py"
    never.write_text(
        "class Never:\n    name = 'never'\n\n    def reset(self, view):\n        pass\n\n"
        "    def schedule(self, view):\n        return []\n"
    )
    raw = {**TINY, "seeds": [1, 2], "schedulers": ["fifo", f"{never}:Never", "sjf"]}
    out = tmp_path / "out"
    said = r"2 of 6 runs stalled \(.*never.py:Never; each said above\); the other 4 are written in .*Take the stalled"
    with pytest.raises(SimulationStalled, match=said):
        run_experiment(parse_experiment_config(raw, "stall.yaml"), out, log=lambda s: None)
    assert capsys.readouterr().err.count("never.py:Never seed ") == 2
    assert sorted(p.name for p in (out / "tasks").iterdir()) == ["fifo__seed1", "fifo__seed2", "sjf__seed1",
                                                                "sjf__seed2"]  # fmt: skip
    assert not (out / "report.md").exists()
    config = _write(tmp_path, yaml.safe_dump(raw), "stall.yaml")  # the command: one line, status 1
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 1
    assert "marlsched run: 2 of 2 runs stalled" in capsys.readouterr().err  # the 4 others were reused
    kept = parse_experiment_config({**raw, "schedulers": ["fifo", "sjf"]}, "stall.yaml")
    assert run_experiment(kept, out, log=lambda s: None)["tasks_run"] == 0
    report = (out / "report.md").read_text()
    assert "| sjf |" in report and "## Left out" in report  # the stalled attempts are kept, and said
    assert re.search(r"- `.*never.py:Never` seed 1: simulation stalled at t=", report)
    state = json.loads((out / "state.json").read_text())
    assert [len(i.get("stalled", [])) for i in state["invocations"]] == [2, 2, 0]


@pytest.mark.slow
def test_interrupted_run_resumes_without_recomputing_finished_work(ray_shared, tmp_path: Path) -> None:
    from experiments.run import run_experiment

    train = {**TINY_TRAIN, "ppo": {**TINY_TRAIN["ppo"], "iterations": 2}}
    cfg = parse_experiment_config({**TINY, "schedulers": ["marl", "fifo", "sjf"], "train": train}, "tiny.yaml")
    out = tmp_path / "out"
    logs: list[str] = []

    def killed_in_iteration_2(line: str) -> None:
        logs.append(line)
        if line.startswith("iter   2"):
            raise _Killed

    # The first invocation is killed while training: it leaves the checkpoint of iteration 1, and no policy.
    with pytest.raises(_Killed):
        run_experiment(cfg, out, log=killed_in_iteration_2)
    assert any(line.startswith("training: starting") for line in logs)
    assert (out / "train" / "checkpoint" / "progress.json").is_file() and not (out / "train" / "policy").exists()
    first = (out / "train" / "progress.csv").read_text().splitlines()
    logs.clear()
    summary = run_experiment(cfg, out, log=logs.append)
    assert summary == {"out": str(out), "tasks_run": 9, "tasks_reused": 0}
    assert f"resuming after iteration 1 from {out / 'train' / 'checkpoint'}" in logs
    progress = (out / "train" / "progress.csv").read_text().splitlines()
    assert len(progress) == 3 and progress[1] == first[1]  # iteration 1 kept, iteration 2 trained again
    assert progress[2].split(",")[2] == str(2 * TINY_TRAIN["ppo"]["train_batch_size"])  # the step count goes on
    meta = json.loads((out / "train" / "policy" / "metadata.json").read_text())
    assert meta["trained"]["iterations"] == 2 and meta["trained"]["resumed_after"] == [1]
    assert not (out / "train" / "checkpoint").exists()  # the policy is complete: nothing left to resume
    for f in ("config.yaml", "metrics.csv", "report.md", "plots/jct_cdf.png", "plots/timeline.png",
              "plots/learning_curve.png", "train/policy/metadata.json"):  # fmt: skip
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    report = (out / "report.md").read_text()
    assert "| marl |" in report and "vs fifo" in report and " ± " in report
    csv_lines = (out / "metrics.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + 9 and csv_lines[1].startswith("marl,,1,")

    # "Kill" the run: one task's results are gone, another was being written (a stale temporary folder).
    tasks = out / "tasks"
    stamps = {p.name: (p / "metrics.json").stat().st_mtime_ns for p in tasks.iterdir()}
    shutil.rmtree(tasks / "sjf__seed2")
    shutil.move(tasks / "fifo__seed3", tasks / ".fifo__seed3.tmp")
    (out / "report.md").unlink()

    logs.clear()
    summary = run_experiment(cfg, out, log=logs.append)
    assert summary["tasks_run"] == 2 and summary["tasks_reused"] == 7
    assert "evaluation: 9 runs (7 finished before, 2 to run)" in logs
    assert f"training: finished before ({out / 'train'})" in logs
    for name, stamp in stamps.items():
        now = (tasks / name / "metrics.json").stat().st_mtime_ns
        assert (now == stamp) == (name not in ("sjf__seed2", "fifo__seed3")), name
    assert not list(tasks.glob(".*"))
    assert (out / "report.md").is_file()
    state = json.loads((out / "state.json").read_text())
    assert [i["tasks_run"] for i in state["invocations"]] == [9, 2]

    # A finished run started again recomputes nothing; another experiment in the same folder is refused, naming
    # what differs; the same one with a seed more runs that seed alone.
    assert run_experiment(cfg, out, log=logs.append)["tasks_run"] == 0
    other = parse_experiment_config({**TINY, "seeds": [4]})
    with pytest.raises(ValueError, match=r"holds another experiment: its config.yaml differs from .* in seeds, "
                                         r"schedulers, train; only baselines, scaling.agents, schedulers, seeds may "
                                         r"change"):  # fmt: skip
        run_experiment(other, out, log=logs.append)
    more = parse_experiment_config({**TINY, "schedulers": cfg.schedulers, "train": train, "seeds": [1, 2, 3, 4]},
                                   "tiny.yaml")  # fmt: skip
    assert run_experiment(more, out, log=logs.append)["tasks_run"] == 3  # marl, fifo and sjf on seed 4
    # a folder where nothing was measured yet (a start that failed after writing its config) takes a corrected one
    failed = tmp_path / "failed"
    failed.mkdir()
    shutil.copyfile(out / "config.yaml", failed / "config.yaml")
    assert run_experiment(other, failed, log=logs.append)["tasks_run"] == 2  # fifo and sjf on seed 4


def test_published_figures_rounded_by_their_paper_say_whether_ours_lies_in_their_interval() -> None:
    """``published_step``: a paper's 0.6 h stands for 0.55-0.65 h; each cell says whether ours lies in it, and a
    step that is no number of seconds is refused at its key."""
    from experiments.report import _published_table

    base = {"name": "s", "cluster": "small", "workload": "synthetic:10", "schedulers": ["sia", "gavel"],
            "baselines": ["sia"], "published": {"sia": {"mean": 2160}, "gavel": {"mean": 6840}}}  # fmt: skip
    cfg = parse_experiment_config({**base, "published_step": 360})
    label = next(iter(cfg.workload_specs))
    rows = {"sia": {(label, 0): {"avg_jct": 2033.0}}, "gavel": {(label, 0): {"avg_jct": 7200.0}}}
    table = "\n".join(_published_table(cfg, rows))
    assert "rounded to 360 s" in table
    assert "| sia | 2033 / 2160 (0.94; in 1980–2340) |" in table
    assert "| gavel | 7200 / 6840 (1.05; outside 6660–7020) |" in table
    assert "in 1980" not in "\n".join(_published_table(parse_experiment_config(base), rows))
    with pytest.raises(ValueError, match=r"published_step.*rounding step in seconds"):
        parse_experiment_config({**base, "published_step": -360})


def test_the_report_says_which_workloads_share_part_of_the_trace(traces_dir: Path) -> None:
    """Windows that overlap run the same jobs: the report's header names each such pair and the days they share
    (other traces' windows and undated workloads are not compared); windows that only touch are independent."""
    from experiments.report import _overlapping_workloads

    philly = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv"
    start = HELD_OUT_START

    def cfg(**windows: tuple[float, float]):
        specs = {k: window_spec(philly, start + a * DAY, start + b * DAY, 0.3) for k, (a, b) in windows.items()}
        specs["synthetic"] = "synthetic:100"
        return parse_experiment_config({"name": "w", "cluster": "small", "workloads": specs, "schedulers": ["fifo"]})

    assert _overlapping_workloads(cfg(a=(0, 2), b=(2, 4), c=(5, 6))) == []
    [line, blank] = _overlapping_workloads(cfg(a=(0, 2), b=(1.5, 4), c=(3, 6)))
    assert line.startswith("Overlapping windows: a and b (0.5 d); b and c (1 d) share part of the trace") and not blank
    many = _overlapping_workloads(cfg(**{f"w{k}": (k, k + 7) for k in range(6)}))[0]
    assert "w0 and w1 (6 d); w0 and w2 (5 d); w0 and w3 (4 d); and 12 more pairs share" in many


def test_several_workloads_with_scheduler_options_and_published_figures(
    ray_shared, tmp_path: Path, traces_dir: Path
) -> None:
    """A run over two workloads: every scheduler on each, a label standing for a policy with its own
    settings, metrics.csv with a workload column, and the report's published-beside-ours table."""
    import csv

    from experiments.run import run_experiment

    d = traces_dir / "pollux-osdi21" / "workloads"
    if not (d / "workload-1.csv").is_file():
        pytest.skip("Pollux workloads not present")
    cfg = parse_experiment_config({
        "name": "two", "cluster": "pollux-testbed", "interference": "none", "restart_cost": 30, "start_cost": 30,
        "workloads": {"w1": f"pollux:{d}/workload-1.csv,max_jobs=12", "w2": f"pollux:{d}/workload-2.csv,max_jobs=12"},
        "seeds": [0], "schedulers": ["tiresias", "pollux"], "baselines": ["tiresias"], "timeline_points": 20,
        "scheduler_options": {"tiresias": {"policy": "tiresias-pollux", "thresholds": [3600.0]}},
        "published": {"tiresias": {"w1": 1000, "w2": 2000}, "pollux": {"mean": 1500}},
        "published_source": "made-up figures",
        "claims": {"pollux": "a made-up claim: -50% vs Tiresias"},
    })  # fmt: skip
    out = tmp_path / "out"
    assert run_experiment(cfg, out, log=lambda s: None)["tasks_run"] == 4
    rows = list(csv.DictReader((out / "metrics.csv").open()))
    assert [(r["scheduler"], r["workload"]) for r in rows] == [
        ("tiresias", "w1"), ("tiresias", "w2"), ("pollux", "w1"), ("pollux", "w2")
    ]  # fmt: skip
    jct = {(r["scheduler"], r["workload"]): float(r["avg_jct"]) for r in rows}
    report = (out / "report.md").read_text()
    assert "## Beside the published figures" in report and "made-up figures" in report
    from marl.deploy.policy_files import code_version

    recorded = json.loads((out / "state.json").read_text())["invocations"][-1]["provenance"]["code_version"]
    assert f"Computed by marlsched at code version `{recorded}` on " in report and recorded == code_version()
    ray = json.loads((out / "state.json").read_text())["invocations"][-1]["ray"]
    assert f"({ray['nodes']} node(s), {ray['CPU']:g} CPUs when it ended)" in report
    assert f"{jct['tiresias', 'w2']:.0f} / 2000 ({jct['tiresias', 'w2'] / 2000:.2f})" in report
    pollux_mean = (jct["pollux", "w1"] + jct["pollux", "w2"]) / 2
    assert f"{pollux_mean:.0f} / 1500 ({pollux_mean / 1500:.2f})" in report
    # jobs done as finished of submitted over all runs (12 + 12), not a mean over workloads of other sizes
    assert "jobs done (all runs)" in report and report.count(" 24/24 |") == 2
    # each workload's own figures, and the paired reduction against the baseline on it
    assert "## Per workload" in report and "| scheduler | w1 | w2 |" in report
    gain = {w: 100 * (jct["tiresias", w] - jct["pollux", w]) / jct["tiresias", w] for w in ("w1", "w2")}
    assert (
        f"| pollux | {jct['pollux', 'w1']:.0f} ({gain['w1']:+.1f}%) | {jct['pollux', 'w2']:.0f} ({gain['w2']:+.1f}%) |"
        in report
    )
    assert f"| tiresias | {jct['tiresias', 'w1']:.0f} | {jct['tiresias', 'w2']:.0f} |" in report
    # the paper's claim beside our paired improvement, in the average-JCT table only
    assert report.count("the paper's claim") == 1
    assert next(line for line in report.splitlines() if line.startswith("| pollux |") and "made-up claim" in line)
    # the paired verdict as a plot: pollux's reduction against the first baseline, tiresias
    assert (out / "plots" / "paired_avg_jct.png").stat().st_size > 1000 and "plots/paired_avg_jct.png" in report
    # each workload's timeline: the first's as timeline.png, the second's beside it
    assert (out / "plots" / "timeline_w2.png").stat().st_size > 1000 and "(w2, seed 0)" in report
    assert "(w1, seed 0)" in report and not (out / "plots" / "timeline_w1.png").exists()
    # the label's options reached the scheduler: one queue threshold at 1 GPU-hour, not Pollux's 16
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    sim = build_simulator("pollux-testbed", cfg.workloads["w1"], restart_cost=30.0, start_cost=30.0)
    r = sim.run(get_policy("tiresias-pollux", thresholds=[3600.0]))
    assert r.metrics()["avg_jct"] == pytest.approx(jct["tiresias", "w1"], rel=1e-12)


# ---------------------------------------------------------------------------------------------- cluster


@pytest.fixture(scope="module")  # one cluster for the module's tests (conftest.BUILT_ONCE: one worker)
def two_node_cluster():
    from experiments.local_cluster import local_cluster, ray_command

    if not ray_command().is_file():
        pytest.skip(f"no ray command next to {sys.executable}")
    temp = Path(tempfile.gettempdir())
    before = set(temp.glob("marlsched-ray-*"))
    with local_cluster(nodes=2, cpus_per_node=1) as (address, env):
        yield address, env
    assert set(temp.glob("marlsched-ray-*")) <= before  # stopped, it leaves no folder behind
    assert not pids_naming(address)  # nor a process (the head's Ray client server included)


def pids_naming(address: str) -> list[int]:
    """Processes whose command line names the GCS port of the cluster at ``address``."""
    from experiments.local_cluster import pids_mentioning

    return pids_mentioning(f":{address.rsplit(':', 1)[1]} ")


def test_a_command_runs_on_a_throwaway_local_cluster_that_stops_what_it_started(capfd) -> None:
    """``python -m experiments.local_cluster -- COMMAND``: the command runs with ``RAY_ADDRESS`` naming the new
    cluster, its exit status is the helper's, and afterwards no process of that cluster is left, also where the
    helper is terminated (SIGTERM) while the command runs."""
    from experiments.local_cluster import main, ray_command

    if not ray_command().is_file():
        pytest.skip(f"no ray command next to {sys.executable}")
    with pytest.raises(SystemExit):
        main(["--nodes", "1"])
    assert "give the command to run after --" in capfd.readouterr().err
    probe = "import os, sys; print('at', os.environ['RAY_ADDRESS']); sys.exit(3)"
    assert main(["--nodes", "1", "--", sys.executable, "-c", probe]) == 3
    address = re.search(r"^at (127\.0\.0\.1:\d+)$", capfd.readouterr().out, re.M)[1]
    assert not pids_naming(address)
    # terminated (`timeout`, a batch scheduler) as when interrupted: the command is killed, the nodes stopped
    import signal

    term = "import os, signal, time; print('at', os.environ['RAY_ADDRESS'], flush=True); "
    term += "os.kill(os.getppid(), signal.SIGTERM); time.sleep(60)"
    handler = signal.getsignal(signal.SIGTERM)
    assert main(["--nodes", "1", "--", sys.executable, "-c", term]) == 128 + signal.SIGTERM
    address = re.search(r"^at (127\.0\.0\.1:\d+)$", capfd.readouterr().out, re.M)[1]
    assert not pids_naming(address) and signal.getsignal(signal.SIGTERM) is handler


@pytest.mark.slow
def test_run_on_a_two_node_local_cluster(two_node_cluster, tmp_path: Path) -> None:
    address, env = two_node_cluster
    config = _write(tmp_path, yaml.safe_dump({**TINY, "seeds": [1, 2, 3, 4]}), "tiny.yaml")
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(VENV_BIN / "marlsched"), "run", str(config), "--address", address, "--out", str(out)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"ray: cluster at {address}, 2 node(s), 2 CPUs" in proc.stdout
    assert "[8/8] " in proc.stdout and "report.md (8 runs done now, 0 reused)" in proc.stdout
    state = json.loads((out / "state.json").read_text())
    assert state["invocations"][0]["ray"] == {"address": address, "nodes": 2, "CPU": 2.0}
    given = ["marlsched", "run", str(config), "--address", address, "--out", str(out)]
    assert state["invocations"][0]["provenance"]["command"] == shlex.join(given)  # the command as given
    tasks = [json.loads(p.read_text()) for p in sorted((out / "tasks").glob("*/metrics.json"))]
    assert len(tasks) == 8 and all(t["jobs_completed"] == 40 for t in tasks)
    assert len({t["node_id"] for t in tasks}) == 2  # both nodes ran simulations
    assert (out / "report.md").is_file() and (out / "plots" / "jct_cdf.png").stat().st_size > 1000
    # --address auto (RAY_ADDRESS, as inside `ray job submit`): the cluster it found is said and recorded by address
    proc = subprocess.run(
        [str(VENV_BIN / "marlsched"), "run", str(config), "--address", "auto", "--set", "seeds=[5]", "--out", str(out)],
        env={**env, "RAY_ADDRESS": address}, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads((out / "state.json").read_text())["invocations"][-1]["ray"]["address"]
    assert found.endswith(f":{address.rsplit(':', 1)[1]}")  # the same cluster, by the address Ray reports
    assert f"ray: cluster at {found} (auto), 2 node(s)" in proc.stdout


@pytest.mark.slow
def test_training_goes_on_on_the_head_when_the_worker_node_is_lost(two_node_cluster, tmp_path: Path) -> None:
    """``marlsched train --address``: PPO connects to the cluster (both nodes, its progress says) instead of
    starting its own Ray, with one EnvRunner on each node (1 CPU each); the worker node lost (its raylet and
    every process under it killed) after the first iteration: the head's runner fills every later batch, the
    run ends with its policy in OUT/policy, and the progress counts the lost runner and its dropped episode."""
    import csv

    from experiments.local_cluster import kill_node

    address, env = two_node_cluster
    ppo = {"iterations": 3, "num_env_runners": 2, "num_cpus_per_env_runner": 1, "train_batch_size": 128}
    config = _write(tmp_path, yaml.safe_dump({**TINY_TRAIN, "ppo": {**TINY_TRAIN["ppo"], **ppo}}), "ppo.yaml")
    out = tmp_path / "trained"
    proc = subprocess.Popen(
        [str(VENV_BIN / "marlsched"), "train", "--config", str(config), "--out", str(out), "--address", address,
         "--no-eval"],
        env={**env, "PYTHONUNBUFFERED": "1"}, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    killed: list[int] = []
    printed: list[str] = []
    for line in proc.stdout:
        printed.append(line)
        if line.startswith("iter   1 ") and not killed:
            killed = kill_node(address, 1)
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err[-3000:]
    assert killed and f"ray: cluster at {address}, 2 node(s), 2 CPUs" in "".join(printed)
    with open(out / "progress.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in rows] == [1, 2, 3]
    assert int(rows[0]["runner_failures"]) == 0 and int(rows[-1]["runner_failures"]) == 1
    assert int(rows[-1]["episodes_dropped"]) == 1
    assert (out / "policy" / "policy.pt").is_file()


def _finished_tasks(out: Path) -> int:
    """Task folders in place (a killed run may leave a half-written ``.ID.tmp`` folder, which is not finished)."""
    return sum(not p.parent.name.startswith(".") for p in (out / "tasks").glob("*/metrics.json"))


def _start_run(tmp_path: Path):
    """A real `marlsched run` (its own in-process Ray) of 12 tasks, once a task of this invocation is done."""
    import signal
    import subprocess
    import sys
    import time

    config = tmp_path / "slow.yaml"
    config.write_text(
        "name: slow\ncluster: small\nworkload: 'synthetic:1500,load=1.2'\ninterference: none\n"
        "seeds: [0, 1, 2, 3, 4, 5]\nschedulers: [fifo, tiresias]\nray: {num_cpus: 2}\n"
    )
    out = tmp_path / "out"
    before = _finished_tasks(out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "experiments.cli", "run", str(config), "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1],
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while _finished_tasks(out) <= before and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.2)
    assert proc.poll() is None, "the run finished before it could be interrupted: make it longer"
    return proc, out


@pytest.mark.slow
def test_a_killed_run_leaves_nothing_behind_and_ctrl_c_stops_the_next_one_cleanly(tmp_path: Path) -> None:
    """SIGKILL to `marlsched run`: every process it had started (Ray's raylet, GCS, agents, workers) is
    gone within seconds, the agents that outlive their raylet included. The same command resumes (what
    finished is reused); SIGINT then ends it with exit 130 and one line saying what was kept and how to
    resume, no traceback."""
    import signal
    import time

    import psutil

    proc, out = _start_run(tmp_path)
    started = psutil.Process(proc.pid).children(recursive=True)
    assert any("raylet" in p.name() for p in started)
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 20
    alive = started
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.3)
    assert not alive, [(p.pid, p.name()) for p in alive]
    done = _finished_tasks(out)

    proc, _ = _start_run(tmp_path)
    proc.send_signal(signal.SIGINT)
    stdout, err = proc.communicate(timeout=60)
    assert f"evaluation: 12 runs ({done} finished before, {12 - done} to run)" in stdout + err
    assert proc.returncode == 130, err[-3000:]  # what ended it otherwise
    assert "Traceback" not in err and "marlsched run: interrupted. What finished is kept in" in err, err
    assert done < _finished_tasks(out) < 12
    last = json.loads((out / "state.json").read_text())["invocations"][-1]  # the interrupted one, in the history
    assert last["interrupted"] and last["tasks_run"] == _finished_tasks(out) - done


def test_a_report_says_whether_a_policy_folders_own_windows_are_among_the_workloads(monkeypatch, tmp_path) -> None:
    """``marl:DIR`` among the schedulers: its metadata's training span and select windows are read, and a workload
    inside either is named in the report's header (default-hetero: trained before 2017-10-15, selected on
    2017-10-15..31)."""
    from experiments.report import _policy_folders_held_out

    monkeypatch.chdir(REPO)
    philly = "philly:../shared/traces/pollux-osdi21/traces/philly.csv"
    folder = "experiments/policies/default-hetero"
    raw = {
        "name": "x", "cluster": "small-hetero", "interference": "none", "seeds": [0],
        "schedulers": ["gavel-las", "mine"], "baselines": ["gavel-las"],
        "scheduler_options": {"mine": {"policy": f"marl:{folder}"}},
        "workloads": {"oct20": f"{philly},start=2017-10-20,end=2017-10-22",
                      "nov05": f"{philly},start=2017-11-05,end=2017-11-07"},
    }  # fmt: skip
    # a choice made by hand on the report windows (its metadata's chosen_on) holds them in too
    assert _policy_folders_held_out(parse_experiment_config(raw, "x.yaml")) == [
        f"`mine` ({folder}): Not held out: oct20 overlaps its select windows; nov05 overlaps the windows chosen on by "
        "hand (its decision layer and budget, after report figures).",
        "",
    ]
    # the same folder without that record: held out by what the loops recorded alone
    import shutil

    folder = str(tmp_path / "default-hetero")
    shutil.copytree(REPO / "experiments/policies/default-hetero", folder)
    meta = json.loads((Path(folder) / "metadata.json").read_text())
    del meta["chosen_on"]
    (Path(folder) / "metadata.json").write_text(json.dumps(meta))
    raw["scheduler_options"]["mine"]["policy"] = f"marl:{folder}"
    assert _policy_folders_held_out(parse_experiment_config(raw, "x.yaml")) == [
        f"`mine` ({folder}): Not held out: oct20 overlaps its select windows. nov05 lies outside its training span "
        "and its select windows: held out.",
        "",
    ]
    # workloads of another trace beside them, and the whole trace: each said, none hides the others
    raw["workloads"] |= {"lab": "philly:experiments/examples/lab_jobs.csv,start=2024-03-10,end=2024-03-13",
                         "whole": f"{philly},load=0.9"}  # fmt: skip
    assert _policy_folders_held_out(parse_experiment_config(raw, "x.yaml"))[0] == (
        f"`mine` ({folder}): Not held out: oct20 overlaps its select windows. nov05 lies outside its training span "
        "and its select windows: held out. whole reads the training trace without a window (start=, end=): not "
        "known to lie outside its training span and its select windows. lab comes from another trace than the one "
        "it trained on: held out by source."
    )
    for label in ("oct20", "lab", "whole"):
        raw["workloads"].pop(label)
    assert _policy_folders_held_out(parse_experiment_config(raw, "x.yaml"))[0].endswith(
        "Every workload lies outside its training span and its select windows: held out."
    )
    # the layouts the other loops record: ES (small-hetero: training starts, validation windows)
    raw["scheduler_options"]["mine"]["policy"] = "marl:experiments/policies/small-hetero"
    raw["workloads"]["oct28"] = f"{philly},start=2017-10-28,end=2017-10-29"
    assert _policy_folders_held_out(parse_experiment_config(raw, "x.yaml"))[0] == (
        "`mine` (experiments/policies/small-hetero): Not held out: oct28 overlaps its validation windows. nov05 lies "
        "outside its training span and its validation windows: held out."
    )


def test_a_report_on_mixed_gpus_names_the_heuristics_that_ignore_the_gpu_type(monkeypatch) -> None:
    """On a cluster of several GPU types, the heuristics placing at ``@any`` (the default) are named, with the
    type-aware form to compare; those that choose types (``@fastest``, Gavel, a policy folder) are not, and on
    one type nothing is said."""
    from experiments.report import _type_blind

    monkeypatch.chdir(REPO)
    cfg = load_experiment_config("experiments/configs/quickstart.yaml")
    said = _type_blind(cfg, list(cfg.schedulers))[1]
    assert said.startswith("`tiresias`, `gandiva`, `qssf@any` place jobs without regard to GPU type (`@any`, the "
                           "default) on this cluster of V100, P100, K80")  # fmt: skip
    assert "`tiresias@fastest` tries the fastest type with room first" in said
    assert _type_blind(parse_experiment_config({**TINY, "schedulers": ["fifo", "qssf"]}, "x.yaml"), ["fifo"]) == []


def test_a_report_gives_each_tenants_average_jct_under_each_scheduler(tmp_path: Path) -> None:
    """Workloads of several tenants: a row per tenant (most jobs first) of its finished jobs' average JCT under each
    scheduler, pooled over the runs, and the largest over the smallest; one tenant: no table."""
    from experiments.report import _tenant_table

    cfg = parse_experiment_config({**TINY, "seeds": [1, 2]}, "x.yaml")
    jobs = {
        "fifo": [("a", 100), ("a", 300), ("b", 50), ("b", "")],
        "sjf": [("a", 100), ("a", 100), ("b", 25), ("b", 75)],
    }
    specs = []
    for name, rows in jobs.items():
        for seed in (1, 2):
            folder = tmp_path / "tasks" / f"{name}-{seed}"
            folder.mkdir(parents=True)
            body = "".join(f"{i},{t},{j}\n" for i, (t, j) in enumerate(rows))
            (folder / "jobs.csv").write_text("id,tenant,jct\n" + body)
            specs.append({"id": folder.name, "scheduler": name})
    lines = _tenant_table(cfg, tmp_path, specs)
    assert lines[4:] == ["| tenant | jobs | `fifo` | `sjf` |", "|---|---:|---:|---:|", "| a | 4 | 200 | 100 |",
                         "| b | 4 | 50 | 50 |", "| largest / smallest | | 4.0x | 2.0x |", ""]  # fmt: skip
    for spec in specs:
        path = tmp_path / "tasks" / spec["id"] / "jobs.csv"
        path.write_text(path.read_text().replace(",b,", ",a,"))
    assert _tenant_table(cfg, tmp_path, specs) == []


def test_fewer_schedulers_on_the_command_line_take_their_options_and_figures_with_them(monkeypatch) -> None:
    """``--set schedulers=[pollux, gavel]`` on Sia's config: the options, published figures and baselines of the
    schedulers left out go with them (no error, and not "a changed setup"); in the file, an entry of an unlisted one
    is named with the fix."""
    monkeypatch.chdir(REPO)
    cfg = load_experiment_config("experiments/configs/sia_sosp23.yaml", sets=["schedulers=[pollux, gavel]"])
    assert cfg.schedulers == ["pollux", "gavel"] and not cfg.scheduler_options
    assert set(cfg.published) == {"pollux", "gavel"} and "changed" not in (cfg.published_source or "")
    assert cfg.baselines == ["pollux"]  # the file's baseline, among them
    cfg = load_experiment_config("experiments/configs/sia_sosp23.yaml", sets=["schedulers=[sia, tiresias]"])
    assert cfg.baselines == ["sia"]  # the file's baseline is not among them: the default (the first listed)
    given = ["schedulers=[sia, tiresias]", "baselines=[tiresias]"]
    assert load_experiment_config("experiments/configs/sia_sosp23.yaml", sets=given).baselines == ["tiresias"]
    raw = {**TINY, "scheduler_options": {"lazy": {"policy": "fifo"}}}
    with pytest.raises(ExperimentConfigError, match=r"scheduler_options.lazy: not among schedulers: fifo, sjf; list it "
                       "there, or remove its entry here"):  # fmt: skip
        parse_experiment_config(raw, "x.yaml")


def test_the_default_baseline_is_fifo_or_else_the_first_scheduler() -> None:
    """``baselines`` left out: ``fifo`` where it is among the schedulers, else the first one (not an error about a
    key the file never wrote); given, it is kept."""
    plain = {k: v for k, v in TINY.items() if k != "baselines"}
    assert parse_experiment_config(plain, "a.yaml").baselines == ["fifo"]
    assert parse_experiment_config({**plain, "schedulers": ["qssf", "sjf"]}, "b.yaml").baselines == ["qssf"]
    assert parse_experiment_config(
        {**plain, "schedulers": ["qssf", "sjf"], "baselines": ["sjf"]}, "c.yaml"
    ).baselines == ["sjf"]


def test_a_window_without_jobs_is_named_by_the_config_check_before_anything_runs() -> None:
    """A workload window outside its trace's arrivals is refused by the config check (before Ray starts), at its
    line, in the dates it was given."""
    lab = REPO / "experiments" / "examples" / "lab_jobs.csv"
    raw = {**TINY, "workloads": {"ok": f"philly:{lab},start=2024-03-10,end=2024-03-13",
                                 "apr": f"philly:{lab},start=2024-04-01,end=2024-04-02"}}  # fmt: skip
    raw.pop("workload")
    with pytest.raises(ExperimentConfigError, match=r"workloads\.apr: .*no jobs in the window start=2024-04-01, "
                       r"end=2024-04-02 \(the trace's jobs arrive from 2024-03-01T08:00:00"):  # fmt: skip
        parse_experiment_config(raw, "x.yaml")


def test_run_picks_workloads_of_a_config_by_label(tmp_path: Path, traces_dir: Path, monkeypatch) -> None:
    """``marlsched run CONFIG --workload LABEL``: only that workload of ``workloads:`` runs (its published
    figures kept; a published mean over all the workloads is not put beside some of them, and the report says
    why); an unknown label is named beside the ones the config has."""
    from experiments.report import _published_table

    monkeypatch.chdir(REPO)
    cfg = load_experiment_config("experiments/configs/sia_sosp23.yaml", workloads=["workload-3"])
    assert list(cfg.workload_specs) == ["workload-3"]
    assert cfg.published == {"sia": {}, "pollux": {}, "gavel": {}}  # Sia's figures are means over all 8
    table = "\n".join(_published_table(cfg, {"sia": {("workload-3", 0): {"avg_jct": 1.0}}}))
    assert "means over all 8 workloads, not figures for the 1 this run has" in table and "1 / " not in table
    assert "mean" in load_experiment_config("experiments/configs/sia_sosp23.yaml").published["sia"]
    pollux = load_experiment_config("experiments/configs/pollux_osdi21.yaml", workloads=["workload-1"])
    assert pollux.published["pollux"] == {"workload-1": 2089}  # a workload's own figure stays
    with pytest.raises(ExperimentConfigError, match=r"no workload 'nov99'; its workloads: nov01, nov07, nov09"):
        load_experiment_config("experiments/configs/quickstart.yaml", workloads=["nov99"])
    config = _write(tmp_path, yaml.safe_dump(TINY), "tiny.yaml")
    with pytest.raises(ExperimentConfigError, match="this config has none"):
        load_experiment_config(config, workloads=["a"])
    # a --set that changes the experiment (its cluster) says so beside the paper's figures; one of seeds does not
    moved = load_experiment_config("experiments/configs/pollux_osdi21.yaml", sets=["cluster=small", "seeds=[1]"])
    assert (
        "this run changed cluster (--set), so those figures are of the experiment the config" in moved.published_source
    )
    assert (
        "changed"
        not in load_experiment_config("experiments/configs/pollux_osdi21.yaml", sets=["seeds=[1]"]).published_source
    )


def test_set_replaces_a_configs_settings_checked_as_the_files_are(monkeypatch) -> None:
    """``marlsched run CONFIG --set KEY=VALUE``: the setting replaces the file's (a list, a nested key), a bad
    one is named by its option instead of a line, with the closest key."""
    monkeypatch.chdir(REPO)
    path = "experiments/configs/quickstart.yaml"
    cfg = load_experiment_config(path, sets=["seeds=[7]", "train.ppo.iterations=1", "baselines=[gavel]"])
    assert cfg.seeds == [7] and cfg.baselines == ["gavel"] and cfg.train_config.config["ppo"]["iterations"] == 1
    with pytest.raises(ExperimentConfigError, match=re.escape(f"{path} (--set seedz=1): seedz: unknown key; did you")):
        load_experiment_config(path, sets=["seedz=1"])
    with pytest.raises(ExperimentConfigError, match=r"\(--set train.ppo.iterations=many\): train.ppo.iterations"):
        load_experiment_config(path, sets=["train.ppo.iterations=many"])


def test_the_metrics_notes_name_oracle_references_and_say_when_no_choice_mattered() -> None:
    """Under the metrics table: schedulers that read true durations are named as references (``sjf`` here, not
    ``fifo``), and equal average JCTs on every run are said to be so (a load at which the comparison is empty)."""
    from experiments.report import _metric_table

    cfg = parse_experiment_config(TINY, "tiny.yaml")
    runs = [("w", seed) for seed in cfg.seeds]

    def notes(jct: dict[str, list[float]], wait: float = 5.0) -> str:
        rows = {
            name: {run: {"avg_jct": v, "avg_queue_delay": wait} for run, v in zip(runs, vals, strict=True)}
            for name, vals in jct.items()
        }
        return "\n".join(_metric_table(cfg, rows))

    same = notes({"fifo": [10.0, 20.0, 30.0], "sjf": [10.0, 20.0, 30.0]})
    assert "`sjf` reads each job's true duration" in same and "`fifo`" not in same
    assert "Every scheduler gave the same average JCT on every run" in same
    differ = notes({"fifo": [10.0, 20.0, 30.0], "sjf": [10.0, 20.0, 29.0]})
    assert "Every scheduler gave the same" not in differ and "`sjf` reads" in differ
    # JCTs a little apart while no one's jobs waited (as the whole Philly trace at arrival_scale=0.05 on dc-1k)
    calm = notes({"fifo": [1e4, 2e4, 3e4], "sjf": [1e4, 2e4, 2.9e4]}, wait=1.0)
    assert "No scheduler's jobs waited more than 1 s on average" in calm and "the 1.7% between" in calm
    assert "No scheduler's jobs waited" not in notes({"fifo": [1e4, 2e4, 3e4], "sjf": [1e4, 2e4, 2.9e4]}, wait=900.0)


def test_an_error_raised_in_a_ray_task_is_one_line_without_the_workers_traceback() -> None:
    """A user error a simulation task raises (a load the window cannot offer) reaches the driver as Ray's error,
    whose text is the worker's coloured traceback; the command prints the cause's message alone."""
    import ray.exceptions

    from experiments.cli import _one_line

    cause = ValueError("load=50.0: this window's 1839 jobs offer at most 4.47 x the cluster's GPUs")
    err = ray.exceptions.RayTaskError("evaluate", "\x1b[36mray::evaluate()\x1b[39m Traceback (most recent ...", cause)
    err = err.as_instanceof_cause()
    assert isinstance(err, ValueError)  # so the command's handler of user errors catches it
    assert _one_line(err) == f"{cause} (raised in a Ray task)"
    assert _one_line(ValueError("plain")) == "plain"
    # raised in the user's own code: its type and file and line, read from the worker's traceback text
    bug = RuntimeError("my bug")
    bug.add_note("while mine decided at t=83 s")
    text = ('\x1b[36mray::evaluate()\x1b[39m (pid=1)\n  File "/site/experiments/tasks.py", line 80, in evaluate\n'
            '  File "/home/me/mine.py", line 5, in schedule\nRuntimeError: my bug')  # fmt: skip
    err = ray.exceptions.RayTaskError("evaluate", text, bug).as_instanceof_cause()
    assert _one_line(err) == (
        "RuntimeError: my bug; while mine decided at t=83 s; raised at /home/me/mine.py, line 5, in schedule "
        "(raised in a Ray task)"
    )


def test_a_report_says_which_workloads_every_seed_repeated() -> None:
    """A trace's fixed jobs and deterministic schedulers make every seed the same simulation: the report names
    such workloads (their spread is the workloads' alone); a workload whose seeds differ, or that ran once, is
    not named. Wall times differ from run to run and do not count."""
    from experiments.report import _repeated_seeds

    def run(jct: float, wall: float) -> dict:
        return {"avg_jct": jct, "makespan": 10 * jct, "jobs_completed": 5, "round_ms_p50": wall}

    rows = {
        "gavel": {("trace", 0): run(100, 1.0), ("trace", 1): run(100, 2.0), ("syn", 0): run(50, 1),
                  ("syn", 1): run(60, 1), ("once", 0): run(7, 1)},
        "gavel-las": {("trace", 0): run(90, 3.0), ("trace", 1): run(90, 1.0), ("syn", 0): run(40, 1),
                      ("syn", 1): run(40, 1), ("once", 0): run(8, 1)},
    }  # fmt: skip
    assert _repeated_seeds(rows) == ["trace"]
    rows["gavel-las"][("trace", 1)] = run(91, 1.0)
    assert _repeated_seeds(rows) == []


def test_a_warning_that_each_workload_gives_with_its_own_figures_is_said_once() -> None:
    """The estimated-speeds warning names each workload's job counts: on eight workloads it is one warning, given
    with the first one's figures and how many more said the same; another warning stays its own line."""
    from experiments.report import _warnings, warning_key

    said = "on small-hetero, some jobs' models were never measured on P100 (jobs that may run there: {} on P100, of "
    said += "the workload's {})"
    rows = {"fifo": {(f"w{i}", 0): {"warnings": [said.format(10 + i, 1_000 + i)]} for i in range(8)}}
    rows["qssf"] = {("w0", 0): {"warnings": ["qssf: another warning"]}}
    lines = _warnings(rows)
    assert lines[0] == "## Warnings" and len([x for x in lines if x.startswith("- ")]) == 2
    assert f"- {said.format(10, 1_000)} (and 7 more like it, with other figures)" in lines
    assert warning_key(said.format(10, 1_000)) == warning_key(said.format(17, 1_007)) != warning_key("other 10")


def test_a_runs_warnings_name_their_workload_and_its_label_and_an_error_names_its_run(
    tmp_path: Path, traces_dir: Path
) -> None:
    """A task warns of a window its load squeezes into one burst (as simulate does), names the scheduler by the
    config's label where a warning names it by its class's name, passes the label's options to a scheduler of
    one's own (``late``), and adds which run an error came from; the report lists each warning once, with the
    workloads it came from where not all gave it."""
    from experiments.report import _warnings
    from experiments.run import task_specs
    from experiments.tasks import evaluate

    mine = tmp_path / "mine.py"
    mine.write_text(
        "import warnings\n\nfrom cluster_sim.policies import get_policy\nfrom cluster_sim.protocol import "
        "SimulationWarning\n\n\nclass Mine:\n    name = 'mine-class'\n\n    def __init__(self, late=False):\n"
        "        self.late, self.inner = late, get_policy('fifo')\n\n    def reset(self, view):\n"
        "        self.inner.reset(view)\n        warnings.warn(f'{self.name}: a note', SimulationWarning)\n\n"
        "    def schedule(self, view):\n        if self.late and view.now > 60:\n"
        "            raise RuntimeError('late')\n        return self.inner.schedule(view)\n"
    )  # fmt: skip
    philly = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel"
    raw = {
        "name": "w", "cluster": "small-hetero", "interference": "none", "seeds": [0], "schedulers": ["mine", "late"],
        "scheduler_options": {"mine": {"policy": f"{mine}:Mine"}, "late": {"policy": f"{mine}:Mine", "late": True}},
        "workloads": {"sunday": f"{philly},start=2017-11-05,end=2017-11-06,load=0.9"},
    }  # fmt: skip
    ok, late = task_specs(parse_experiment_config(raw, "w.yaml"), tmp_path / "out")
    metrics = evaluate(ok)["metrics"]
    burst, note = metrics["warnings"]
    assert (
        burst.startswith("load=0.9 squeezes this window's 24.0 h of arrivals into 3.5 min") and note == "mine: a note"
    )
    with pytest.raises(RuntimeError, match="late") as caught:
        evaluate(late)
    assert caught.value.__notes__[-1] == "in the run of late on sunday, seed 0"
    # the report: each warning once, with the workloads that said it
    rows = {"mine": {("sunday", 0): metrics, ("nov07", 0): {"warnings": ["mine: 5 of 592 jobs on two types"]}},
            "late": {("sunday", 0): {"warnings": ["mine: 3 of 243 jobs on two types"]}}}  # fmt: skip
    assert _warnings(rows)[2:5] == [
        f"- sunday: {burst}",
        "- mine: 3 of 243 jobs on two types (and 1 more like it, with other figures)",  # said on every workload
        "- sunday: mine: a note",
    ]


def test_a_run_says_what_marlsched_itself_warns_of_in_a_task(tmp_path: Path) -> None:
    """A warning of marlsched's own code that is not a simulation's (oracle interference without Gavel's measured
    pairs) reaches the run's console and report like the simulation's, not only the worker's unread stderr."""
    from experiments.run import task_specs
    from experiments.tasks import evaluate

    raw = {"name": "w", "cluster": "small", "interference": "oracle", "seeds": [0], "schedulers": ["fifo"],
           "workload": "synthetic:1000,window_load=1.0"}  # fmt: skip
    (spec,) = task_specs(parse_experiment_config(raw, "w.yaml"), tmp_path)
    (said,) = evaluate(spec)["metrics"]["warnings"]
    assert said.startswith("oracle interference without Gavel's measured pairs: co-located jobs slow each other")
