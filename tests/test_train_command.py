"""`marlsched train --config`: one command and one checker for every agent and algorithm (marl.training.recipes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from experiments.cli import build_parser, main
from marl.agents import AGENTS
from marl.training.recipes import load_recipe_config

REPO = Path(__file__).resolve().parents[1]
# The priority agents on a fixed workload, small PPO iterations, sampled in the driver (num_env_runners 0:
# a remote EnvRunner's start is about 4 s of CPU a test). The remote runners have their own tests here (APPO,
# a killed runner, RLlib's own runner against ours) and in test_priority_agents and test_run.
TINY_PPO = {
    "env": {"workload": "synthetic:30,load=0.9", "interference": "none", "interference_data": None},
    "model": {"hidden": 16},
    "ppo": {"iterations": 3, "num_env_runners": 0, "train_batch_size": 64, "minibatch_size": 32, "num_epochs": 1,
            "snapshot_every": 0},
}  # fmt: skip


def test_help_lists_every_agent_and_algorithm_and_each_example_config_checks(capsys) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    pairs = [(spec, algo) for spec in AGENTS.values() for algo in spec.algorithms]
    assert next(iter(AGENTS)) == "priority"
    assert [a.name for a in AGENTS["priority"].algorithms] == ["ppo", "appo", "dagger", "es"]
    for spec, algo in pairs:
        assert f"{spec.name} / {algo.name} {algo.about}" in text
        assert algo.example in text
        got, got_algo, cfg = load_recipe_config(REPO / algo.example)  # every example is a config of its pair
        assert (got.name, got_algo.name) == (spec.name, algo.name) and cfg is not None


@pytest.mark.parametrize("page", ["README.md", "docs/guide/training.md"])
def test_the_agents_table_of_the_docs_lists_every_built_in_agent_and_algorithm(page: str) -> None:
    """The README's and the training guide's tables of agents: a row per built-in agent naming each of its
    algorithms and example configs, so that an agent added to marl/agents is added to the docs too."""
    from marl.agents import BUILT_IN

    rows = [line for line in (REPO / page).read_text().splitlines() if line.startswith("| `")]
    for spec in BUILT_IN:
        row = next((r for r in rows if f"`{spec.name}`" in r.split("|")[1]), None)
        assert row is not None, f"{page}: the table of agents has no row for {spec.name!r}; add one"
        for algo in spec.algorithms:
            assert f"`{algo.name}`" in row and Path(algo.example).name in row, (
                f"{page}: the row of {spec.name!r} lacks its algo {algo.name!r} or its example {algo.example}"
            )


def test_an_agent_of_ones_own_package_trains_through_the_one_command_and_its_folder_loads(
    tmp_path: Path, traces_dir: Path, monkeypatch, train_command
) -> None:
    """A package announces an agent spec in the ``marlsched.agents`` entry-point group (here a spec that reuses
    the round scorer's network, loader and ES loop with a decision layer of its own): the table finds it,
    ``marlsched train`` trains it by its name, its candidates playing in its decision layer, the folder records that
    name, and ``get_policy("marl:DIR")`` loads it through the spec's loader as that layer; a loader that builds
    another is refused, as is a spec that takes a built-in agent's name, naming the entry point."""
    import dataclasses
    from dataclasses import asdict

    import marl.agents
    from cluster_sim.policies import get_policy
    from tests.test_rounds_agent import es_config

    (tmp_path / "my_agent.py").write_text(
        "from cluster_sim.policies.rigid_rounds import ScoredRounds\n"
        "from marl.agents.spec import AgentSpec, Algorithm\n"
        "class Sticky(ScoredRounds):\n"
        "    built = 0\n"
        "    def __init__(self, scorer, **kw):\n"
        "        type(self).built += 1\n"
        "        super().__init__(scorer, **{**kw, 'stay': 0.3})\n"
        "def plain(folder, *, name='marl'):  # a loader that builds no Sticky\n"
        "    return ScoredRounds('las', name=name)\n"
        "SPEC = AgentSpec(\n"
        "    name='rounds-mine', about='the round scorer, mine', network='marl.deploy.rounds_policy:network_of',\n"
        "    decision='my_agent:Sticky',\n"
        "    observes='marl.models.rounds_scorer:FEATURES',\n"
        "    loader='marl.deploy.rounds_policy:load_rounds_policy',\n"
        "    algorithms=(Algorithm('es', 'ES on my scorer', 'marl.training.rounds_es:train', 'iterations',\n"
        "                          'mine.yaml', settings='marl.training.rounds_es:RoundsESConfig'),),\n"
        ")\n"
        "CLASH = AgentSpec(**{**SPEC.__dict__, 'name': 'rounds'})\n"
    )
    dist = tmp_path / "my_agent-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-agent\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[marlsched.agents]\nrounds-mine = my_agent:SPEC\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = marl.agents._installed({s.name: s for s in marl.agents.BUILT_IN})
    assert list(found) == ["rounds-mine"] and found["rounds-mine"].algorithms[0].name == "es"
    monkeypatch.setitem(AGENTS, "rounds-mine", found["rounds-mine"])

    meta = train_command({"agent": "rounds-mine", "algo": "es", **asdict(es_config(traces_dir))}, tmp_path / "run")
    assert meta["agent"] == "rounds-mine" and meta["provenance"]["config"]["agent"] == "rounds-mine"
    assert meta["provenance"]["agent_package"] == "my-agent 0.1" and meta["provenance"]["machine"]
    played = sys.modules["my_agent"].Sticky.built
    assert played >= 3  # the warm start's and each candidate's plays
    sched = get_policy(f"marl:{tmp_path / 'run' / 'policy'}")
    assert type(sched).__name__ == "Sticky" and sched.stay == 0.3
    monkeypatch.setitem(AGENTS, "rounds-mine", dataclasses.replace(found["rounds-mine"], loader="my_agent:plain"))
    with pytest.raises(ValueError, match=r"agent 'rounds-mine': its loader my_agent:plain built a ScoredRounds, not "):
        get_policy(f"marl:{tmp_path / 'run' / 'policy'}")

    # a fresh process (a training pool's worker) that unpickles a Sticky imports my_agent first: the entry points
    # are read once the table is used, not while my_agent is half imported
    fresh = "import my_agent; from marl.agents import AGENTS; print(type(AGENTS['rounds-mine']).__name__)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    proc = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "AgentSpec", proc.stderr[-2000:]

    (dist / "entry_points.txt").write_text("[marlsched.agents]\nrounds = my_agent:CLASH\n")
    sys.modules.pop("my_agent", None)
    with pytest.raises(ValueError, match=r"rounds = 'my_agent:CLASH' \(group marlsched.agents, package my-agent"):
        marl.agents._installed({s.name: s for s in marl.agents.BUILT_IN})
    (dist / "entry_points.txt").write_text("[marlsched.agents]\nrounds-mine = my_agent:NOPE\n")
    with pytest.raises(ValueError, match=r"'my_agent:NOPE' \(group marlsched.agents, package my-agent\) cannot be "
                       r"loaded \(AttributeError: .*\); fix the entry point"):  # fmt: skip
        marl.agents._installed({s.name: s for s in marl.agents.BUILT_IN})


def test_a_spec_of_ones_own_that_cannot_train_or_load_as_written_is_refused_by_name(
    tmp_path: Path, monkeypatch
) -> None:
    """A spec of one's own is checked before training: a reference that does not import names the agent, the field
    and the import's error; a loop that builds another agent's decision layer and takes no ``decision=`` (the
    priority agents' DAgger for a subclass of theirs) is refused at ``algo:``, while RLlib's PPO, which plays a
    subclass, is not. A folder of an agent whose package is not installed names that package."""
    import dataclasses
    import shutil

    from cluster_sim.policies import get_policy

    (tmp_path / "aging.py").write_text(
        "from marl.env.priority_agents import PriorityAgents\nclass Aging(PriorityAgents):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    trunk = AGENTS["priority"]
    ppo, _, dagger, _ = trunk.algorithms
    aging = dataclasses.replace(trunk, name="aging", decision="aging:Aging", algorithms=(ppo, dagger))
    monkeypatch.setitem(AGENTS, "aging", aging)

    def refused(spec, algo: str, text: str) -> str:
        monkeypatch.setitem(AGENTS, "aging", spec)
        path = tmp_path / "cfg.yaml"
        path.write_text(f"agent: aging\nalgo: {algo}\n")
        with pytest.raises(ValueError) as err:
            load_recipe_config(path)
        assert text in str(err.value), err.value
        return str(err.value)

    (tmp_path / "ok.yaml").write_text("agent: aging\nalgo: ppo\nenv:\n  workload: synthetic:30\n")
    assert load_recipe_config(tmp_path / "ok.yaml")[2]["env"]["decision"] == "aging:Aging"  # the runners build it
    said = refused(aging, "dagger", "line 2: algo: agent 'aging' decides with a layer of its own (aging:Aging), but ")
    assert (
        "builds the layer of agent 'priority' (marl.env.priority_agents:PriorityAgents) and takes no decision=" in said
    )
    typo = dataclasses.replace(ppo, trainer="marl.training.priority_train:train_prio")
    said = refused(
        dataclasses.replace(aging, algorithms=(typo,)), "ppo", "line 1: agent: agent 'aging': its algo 'ppo'"
    )
    assert "trainer 'marl.training.priority_train:train_prio' cannot be imported (AttributeError: " in said
    for field in ("decision", "network", "loader"):
        wrong = dataclasses.replace(aging, **{field: f"{getattr(aging, field)}z"})
        refused(wrong, "ppo", f"agent 'aging': its {field} '{getattr(aging, field)}z' cannot be imported (")

    # a folder whose loader cannot be imported: one line naming the agent and the field, not a traceback
    folder = tmp_path / "aged"
    shutil.copytree(REPO / "experiments" / "policies" / "default-small", folder)
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps({**meta, "agent": "aging"}))
    monkeypatch.setitem(AGENTS, "aging", dataclasses.replace(aging, loader=f"{aging.loader}z"))
    with pytest.raises(ValueError, match=r"agent 'aging': its loader '.*load_priority_policyz' cannot be imported"):
        get_policy(f"marl:{folder}")
    # where the package that announced the agent is missing, the folder names it (its provenance records it)
    monkeypatch.delitem(AGENTS, "aging")
    meta["provenance"]["agent_package"] = "my-agents 0.1.0"
    (folder / "metadata.json").write_text(json.dumps({**meta, "agent": "aging"}))
    with pytest.raises(ValueError, match=r"agent 'aging' comes from the package my-agents 0.1.0 .* not installed here: "
                       r"install it \(pip install my-agents==0.1.0, or"):  # fmt: skip
        get_policy(f"marl:{folder}")


def test_every_training_config_in_the_repository_passes_the_checker(monkeypatch) -> None:
    """Each config of experiments/configs that names an ``agent:`` is a config of one of its algorithms."""
    monkeypatch.chdir(REPO)
    configs = [p for p in sorted((REPO / "experiments" / "configs").glob("*.yaml")) if "agent" in yaml.safe_load(
        p.read_text())]  # fmt: skip
    assert len(configs) >= 15
    for path in configs:
        spec, algo, cfg = load_recipe_config(path)
        assert spec.name in AGENTS and algo in spec.algorithms and cfg is not None, path


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("agent: dl3\n", "line 1: agent: 'dl3' is not an agent marlsched trains; did you mean 'dl2'? agents: priority"),
        ("agent: rounds\nalgo: ppo\n", "line 2: algo: agent 'rounds' trains with algo es, dagger, not 'ppo'"),
        ("env:\n  workload: synthetic:30\nray:\n  adress: auto\n",
         "line 4: ray.adress: unknown key; did you mean 'address'? allowed keys here: num_cpus, object_store_mb"),
        ("agent: priority\nalgo: dagger\ndays: 7\ndayz: 3\n",
         "line 4: dayz: unknown key; did you mean 'days'? allowed keys here: cluster,"),
        ("agent: priority\nalgo: dagger\ndays: -1\n", "line 3: days: must be > 0, got -1.0"),
        ("agent: rounds\nalgo: dagger\nwindows: x\n", "line 3: windows: expected an integer, got 'x'"),
        ("agent: topdrl\ntrain:\n  rollout: 4\n",
         "line 3: train.rollout: unknown key; did you mean 'rollouts'? allowed keys here: iterations"),
        ("agent: priority\nalgo: dagger\ntrain_end: 2017-13-15\n", "line 3: train_end: 2017-13-15: not a valid date"),
        ("agent: priority\nalgo: dagger\ntrain_end: soon\n", "line 3: train_end: 'soon' is not a date; write YYYY-"),
        ("agent: priority\nalgo: dagger\ntrace: philly:no.csv\n", "line 3: trace: workload spec 'philly:no.csv'"),
        ("agent: priority\nenv:\n  trace: philly:no.csv\n", "line 3: env.trace: workload spec 'philly:no.csv': no.csv"),
        # the windows that fit or choose never reach into the report period, in every config style, dates or seconds
        ("agent: rounds\nalgo: es\nvalidation_first: 2017-10-30\n",
         "line 3: validation_first: the span 2017-10-30..2017-11-05 reaches into the report period (2017-11-01..2017-"),
        ("agent: rounds\nalgo: dagger\nfirst_start: 2017-10-25\n", "line 3: first_start: the span 2017-10-25..2017-"),
        ("agent: topdrl\nenv:\n  validation:\n    start: 2017-11-02\n",
         "line 4: env.validation.start: the span 2017-11-02..2017-11-04 reaches into the report period"),
        ("agent: rounds\nalgo: es\ntrain_last: tomorrow\n", "line 3: train_last: 'tomorrow' is not a date; write YYYY"),
        ("agent: priority\nselect:\n  start: 2017-10-25\n  end: 2017-11-08\n",
         "line 2: select: the span 2017-10-25..2017-11-08 reaches into the report period (2017-11-01..2017-"),
    ],
)  # fmt: skip
def test_a_bad_config_names_its_line_and_key_and_writes_nothing(tmp_path: Path, capsys, text: str, where: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert f"marlsched train: error: {cfg}, {where}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_dates_of_a_trace_of_ones_own_count_from_its_first_arrival(tmp_path: Path) -> None:
    """A Philly-format file of one's own (a lab's log from 2024-03-01): a training config's dates, its select span,
    window labels and a report's held-out check read the file's own calendar, not the Philly trace's; the select
    stage, whose default windows are Philly's select period, is refused before training until it is given a span."""
    from cluster_sim.traces.periods import on_philly_calendar, window_label, window_spec
    from experiments.report import _seconds
    from marl.env.priority_env import PriorityEnvConfig
    from marl.training.config import TrainConfigError
    from marl.training.priority_select import select_windows
    from marl.training.priority_train import parse_config

    rng = np.random.default_rng(0)
    first = np.datetime64("2024-03-01T06:00:00")
    stamps = sorted(first + np.timedelta64(int(t), "s") for t in rng.uniform(0, 12 * 86_400, 80))
    stamps[0] = first
    lengths = rng.uniform(600, 9000, len(stamps)).round()
    rows = [f"{str(t).replace('T', ' ')},{d:.0f},1,{d:.0f},lab" for t, d in zip(stamps, lengths, strict=True)]
    (tmp_path / "log.csv").write_text("timestamp,duration,num_gpus,gpu_time,cluster\n" + "\n".join(rows) + "\n")
    trace = f"philly:{tmp_path / 'log.csv'}"
    day = 86_400.0
    assert not on_philly_calendar(trace)
    env = PriorityEnvConfig.from_dict(
        {"trace": trace, "train_start": "2024-03-02T06:00", "train_end": "2024-03-08T06:00", "window_days": 1}
    )
    assert (env.train_start, env.train_end) == (day, 7 * day)  # from 2024-03-01T06:00, its first arrival
    assert window_label(window_spec(trace, day, 3 * day, 0.9)) == "2024-03-02T06:00:00..2024-03-04T06:00:00,load=0.9"
    assert _seconds("2024-03-05T06:00", f"{trace},start=2024-03-05T06:00") == 4 * day
    raw = {"env": {"trace": trace, "train_start": 0, "train_end": "2024-03-08T06:00", "window_days": 1}, "select": {}}
    with pytest.raises(TrainConfigError, match=r"select: .*counts its seconds from its own first arrival; give "):
        parse_config(raw, "own.yaml")
    raw["select"] = {"start": "2024-03-08T06:00", "end": "2024-03-11T06:00", "days": 1, "stride": 1}
    with pytest.raises(TrainConfigError, match=r"own\.yaml: select\.load: .*load=0\.9: this window's"):
        parse_config(raw, "own.yaml")  # its windows cannot offer the default load on small: said before training
    raw["select"]["load"] = 0.005
    select = parse_config(raw, "own.yaml")["select"]
    assert (select["start"], select["end"]) == (7 * day, 10 * day)  # seconds: the config is recorded as JSON
    specs = select_windows(trace, 1, 1, 0.005, select["start"], select["end"])
    assert [window_label(s)[:10] for s in specs] == ["2024-03-08", "2024-03-09", "2024-03-10"]
    # the command a training prints to run its policy: the trace after the spans that trained and selected it
    from marl.cli import _held_out_workload

    recorded = {"trained": {"config": {"env": {"trace": trace, "train_end": 7 * day}, "select": select}}}
    assert _held_out_workload(recorded) == f"{trace},start=2024-03-11T06:00:00,load=0.005"


def test_training_windows_may_be_given_as_dates(tmp_path: Path) -> None:
    """``train_end: 2017-10-15`` is the train period's end in seconds, in both config styles."""
    from cluster_sim.traces.periods import PERIODS
    from marl.env.priority_env import PriorityEnvConfig

    flat = tmp_path / "d.yaml"
    flat.write_text("agent: priority\nalgo: dagger\ntrain_start: 2017-09-24T10:30:41\ntrain_end: 2017-10-15\n")
    cfg = load_recipe_config(flat)[2]
    assert (cfg.train_start, cfg.train_end) == (1_728_000.0, PERIODS["train"].end_s)
    env = PriorityEnvConfig.from_dict(yaml.safe_load("train_end: 2017-11-01\ntrain_start: '2017-10-01'"))
    assert PERIODS["train"].end_s - env.train_start == 14 * 86_400  # 2017-10-01 .. 10-15
    assert env.train_end == PERIODS["report"].start_s
    # PPO's parsed config keeps seconds: it is recorded as JSON in the policy folder and the checkpoint
    from marl.training.priority_train import parse_config

    ppo = parse_config(yaml.safe_load("env:\n  train_end: 2017-10-15\n"), "x.yaml")
    assert json.loads(json.dumps(ppo))["env"]["train_end"] == PERIODS["train"].end_s
    es = tmp_path / "es.yaml"  # the round scorer's ES and the published baselines' windows take dates too
    es.write_text("agent: rounds\nalgo: es\ntrain_first: 2017-10-01\ntrain_last: 2017-10-12\n")
    assert load_recipe_config(es)[2].train_last - load_recipe_config(es)[2].train_first == 11 * 86_400
    topdrl = tmp_path / "topdrl.yaml"
    topdrl.write_text("agent: topdrl\nenv:\n  train:\n    start: 2017-10-01\n  validation:\n    start: 2017-10-16\n")
    env = load_recipe_config(topdrl)[2].env
    assert (env.train.start, env.validation.start) == (
        PERIODS["train"].end_s - 14 * 86_400,
        PERIODS["select"].start_s + 86_400,
    )


def test_set_replaces_settings_checked_as_the_files_and_named_by_the_option(tmp_path: Path, capsys) -> None:
    """``--set KEY=VALUE``: a dotted key, a YAML value, replacing the file's setting or adding one in a new
    section; checked as the file's keys are, an error naming the option instead of a line."""
    cfg = tmp_path / "d.yaml"
    cfg.write_text("agent: priority\nalgo: dagger\ndagger_rounds: 2\ndays: 7\n")
    got = load_recipe_config(cfg, sets=["dagger_rounds=0", "days=1.5"])[2]
    assert (got.dagger_rounds, got.days) == (0, 1.5)
    ppo = tmp_path / "p.yaml"
    ppo.write_text("agent: priority\nppo:\n  lr: 0.0003\n")
    got = load_recipe_config(ppo, sets=["ppo.lr=1e-3", "env.window_days=0.5"])[2]
    assert got["ppo"]["lr"] == 1e-3 and got["env"]["window_days"] == 0.5
    # a section's key set at the top, another library's name of a setting: each said with the one meant
    from marl.training.config import TrainConfigError

    with pytest.raises(TrainConfigError, match=r"train_end: is a key of the section env: write env.train_end"):
        load_recipe_config(ppo, sets=["train_end=2017-10-01"])
    with pytest.raises(TrainConfigError, match=r"ppo.learning_rate: unknown key; did you mean 'lr'\?"):
        load_recipe_config(ppo, sets=["ppo.learning_rate=1e-3"])
    for sets, message in [
        (["dagger_rounds=x"], f"{cfg} (--set dagger_rounds=x): dagger_rounds: expected an integer, got 'x'"),
        (["dayz=3"], f"{cfg} (--set dayz=3): dayz: unknown key; did you mean 'days'? allowed keys here:"),
        (["dagger_rounds"], "--set dagger_rounds: write KEY=VALUE"),
        (["days.x=1"], "--set days.x=1: days in"),
        (["first_start=2017-13-24"], "--set first_start=2017-13-24: '2017-13-24' is not a date (month must be in "),
    ]:
        assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o"), "--set", *sets]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_options_the_algorithm_cannot_honour_are_refused(tmp_path: Path, capsys) -> None:
    cfg = tmp_path / "d.yaml"
    cfg.write_text("agent: priority\nalgo: dagger\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o"), "--address", "auto"]) == 2
    assert "--address: agent 'priority' with algo 'dagger' is not trained on a Ray cluster (ppo and appo are)" in (
        capsys.readouterr().err
    )
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o"), "--iterations", "-1"]) == 2
    assert "--iterations must be >= 0, got -1" in capsys.readouterr().err  # dagger: 0 is the teacher's round alone
    cfg.write_text("agent: rounds\nalgo: es\n")
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o"), "--iterations", "0"]) == 2
    assert (
        "--iterations must be >= 1, got 0 (0, the teacher's round alone, is for algo dagger)" in capsys.readouterr().err
    )
    cfg.write_text("agent: priority\nalgo: dagger\n")
    cfg.write_text("agent: priority\nppo:\n  learner_threads: 0\n")  # checked before Ray starts
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "o")]) == 2
    assert "ppo.learner_threads: 0 is not a positive whole number" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


RAY_NOISE = ("core_worker.cc", "max_restarts", "new API stack", "Trainable.setup took", "Install gputil",
             "DeprecationWarning", "INFO", "WARNING")  # fmt: skip


def test_ppo_trains_through_the_one_command_and_the_policy_runs_through_get_policy(
    ray_local, tmp_path: Path, capfd
) -> None:
    """No ``agent:``: the priority agents, PPO on RLlib; ``--iterations`` overrides the config; the folder runs
    as ``marl:OUT/policy`` from the Python API; the recorded command is the one typed. Ray's and RLlib's
    start-up chatter (its C++ line included, hence capfd) stays off the terminal."""
    import json

    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    cfg = tmp_path / "ppo.yaml"
    cfg.write_text(yaml.safe_dump(TINY_PPO))
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out), "--iterations", "1"]) == 0
    printed, err = capfd.readouterr()
    assert not [noise for noise in RAY_NOISE if noise in err], err
    assert "iter   1" in printed and "iter   2" not in printed  # one iteration, not the config's three
    # how to run it, on the cluster it was trained on
    assert f"(run it with: marlsched simulate --cluster small --policy marl:{out / 'policy'})" in printed
    meta = json.loads((out / "policy" / "metadata.json").read_text())
    assert meta["agent"] == "priority"
    assert meta["trained"]["command"] == f"marlsched train --config {cfg} --out {out} --iterations 1"
    recorded = tmp_path / "recorded.yaml"  # the config it records trains it again as typed (with --iterations 1)
    recorded.write_text(yaml.safe_dump(meta["provenance"]["config"]))
    spec, algo, settings = load_recipe_config(recorded)
    assert (spec.name, algo.name) == ("priority", "ppo") and settings == load_recipe_config(cfg, iterations=1)[2]
    result = build_simulator("small", "synthetic:30,load=0.9", seed=0).run(get_policy(f"marl:{out / 'policy'}"))
    assert result.metrics()["jobs_completed"] == 30
    assert main(["train", "--config", str(cfg), "--out", str(out)]) == 2  # a finished run is not overwritten
    assert "already holds a trained policy" in capfd.readouterr().err
    assert main(["train", "--config", str(cfg), "--out", str(out), "--resume"]) == 2  # nor trained again
    assert "holds a finished training (its policy, no checkpoint): nothing to resume" in capfd.readouterr().err
    # Ray's standard result logs: one result per line, and TensorBoard's events with RLlib's metrics
    results = [json.loads(line) for line in (out / "result.json").read_text().splitlines()]
    assert len(results) == 1 and results[0]["env_runners"]["num_env_steps_sampled"] > 0
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1 and b"ray/tune/env_runners/num_env_steps_sampled" in events[0].read_bytes()


def test_appo_trains_the_same_agents_asynchronously_and_exports(ray_local, tmp_path: Path, monkeypatch) -> None:
    """``algo: appo``: the same module with its target copy, V-trace, runners sampling while it learns; the
    iterations that train on steps are counted, and the folder runs through ``get_policy`` as PPO's does."""
    import json
    import threading

    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    cfg = tmp_path / "appo.yaml"
    tune = {"factors": [1.5, 31], "days": 0.25, "stride": 6.0, "load": 0.3, "workers": 1}
    raw = {"algo": "appo", **TINY_PPO, "ppo": {**TINY_PPO["ppo"], "num_env_runners": 1}, "tune": tune}
    cfg.write_text(yaml.safe_dump(raw))
    out = tmp_path / "run"
    # RLlib's stop gives its learner thread 5 s, which an update on busy cores outlasts: as if it had, here
    from ray.rllib.algorithms.impala.impala_learner import IMPALALearner

    monkeypatch.setattr(IMPALALearner, "shutdown", lambda self: None)
    # --no-eval: the quick try stops at training, the config's tune stage skipped and the flag recorded
    assert main(["train", "--config", str(cfg), "--out", str(out), "--quiet", "--no-eval"]) == 0
    # the learner thread has ended all the same: one still running torch at interpreter exit aborts the process
    assert not [t for t in threading.enumerate() if type(t).__name__ == "_LearnerThread" and t.is_alive()]
    rows = [json.loads(line) for line in (out / "result.json").read_text().splitlines()]
    assert len(rows) == 3 and all(r["env_runners"]["num_env_steps_sampled"] > 0 for r in rows)
    assert any(r.get("learners", {}).get("shared", {}).get("num_module_steps_trained", 0) > 0 for r in rows)
    meta = json.loads((out / "policy" / "metadata.json").read_text())
    assert meta["agent"] == "priority" and meta["trained"]["config"]["algo"] == "appo"
    assert "tuned" not in meta and meta["trained"]["command"].endswith(" --no-eval")
    result = build_simulator("small", "synthetic:30,load=0.9", seed=0).run(get_policy(f"marl:{out / 'policy'}"))
    assert result.metrics()["jobs_completed"] == 30
    # the folder holds what the learner learned, not the network the runners started from
    import torch

    trained, start = (torch.jit.load(str(out / d / "policy.pt")).state_dict() for d in ("policy", "warm_start"))
    assert any(not torch.equal(trained[k], start[k]) for k in trained)


def test_ppo_imitates_the_privileged_label_inside_rllibs_learner(ray_local, tmp_path: Path) -> None:
    """``ppo.imitation_coef``: the learner adds DAgger's regression of the order scores on ln(true remaining s)
    (from the env's infos) to PPO's loss for ``imitation_iterations``; its loss falls while on, is off after,
    and the exported network fits the label better than the untrained one (QSSF) on the workload's states."""
    import csv

    import torch

    from cluster_sim.build import build_simulator
    from marl.models.priority_net import PriorityNet, score_regression_loss
    from marl.training.priority_dagger import Recorder

    workload = "synthetic:60,load=0.9"
    ppo = {**TINY_PPO["ppo"], "iterations": 4, "train_batch_size": 256, "minibatch_size": 32, "num_epochs": 6,
           "lr": 0.01, "imitation_coef": 10.0, "imitation_iterations": 3}  # fmt: skip
    cfg = tmp_path / "imitation.yaml"
    cfg.write_text(yaml.safe_dump({**TINY_PPO, "env": {**TINY_PPO["env"], "workload": workload}, "ppo": ppo}))
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out), "--quiet"]) == 0
    with (out / "progress.csv").open() as f:
        losses = [float(row["imitation_loss"]) for row in csv.DictReader(f)]
    assert len(losses) == 4 and np.isnan(losses[3]) and np.isfinite(losses[:3]).all()
    assert losses[2] < losses[0]
    rec = Recorder(None, num_agents=4, hysteresis=float(np.log(31.0)), every=1)
    build_simulator("small", workload, seed=0).run(rec)
    rows = {k: torch.from_numpy(np.concatenate(v)) for k, v in rec.rows.items()}
    trained = PriorityNet(16)
    trained.load_state_dict(torch.jit.load(str(out / "policy" / "policy.pt")).state_dict())

    def loss(net: PriorityNet) -> float:
        with torch.no_grad():
            scores, _ = net.encode(rows["jobs"], rows["parts"])
        return float(score_regression_loss(scores, rows["label"], rows["jobs"][..., 0], 3.0))

    assert loss(trained) < 0.6 * loss(PriorityNet(16))  # 7.4 against 18.2 when written
    # APPO has no imitation term: the key is refused with its line, before Ray starts
    cfg.write_text(yaml.safe_dump({"algo": "appo", **TINY_PPO, "ppo": ppo}))
    assert main(["train", "--config", str(cfg), "--out", str(tmp_path / "appo")]) == 2


def test_a_killed_env_runner_is_restarted_and_training_completes(ray_local, tmp_path: Path) -> None:
    """One of two EnvRunners killed (SIGKILL) after the first iteration: the other fills the next batch, Ray
    restarts the dead one, every iteration trains on steps, and the progress counts the failure and the
    unfinished episode it dropped."""
    import psutil

    from marl.training.priority_train import parse_config, train_priority

    raw = {**TINY_PPO, "ppo": {**TINY_PPO["ppo"], "iterations": 4, "num_env_runners": 2, "train_batch_size": 128}}
    killed: list[int] = []

    def kill_a_runner() -> None:
        for proc in psutil.Process().children(recursive=True):  # this test's Ray only, not another worker's
            try:
                title = (proc.cmdline() or [""])[0]
            except psutil.Error:
                continue
            if title.startswith("ray::PartitionEnvRunner"):
                proc.kill()
                killed.append(proc.pid)
                return

    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("iter   1 "):
            kill_a_runner()

    summary = train_priority(parse_config(raw, "tiny"), tmp_path / "run", log=log)
    assert killed, "no EnvRunner process found to kill"
    rows = summary["rows"]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    steps = [r["env_steps"] for r in rows]
    assert all(b - a >= 128 for a, b in zip([0, *steps], steps, strict=False))  # each iteration a full batch
    assert rows[0]["runner_failures"] == 0 and rows[-1]["runner_failures"] >= 1
    assert rows[-1]["episodes_dropped"] == rows[-1]["runner_failures"]  # one environment per runner
    assert any("EnvRunner failure(s) so far" in line for line in lines)
    assert (tmp_path / "run" / "policy" / "metadata.json").is_file()


@pytest.mark.parametrize("envs", [1, 2])
def test_the_partition_env_runner_samples_and_counts_as_rllibs_own(envs: int) -> None:
    """The training's EnvRunner logs per-agent step counts once per sample and passes observations uncopied: the
    same episodes (observations, actions, rewards) and the same per-agent and per-module counts as RLlib's
    MultiAgentEnvRunner, sample after sample, with one environment per runner and with two."""
    import numpy as np
    from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

    from marl.training.env_runner import PartitionEnvRunner
    from marl.training.priority_train import parse_config, ppo_config

    raw = {**TINY_PPO, "ppo": {**TINY_PPO["ppo"], "num_env_runners": 0, "num_envs_per_env_runner": envs}}
    config = ppo_config(parse_config(raw, "tiny"))
    assert config.env_runner_cls is PartitionEnvRunner
    runs = []
    for cls in (MultiAgentEnvRunner, PartitionEnvRunner):
        runner, episodes = cls(config=config), []
        for _ in range(3):  # the counts of every sample, including across an episode's end
            episodes += runner.sample(num_timesteps=40)
        metrics = runner.get_metrics()
        counts = {key: {k: v.peek() for k, v in metrics[key].items()}
                  for key in ("num_agent_steps_sampled", "num_module_steps_sampled",
                              "num_agent_steps_sampled_lifetime", "num_module_steps_sampled_lifetime")}  # fmt: skip
        data = [
            np.concatenate([np.ravel(getter(e)[a]) for a in sorted(e.agent_ids)])
            for e in episodes
            for getter in (lambda e: {a: o["jobs"] for a, o in e.get_observations(indices=slice(0, None)).items()},
                           lambda e: e.get_actions(indices=slice(0, None)),
                           lambda e: e.get_rewards(indices=slice(0, None)))
        ]  # fmt: skip
        runs.append((counts, data, metrics["num_env_steps_sampled"].peek()))
        runner.stop()
    (want, want_data, want_steps), (got, got_data, got_steps) = runs
    assert got == want and got_steps == want_steps
    assert sum(want["num_agent_steps_sampled"].values()) > want_steps  # several agents a step
    assert len(got_data) == len(want_data) and all(
        np.array_equal(a, b) for a, b in zip(got_data, want_data, strict=True)
    )


def test_every_agent_spec_names_code_that_exists() -> None:
    """A spec names its network, decision layer, inputs, loader and each algorithm's loop by reference: each
    resolves, the inputs are column names, and a spec without a network is one whose folders keep none."""
    from marl.agents import resolve

    for spec in AGENTS.values():
        assert callable(resolve(spec.loader)) and isinstance(resolve(spec.decision), type)
        columns = resolve(spec.observes)
        assert len(columns) >= 4 and all(isinstance(c, str) for c in columns)
        assert spec.network is None or callable(resolve(spec.network))
        for algo in spec.algorithms:
            assert callable(resolve(algo.trainer))
            assert (algo.settings is None) != (algo.parse is None)  # a flat dataclass, or the agent's sections
            assert callable(resolve(algo.settings or algo.parse))
    assert AGENTS["metaplace"].network is None
    with pytest.raises(ValueError, match="agent 'rounds' trains with algo es, dagger, not 'pg'"):
        AGENTS["rounds"].algorithm("pg")


def test_the_retired_module_commands_that_folders_record_name_the_one_command(monkeypatch) -> None:
    """``python -m marl.training.rounds_es --out D --minutes 25`` (what older folders record) exits with the one
    command that trains the same recipe, its flags carried over as ``--set``, and that command's config and
    settings check."""
    from marl.training.retired import one_command, retired_command

    monkeypatch.chdir(REPO)
    config = "experiments/configs/rounds_es_small_hetero.yaml"
    monkeypatch.setattr("sys.argv", ["rounds_es.py", "--out", "results/rounds-es", "--minutes", "25"])
    with pytest.raises(SystemExit, match="retired") as exit_:
        retired_command("marl.training.rounds_es", config)
    command = f"marlsched train --config {config} --set minutes=25 --out results/rounds-es"
    assert str(exit_.value).endswith(command)
    load_recipe_config(config, sets=["minutes=25"])  # the named command's settings are valid
    assert one_command("c.yaml", ["--seed=2", "--no-calibrate", "--out", "o"]) == (
        "marlsched train --config c.yaml --set seed=2 --set no_calibrate=true --out o"
    )
    assert one_command("c.yaml", ["--help"]) == "marlsched train --config c.yaml --out DIR"  # no --set help=true


def test_a_policy_stopped_by_its_time_budget_records_a_command_that_makes_it_again_anywhere() -> None:
    """PPO that ``ppo.time_budget_min`` stopped before its iterations records the command with the iterations
    done and the budget lifted (another machine would stop elsewhere); one that ran them all, its own command."""
    from marl.training.priority_train import rebuild_command

    typed = "marlsched train --config experiments/configs/default_small.yaml --out results/default_small"
    again = rebuild_command(typed, 28, 100)
    assert again == f"{typed} --iterations 28 --set ppo.time_budget_min=1e9"
    assert rebuild_command(typed, 100, 100) == typed
    _, _, cfg = load_recipe_config(REPO / "experiments/configs/default_small.yaml", 28, ["ppo.time_budget_min=1e9"])
    assert cfg["ppo"]["iterations"] == 28 and cfg["ppo"]["time_budget_min"] == 1e9


def test_an_absolute_reward_reports_the_episodes_jct_without_a_reference(tmp_path: Path) -> None:
    """``env.relative: false`` runs no reference schedule: the progress line and the curve give the training
    episodes' average JCT, where they printed ``nan%`` and drew nothing."""
    from marl.training.priority_train import _reference_of, plot_curve, progress_line

    row = {"iteration": 1, "minutes": 0.5, "env_steps": 100, "env_steps_per_s": 50.0, "episodes": 1,
           "avg_jct": 15_084.0, "gain": float("nan")}  # fmt: skip
    assert _reference_of({"relative": False}) is None and _reference_of({"num_agents": 1}) == "QSSF's scores"
    # on partitions, what the agents start from is named as such: not the QSSF scheduler, one queue over the cluster
    assert _reference_of({}) == "the untrained agents (QSSF's scores on 4 partitions)"
    line = progress_line(row, None)
    assert line.endswith("avg JCT 15,084 s (not held out)") and "nan" not in line
    assert "1.10% shorter than QSSF's scores" in progress_line({**row, "gain": 0.011})
    rows = [{**row, "iteration": i, "minutes": i / 2, "avg_jct": 15_000.0 - 10 * i} for i in range(1, 7)]
    plot_curve(rows, tmp_path / "curve.png", None)
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_an_agent_of_ones_own_trains_its_decision_layer_with_ppo_or_is_told_why_not(
    ray_local, tmp_path: Path, monkeypatch, train_command
) -> None:
    """A spec that reuses the priority agents' PPO with a decision layer of its own (a subclass of their agents) trains
    that layer: the env the runners build and the folder's loader use it, and ``get_policy`` returns it; a layer that
    is no such subclass is refused at the config's ``algo:`` line, naming the loops that play it."""
    import dataclasses
    import sys

    from cluster_sim.policies import get_policy
    from marl.training.recipes import TrainConfigError

    (tmp_path / "my_prio.py").write_text(
        "from marl.env.priority_agents import PriorityAgents\n"
        "class Mine(PriorityAgents):\n"
        "    built = 0\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        type(self).built += 1\n"
        "        super().__init__(*args, **kwargs)\n"
        "class NotAgents:\n"
        "    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    mine = dataclasses.replace(AGENTS["priority"], name="prio-mine", decision="my_prio:Mine")
    monkeypatch.setitem(AGENTS, "prio-mine", mine)
    raw = {"agent": "prio-mine", "algo": "ppo", **TINY_PPO, "ppo": {**TINY_PPO["ppo"], "iterations": 1}}
    meta = train_command(raw, tmp_path / "run")
    assert meta["agent"] == "prio-mine" and meta["agents"]["decision"] == "my_prio:Mine"
    assert meta["provenance"]["config"]["env"]["decision"] == "my_prio:Mine"
    assert sys.modules["my_prio"].Mine.built >= 2  # the agents the env trained, and their untrained reference
    assert type(get_policy(f"marl:{tmp_path / 'run' / 'policy'}")).__name__ == "Mine"

    monkeypatch.setitem(AGENTS, "prio-mine", dataclasses.replace(mine, decision="my_prio:NotAgents"))
    config = tmp_path / "not.yaml"
    config.write_text(yaml.safe_dump({"agent": "prio-mine", "algo": "ppo", **TINY_PPO}))
    with pytest.raises(TrainConfigError, match=r"line 2: algo: agent 'prio-mine' has a decision layer of its own "
                                               r"\(my_prio:NotAgents\) that is no subclass of the priority agents'.*"
                                               r"make it one, or train it with a loop that takes"):  # fmt: skip
        load_recipe_config(config)
