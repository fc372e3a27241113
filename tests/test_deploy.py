"""Deployment: priority agents grouped into Ray actors give the in-process decisions, and survive an actor crash."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from cluster_sim.build import build_simulator
from marl.deploy.registry import load_policy

REPO = Path(__file__).resolve().parents[1]
JOBS = 300
WORKLOAD = f"synthetic:{JOBS},window_load=1.2,gpu_scale=2"  # jobs queue on small: the scores decide who runs


def _same_results(a, b) -> None:
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.end, b.end)
    np.testing.assert_array_equal(a.span, b.span)


@pytest.fixture(scope="module")
def priority_dir(tmp_path_factory) -> Path:
    """A priority-agent policy with random residual weights, so that its scores differ from QSSF's, recorded as
    trained on ``small`` with interference (so it declares both)."""
    import torch

    from marl.deploy.priority_export import save_priority_policy
    from marl.models.priority_net import PriorityNet

    torch.manual_seed(1)
    net = PriorityNet(16)
    for p in net.score.parameters():
        torch.nn.init.normal_(p, std=1.0)
    recorded = {"trained": {"config": {"env": {"cluster": "small", "interference": "oracle"}}}}
    return save_priority_policy(net, tmp_path_factory.mktemp("prio") / "policy", recorded)


def _sim():
    return build_simulator("small", WORKLOAD, seed=7, interference="none", restart_cost=30.0)


@pytest.fixture(scope="module")
def reference(priority_dir: Path):
    """In-process TorchScript inference of 4 agents on the workload, and the number of scoring rounds."""
    from marl.env.priority_agents import PriorityAgents

    sched = load_policy(priority_dir)
    sched.agents_wanted = 4
    calls = []
    inner = sched.scorer
    sched.scorer = lambda obs: calls.append(1) or inner(obs)
    result = _sim().run(sched)
    assert result.metrics()["jobs_completed"] == JOBS
    assert not np.array_equal(result.start, _sim().run(PriorityAgents(num_agents=4)).start)  # scores matter
    return result, len(calls)


@pytest.mark.parametrize(("num_actors", "groups"), [(4, [[0], [1], [2], [3]]), (1, [[0, 1, 2, 3]])])  # 2: killed test
def test_actor_deployment_matches_in_process_inference(
    ray_local, priority_dir: Path, reference, num_actors: int, groups: list[list[int]]
) -> None:
    from marl.deploy.actors import deploy_policy

    ref, calls = reference
    sched, policy = deploy_policy(priority_dir, num_agents=4, num_actors=num_actors, num_cpus=0.25)
    try:
        assert sched.trained_on == load_policy(priority_dir).trained_on  # it warns off its cluster as in process
        assert sched.trained_on.name == "small" and sched.trained_on.interference == "oracle"
        _same_results(_sim().run(sched), ref)
        assert policy.calls == calls > 0
        served = policy.info()
        assert [s["agents"] for s in served] == groups
        assert sum(s["decisions"] for s in served) == policy.agent_calls == 4 * calls  # every agent answered
        assert [s["calls"] for s in served] == [calls] * num_actors  # one call per actor a round
        assert len({s["pid"] for s in served}) == num_actors  # one process per actor
    finally:
        policy.shutdown()


def test_killed_agent_actor_is_restarted_and_no_job_is_lost(ray_local, priority_dir: Path, reference) -> None:
    """Actors default to one per CPU (ray_local has 2: agents 0-1 and 2-3); one killed mid-episode is restarted by
    Ray and the episode ends with every job and the in-process decisions."""
    from marl.deploy.actors import deploy_policy

    ref, calls = reference
    sched, policy = deploy_policy(priority_dir, num_agents=4, num_cpus=0.25)
    try:
        served = policy.info()
        assert len(policy.actors) == 2 and [s["agents"] for s in served] == [[0, 1], [2, 3]]
        assert [s["restarts"] for s in served] == [0, 0]
        with pytest.raises(ValueError, match="3 agents observed"):
            policy({"jobs": np.zeros((3, 1, 1)), "parts": np.zeros((3, 1, 1))})
        victim = 1  # serves agents 2 and 3
        pid_before = served[victim]["pid"]
        kill_at = calls // 3

        def crash_once(obs):
            if policy.calls == kill_at:
                ray_local.kill(policy.actors[victim], no_restart=False)  # crash; Ray restarts it
            return policy(obs)

        sched.scorer = crash_once
        result = _sim().run(sched)
        assert result.metrics()["jobs_completed"] == JOBS
        _same_results(result, ref)  # the restarted actor made the same decisions
        after = policy.info()
        assert after[victim]["pid"] != pid_before  # it really was a new process
        assert [s["restarts"] for s in after] == [0, 1]  # what an operator reads: its counters start again
        after = after[victim]
        assert 0 < after["calls"] <= calls - kill_at + 1  # ...which served the rest of the episode
    finally:
        policy.shutdown()


def test_actors_are_sized_to_fit_the_nodes_and_a_size_that_cannot_is_refused() -> None:
    """Each actor's CPUs: the cluster's shared out, but never more than lets every actor find a node (one agent
    on two 1-CPU nodes once asked for a 2-CPU actor that no node holds, and waited forever)."""
    from marl.deploy.actors import actor_cpus

    assert actor_cpus([1.0, 1.0], 1) == 1.0  # not 2: no node has 2
    assert actor_cpus([16.0, 16.0], 1) == 16.0
    assert actor_cpus([2.0, 2.0], 3) == 1.0  # 4 / 3 each would fit only two
    assert actor_cpus([2.0], 2) == 1.0 and actor_cpus([8.0, 8.0], 4) == 4.0  # an even share that fits stays
    assert actor_cpus([1.0, 1.0], 4, 0.25) == 0.25
    with pytest.raises(ValueError, match=r"CPUs per node: 1, 1\): give num_cpus <= 1 or fewer actors"):
        actor_cpus([1.0, 1.0], 2, 1.5)


def test_a_folder_of_another_kind_is_refused_with_the_kinds_that_run(tmp_path: Path) -> None:
    import json

    (tmp_path / "metadata.json").write_text(json.dumps({"agent": "hgnn"}))
    with pytest.raises(ValueError, match="priority, rounds, sia-remaining"):
        load_policy(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no policy folder '.*missing'; make one with"):
        load_policy(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty is not a policy folder"):
        load_policy(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match=r"no policy folder '.*/empyt' \(did you mean 'empty'\?\)"):
        load_policy(tmp_path / "empyt")  # a misspelt folder is matched among its parent's
    # a training run's folder and an interference model's are named as what they are
    (tmp_path / "run" / "policy").mkdir(parents=True)
    (tmp_path / "run" / "policy" / "metadata.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"a training run's folder: its policy is .*run/policy"):
        load_policy(tmp_path / "run")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"interference model.*--interference-model .*model/model\.json"):
        load_policy(tmp_path / "model")


def test_the_torch_export_program_alone_schedules_as_the_torchscript(
    ray_local, priority_dir: Path, reference, tmp_path: Path
) -> None:
    """Where TorchScript is gone (``policy.pt`` missing or unreadable) the folder's ``policy.pt2`` loads and
    schedules decision for decision as the TorchScript did; Ray actors serve it with the same scores; a
    damaged program is named with the fix."""
    import shutil

    import torch

    from marl.deploy.actors import RayActorScorer
    from marl.deploy.policy_files import load_torchscript
    from marl.deploy.priority_export import _example

    only = tmp_path / "program-only"
    shutil.copytree(priority_dir, only)
    (only / "policy.pt").unlink()
    sched = load_policy(only)
    sched.agents_wanted = 4
    _same_results(_sim().run(sched), reference[0])
    script = load_torchscript(priority_dir / "policy.pt")
    jobs, parts = _example(script, 8, 2, batch=4)  # four agents' observations
    policy = RayActorScorer(only, 4, num_actors=2, num_cpus=0.25)
    try:
        served = policy({"jobs": jobs.numpy(), "parts": parts.numpy()})
    finally:
        policy.shutdown()
    with torch.no_grad():
        np.testing.assert_array_equal(served, script(jobs, parts)[0].numpy())
    (only / "policy.pt").write_bytes(b"not TorchScript")
    with pytest.warns(UserWarning, match="policy.pt: not a readable TorchScript policy"):
        assert load_policy(only).scorer is not None
    (only / "policy.pt2").write_bytes(b"not a program")
    with pytest.raises(ValueError, match=r"policy.pt2: not a readable torch.export program .*copy the policy"):
        load_policy(only)


def test_export_program_adds_the_program_to_a_folder_without_one(
    priority_dir: Path, tmp_path: Path, refilled_by_export_program
) -> None:
    """``marlsched export-program`` writes ``policy.pt2`` into a folder from before programs and records its
    difference from the network; a kind without a network is refused, naming the file and the kinds."""
    import json
    import shutil

    from marl.deploy.registry import add_program

    assert load_policy(refilled_by_export_program(priority_dir)).scorer is not None
    # a folder that has its program keeps it (a shipped one stays as committed), unless --force
    from marl.cli import main

    copy = tmp_path / "has-program"
    shutil.copytree(priority_dir, copy)
    (copy / "policy.pt2").touch()
    stamp = (copy / "policy.pt2").stat().st_mtime_ns
    assert main(["export-program", str(copy)]) == 0 and (copy / "policy.pt2").stat().st_mtime_ns == stamp
    # --force writes it again with this torch, recorded: a program is read by torch releases of its own schema only
    import torch

    from marl.deploy.policy_files import program_torch

    meta = json.loads((copy / "metadata.json").read_text())
    meta["provenance"]["libraries"]["torch"] = "2.3.1"  # as if another torch had trained it and written its program
    (copy / "metadata.json").write_text(json.dumps(meta))
    assert main(["export-program", str(copy), "--force"]) == 0 and (copy / "policy.pt2").stat().st_mtime_ns != stamp
    assert program_torch(json.loads((copy / "metadata.json").read_text())) == torch.__version__
    (tmp_path / "meta").mkdir()  # meta-placement keeps JSON weights: no network to export
    (tmp_path / "meta" / "metadata.json").write_text(json.dumps({"agent": "metaplace"}))
    with pytest.raises(ValueError, match=r"metadata.json: agent 'metaplace' has no torch.export .*rounds.*topdrl, dl2"):
        add_program(tmp_path / "meta")


def test_upgrade_policy_brings_an_older_folder_to_the_one_schema_and_leaves_its_weights(
    priority_dir: Path, tmp_path: Path
) -> None:
    """A folder from before the schema (no format_version, no provenance; command and config under ``trained``,
    as philly-small kept them) gains both from what it recorded, its code version marked as never recorded; its
    network files are byte for byte the same and it schedules as before; a second upgrade changes nothing."""
    import json
    import shutil

    from marl.cli import main
    from marl.deploy.registry import UNRECORDED, read_metadata

    older = Path(shutil.copytree(priority_dir, tmp_path / "older"))
    meta = json.loads((older / "metadata.json").read_text())
    for key in ("format_version", "provenance", "command", "config"):
        meta.pop(key, None)
    meta |= {"trained": {"command": "python -m marl.training.old --seed 2", "config": {"seed": 2}}, "torch": "2.3.0"}
    (older / "metadata.json").write_text(json.dumps(meta))
    weights = {f: (older / f).read_bytes() for f in ("policy.pt", "policy.pt2")}
    before = load_policy(older)

    assert main(["upgrade-policy", str(older)]) == 0
    doc = json.loads((older / "metadata.json").read_text())
    assert doc["format_version"] == read_metadata(priority_dir)[1]["format_version"]
    assert doc["provenance"] == {
        "command": "python -m marl.training.old --seed 2",
        "config": {"seed": 2},
        "code_version": UNRECORDED,
        "libraries": {"torch": "2.3.0"},
    }
    kept = {k: v for k, v in doc.items() if k not in ("format_version", "provenance")}
    assert kept == {"format": doc["format"], **meta}  # nothing else changed
    assert all((older / f).read_bytes() == b for f, b in weights.items())
    after = load_policy(older)
    assert type(after) is type(before) and after.num_agents == before.num_agents
    assert main(["upgrade-policy", str(older)]) == 0 and json.loads((older / "metadata.json").read_text()) == doc


SHIPPED = Path(__file__).resolve().parents[1] / "experiments" / "policies"


def test_a_folders_recorded_measurements_are_named_so_that_a_notebook_elsewhere_can_use_them(
    tmp_path: Path, monkeypatch, traces_dir: Path
) -> None:
    """A shipped folder records its interference data relative to the repository (``gavel:../shared/...``): loaded
    from another working directory, the policy names it by an absolute path that exists, and the warning that
    says how to simulate it as trained gives that path."""
    from cluster_sim.policies import get_policy

    monkeypatch.chdir(tmp_path)
    trained = get_policy(f"marl:{SHIPPED / 'default-small'}").trained_on
    kind, _, path = trained.interference_data.partition(":")
    assert kind == "gavel" and Path(path).is_absolute() and Path(path).is_file()
    assert f"interference_data={trained.interference_data!r}" in trained.interference_mismatch(False)


@pytest.mark.parametrize("folder", sorted(p.name for p in SHIPPED.iterdir() if (p / "metadata.json").is_file()))
def test_every_shipped_folder_loads_through_the_python_api(folder: str) -> None:
    """``get_policy("marl:DIR")`` (cluster_sim's own API, through the entry points) gives the scheduler of the
    folder's kind, as ``simulate`` and ``run`` do; the kind's own prefix loads it too, and another kind's refuses."""
    from cluster_sim.policies import get_policy
    from marl.agents import AGENTS, resolve
    from marl.deploy.registry import policy_kind

    kind = policy_kind(SHIPPED / folder)
    assert kind in AGENTS
    meta = json.loads((SHIPPED / folder / "metadata.json").read_text())  # the one schema (upgrade-policy)
    assert meta["format_version"] == 2 and set(meta["provenance"]) == {"command", "config", "code_version", "libraries"}
    assert meta["provenance"]["command"], f"{folder}: records no command that made it"
    # the command that makes it again today (where the recorded one is retired or ran against a time budget)
    rebuild = (
        meta.get("rebuild_command") or meta.get("trained", {}).get("rebuild_command") or meta["provenance"]["command"]
    )
    words = rebuild.split()
    assert words[0] == "marlsched" and words[1] in {"train", "train-priority", "interference"}, f"{folder}: {rebuild}"
    if "--config" in words:
        assert (SHIPPED.parents[1] / words[words.index("--config") + 1]).is_file(), f"{folder}: {rebuild}"
    sched = get_policy(f"marl:{SHIPPED / folder}")
    assert sched.name == f"marl:{SHIPPED / folder}"
    assert get_policy(f"marl:{SHIPPED / folder}", name=folder).name == folder  # a name of one's own, as a keyword
    assert type(sched).__name__ in {
        "PriorityAgents",
        "RoundsAgents",
        "ScoredRounds",
        "LearnedWeightSia",
        "TopDRL",
        "DL2",
        "MetaPlace",
    }
    assert type(sched) is type(resolve(AGENTS[kind].loader)(SHIPPED / folder))
    assert isinstance(sched, resolve(AGENTS[kind].decision))  # the spec's decision layer is what schedules
    env = meta["provenance"]["config"].get("env") or {}
    if kind == "priority" and env.get("num_agents"):  # loaded without a count, as many agents as it trained
        from topology import build_cluster

        racks = build_cluster(env["cluster"]).view.num_racks
        assert (sched.agents_wanted or racks) == env["num_agents"], f"{folder}: runs another agent count"
    if kind in ("topdrl", "dl2", "metaplace"):
        assert type(get_policy(f"{kind}:{SHIPPED / folder}")) is type(sched)
    wrong = "dl2" if kind != "dl2" else "topdrl"
    with pytest.raises(ValueError, match=f"agent is {kind!r}, not {wrong!r}; load it as marl:"):
        get_policy(f"{wrong}:{SHIPPED / folder}")


def test_a_folders_options_go_in_its_name_as_a_plugins_do_and_a_wrong_one_is_named() -> None:
    """``marl:DIR,num_agents=2`` (what ``--policy`` takes on the command line) is the folder's policy loaded with
    that option; an option its kind does not take is named with the ones it does, not a loader's TypeError."""
    from cluster_sim.policies import get_policy
    from experiments.simulate import split_policies

    folder = SHIPPED / "default-small"  # trained with 4 agents, as its metadata records
    names = split_policies(f"qssf,marl:{folder},num_agents=2,marl:{folder}")
    assert names == ["qssf", f"marl:{folder},num_agents=2", f"marl:{folder}"]
    assert json.loads((folder / "metadata.json").read_text())["agents"]["num_agents"] == 4
    assert get_policy(names[1]).num_agents == 2 and get_policy(names[2]).num_agents == 4
    with pytest.raises(ValueError, match=r"unknown option 'num_agentz'; did you mean 'num_agents'\? allowed: "):
        get_policy(f"marl:{folder},num_agentz=2")
    with pytest.raises(ValueError, match="option num_agents given in the name and again beside it"):
        get_policy(f"marl:{folder},num_agents=2", num_agents=4)


def test_a_policy_whose_agents_do_not_fit_the_racks_is_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    """``default-small``'s 4 agents on a cluster of 2 racks: ``simulate`` says so, with the counts that fit and the
    option that gives one, before the first scheduler runs; ``run`` names the config's line before Ray starts."""
    from experiments.cli import main

    (tmp_path / "lab.yaml").write_text("name: mylab\npods: 1\nracks_per_pod: 2\nservers_per_rack: 4\n"
                                       "server: nvswitch-8\ngpu_type: V100\n")  # fmt: skip
    folder = f"marl:{SHIPPED / 'default-small'}"
    base = ["simulate", "--cluster", str(tmp_path / "lab.yaml"), "--workload", "synthetic:30,load=1.0", "--quiet"]
    assert main([*base, "--policy", f"fifo,{folder}", "--out", str(tmp_path / "sim")]) == 2
    said = capsys.readouterr().err
    assert f"{folder}: its 4 agents, one per partition: cannot split mylab's 2 racks into 4" in said
    assert f"run it with fewer agents, e.g. `{folder},num_agents=2`" in said
    assert not (tmp_path / "sim").exists()  # not even fifo ran
    assert main([*base, "--policy", f"{folder},num_agents=4"]) == 2  # a count given: the fix replaces it
    assert f"e.g. `{folder},num_agents=2` in --policy" in capsys.readouterr().err
    assert main([*base, "--policy", f"fifo,{folder},num_agents=2"]) == 0
    config = tmp_path / "lab-run.yaml"
    config.write_text(f"name: lab\ncluster: {tmp_path / 'lab.yaml'}\nworkloads:\n  w: synthetic:30,load=1.0\n"
                      f"schedulers: [fifo, '{folder}']\n")  # fmt: skip
    capsys.readouterr()
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == 2
    assert f"lab-run.yaml, line 5: schedulers.1: {folder}: its 4 agents" in capsys.readouterr().err


def test_a_policys_interference_inputs_can_be_blanked_as_an_ablation() -> None:
    """``marl:DIR,interference_inputs=none``: the trained network's interference columns read 1.0 everywhere (the
    ablation that shows what the inputs change); a folder trained without inputs refuses the option."""
    from cluster_sim.policies import get_policy
    from interference.base import NoInterference

    shipped = get_policy(f"marl:{SHIPPED / 'default-small'}")
    blank = get_policy(f"marl:{SHIPPED / 'default-small'},interference_inputs=none")
    assert not isinstance(shipped.inputs.model, NoInterference) and isinstance(blank.inputs.model, NoInterference)
    with pytest.raises(ValueError, match="trained without interference inputs, so it takes none"):
        get_policy(f"marl:{SHIPPED / 'philly-small-dagger'},interference_inputs=none")


def test_a_policy_on_another_cluster_than_its_own_is_warned_about(capsys, traces_dir: Path) -> None:
    """A learned policy declares the cluster its recorded config trained it on; a simulation on a cluster with
    other GPUs warns (naming both), one with the same GPUs under another name does not, and ``marlsched`` prints
    the warning as one line. So with interference: a policy trained with co-located jobs slowing each other,
    simulated without, warns with the settings it was trained in."""
    import warnings

    from cluster_sim.policies import get_policy
    from cluster_sim.protocol import PolicyClusterWarning
    from experiments.cli import main
    from topology import build_cluster

    folder = f"marl:{SHIPPED / 'philly-small-dagger'}"  # trained on small
    sched = get_policy(folder)
    assert sched.trained_on.name == "small" and dict(sched.trained_on.gpus) == {"V100": 256}
    assert get_policy(f"marl:{SHIPPED / 'sia-philly'}").trained_on.name == "sia-hetero"
    assert get_policy(f"marl:{SHIPPED / 'metaplace-philly'}").trained_on is None  # many synthetic clusters
    with pytest.warns(PolicyClusterWarning, match=r"trained on small \(256 V100\), run on small-hetero \(96 V100"):
        build_simulator("small-hetero", "synthetic:200,load=1", seed=0).start(sched)
    renamed = dataclasses.replace(build_cluster("small").spec, name="my-small")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PolicyClusterWarning)
        build_simulator("small", "synthetic:200,load=1", seed=0).start(sched)
        build_simulator(renamed, "synthetic:200,load=1", seed=0).start(sched)
        build_simulator("small-hetero", "synthetic:200,load=1", seed=0).start(get_policy("qssf"))
    default = get_policy(f"marl:{SHIPPED / 'default-small'}")  # trained with interference oracle, Gavel's pairs
    gavel = "gavel:../shared/traces/gavel/simulation_throughputs.json"
    assert (default.trained_on.interference, default.trained_on.interference_data) == ("oracle", gavel)
    fix = f"simulate it with --interference oracle --interference-model {gavel}"
    from marl.cli import simulate_hint  # what training prints to run the policy: as it was trained

    assert simulate_hint(SHIPPED / "default-small").endswith(
        f"--interference oracle --interference-model {gavel} --policy marl:{SHIPPED / 'default-small'}"
    )
    # a folder trained at other stalls and load than simulate's defaults: the hint runs it at its own
    dl2 = simulate_hint(SHIPPED / "dl2-pollux")
    assert ",load=1 --start-cost 30 --policy marl:" in dl2 and "--restart-cost" not in dl2
    with pytest.warns(PolicyClusterWarning, match=fix):
        build_simulator("small", "synthetic:200,load=1", seed=0).start(default)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PolicyClusterWarning)
        data = f"gavel:{traces_dir}/gavel/simulation_throughputs.json"
        build_simulator("small", "synthetic:200,load=1", seed=0, interference="oracle", interference_data=data).start(
            default
        )
    args = ["simulate", "--cluster", "small", "--workload", "synthetic:600,load=1", "--policy", folder, "--quiet"]
    assert main(args) == 0 and "marlsched: error" not in capsys.readouterr().err
    # the command prints it as one line, without Python's file and source line
    line = warnings.formatwarning("P: trained on small", PolicyClusterWarning, "simulator.py", 1)
    assert line == "marlsched: warning: P: trained on small\n"
    # so is any warning of marlsched's own modules; another library's keeps Python's form, with its source
    ours = warnings.formatwarning("no pairs", UserWarning, str(REPO / "interference" / "loader.py"), 57)
    theirs = warnings.formatwarning("deprecated", UserWarning, str(Path(np.__file__)), 3)
    assert ours == "marlsched: warning: no pairs\n" and theirs.startswith(f"{np.__file__}:3: UserWarning: deprecated")


def test_a_plugin_prefix_names_its_folders_everywhere_a_scheduler_name_goes(tmp_path: Path) -> None:
    from cluster_sim import policy_folders
    from cluster_sim.policies import get_policy
    from cluster_sim.scheduler_spec import is_custom_spec

    seen = []

    def load(prefix: str, folder: str, *, name: str) -> object:
        seen.append((prefix, folder, name))
        return get_policy("fifo")

    assert is_custom_spec("mine:Sched") and "marl" in policy_folders.folder_prefixes()
    policy_folders.register_folder_prefix("mine", load)
    try:
        assert not is_custom_spec("mine:Sched")  # now a folder, not a module's class
        assert get_policy(f"mine:{tmp_path}").name == "fifo"
        assert seen == [("mine", str(tmp_path), f"mine:{tmp_path}")]
        with pytest.raises(ValueError, match="already registered"):
            policy_folders.register_folder_prefix("marl", load)
    finally:
        del policy_folders._REGISTERED["mine"]
    with pytest.raises(ValueError, match=r"unknown scheduler 'mine:.*PREFIX:DIR .*prefixes: .*marl"):
        get_policy(f"mine:{tmp_path}")


def test_a_reused_program_carries_each_networks_weights_and_is_traced_again_where_it_differs(tmp_path: Path) -> None:
    # Exports of one architecture reuse its traced program with new weights; each file computes its own network,
    # and a setting the architecture key cannot see (a list) makes the reused program differ, so it is traced anew.
    import torch

    from marl.deploy.policy_files import load_program, save_program

    class Net(torch.nn.Module):
        def __init__(self, seed: int, factor: float) -> None:
            super().__init__()
            torch.manual_seed(seed)
            self.lin = torch.nn.Linear(3, 2)
            self.register_buffer("shift", torch.full((2,), float(seed)))
            self.factor = [factor]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.factor[0] + self.shift

    rows = torch.export.Dim("rows", min=1)
    x = torch.rand(4, 3, generator=torch.Generator().manual_seed(0))
    nets = [Net(0, 1.0), Net(1, 1.0), Net(1, 5.0)]
    for i, net in enumerate(nets):
        err = save_program(net, (x[:2],), ({0: rows},), tmp_path / f"{i}.pt2", check=(x,))
        assert err < 1e-6
    with torch.no_grad():
        outs = [load_program(tmp_path / f"{i}.pt2")(x) for i in range(3)]
        for out, net in zip(outs, nets, strict=True):
            assert torch.allclose(out, net(x), atol=1e-6)
    assert not torch.allclose(outs[0], outs[1]) and not torch.allclose(outs[1], outs[2])
    assert nets[0].shift[0] == 0.0  # the first network's own tensors were not handed to the next


def test_version_names_the_commit_that_policy_folders_record(capsys) -> None:
    """``marlsched --version``: the package's version and the code version a policy's provenance records, so a
    result and the code that computed it can be matched."""
    import importlib.metadata

    from experiments.cli import main
    from marl.deploy.policy_files import code_version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"marlsched {importlib.metadata.version('marlsched')}") and code_version() in out


def test_every_kind_writes_one_schema_with_its_provenance_and_a_newer_format_is_refused(tmp_path: Path) -> None:
    """``write_metadata`` (every kind's writer calls it): format, version, agent, provenance (command, config, code
    and library versions); a folder from a newer format is refused with the fix; folders of format 1 still load."""
    import json
    import shutil

    from marl.deploy.policy_files import FORMAT_VERSION, write_metadata
    from marl.deploy.registry import read_metadata

    doc = write_metadata(tmp_path, "metaplace", {"command": "marlsched train --config c.yaml", "config": {"seed": 1}})
    on_disk = json.loads((tmp_path / "metadata.json").read_text())
    assert on_disk == doc and doc["format_version"] == FORMAT_VERSION == 2 and doc["agent"] == "metaplace"
    prov = doc["provenance"]
    assert prov["command"] == "marlsched train --config c.yaml" and prov["config"] == {"seed": 1}
    assert prov["code_version"] and {"python", "numpy", "torch"} <= set(prov["libraries"])
    newer = tmp_path / "newer"
    shutil.copytree(SHIPPED / "topdrl-small", newer)
    meta = json.loads((newer / "metadata.json").read_text())
    older = {k: v for k, v in meta.items() if k not in ("format_version", "provenance")}
    (newer / "metadata.json").write_text(json.dumps(older))  # written before the schema: format 1, loaded alike
    assert read_metadata(newer)[0].name == "topdrl" and load_policy(newer) is not None
    (newer / "metadata.json").write_text(json.dumps({**meta, "format_version": 99}))
    with pytest.raises(ValueError, match="format_version 99 is newer than this marlsched's 2; upgrade"):
        load_policy(newer)


PHILLY_DAYS = "philly:{}/pollux-osdi21/traces/philly.csv,start=2017-11-07,end=2017-11-09,load=0.9"


def test_an_exported_policy_called_with_torch_alone_decides_as_marlsched(
    tmp_path: Path, traces_dir: Path, capsys
) -> None:
    """``record_rounds`` writes what the placing network was given and what marlsched decided; the example that
    imports torch and NumPy only (no marlsched module) gets the same scores and the same preemptions and starts
    in every round, hand-offs included, and says so with exit 0; a round altered in the file is found (exit 1)."""
    import importlib.util
    import subprocess
    import sys

    from marl.deploy.recorded_rounds import record_rounds

    folder, out = REPO / "experiments" / "policies" / "default-small", tmp_path / "results" / "rounds.npz"  # made
    with pytest.warns(UserWarning, match="interference"):
        counts = record_rounds(folder, "small", PHILLY_DAYS.format(traces_dir), out, rounds=30, skip=360)
    assert counts == {"rounds": 30, "preemptions": 2, "starts": 30}
    rec = dict(np.load(out))
    assert [str(n) for n in rec["inputs"]] == ["jobs", "parts", "gpus", "servers", "racks", "server_type", "cands"]
    assert list(rec["cands_features"])[-1] == "factor" and rec["jobs"].shape[:3] == rec["job_ids"].shape

    script = REPO / "experiments" / "examples" / "exported_policy.py"
    cmd = [sys.executable, "-X", "importtime", str(script), str(folder), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "30 rounds: scores within 0.0e+00 of marlsched's; decisions equal in 30 of 30" in proc.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
    assert "torch" in imported and not imported & {"marl", "cluster_sim", "interference", "topology", "experiments"}

    r = int(np.flatnonzero(rec["started"].any(axis=(1, 2)))[0])
    rec["started"][r] = False  # a round whose starts marlsched did not make
    np.savez(tmp_path / "altered.npz", **rec)
    np.savez(tmp_path / "unnamed.npz", **{k: v for k, v in rec.items() if k not in ("folder", "policy_sha256")})
    spec = importlib.util.spec_from_file_location("exported_policy", script)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    capsys.readouterr()
    assert example.main(str(folder), str(tmp_path / "altered.npz")) == 1
    assert "decisions equal in 29 of 30" in capsys.readouterr().out
    # a folder that decides through a rounds stage, and a recording not written yet, are said, not a traceback
    with pytest.raises(SystemExit, match="decide through the gavel-las rounds"):
        example.main(str(REPO / "experiments" / "policies" / "default-hetero"), str(out))
    with pytest.raises(SystemExit, match="no such file; write it first with `marlsched record-rounds"):
        example.main(str(folder), str(tmp_path / "none.npz"))
    # rounds recorded with another policy are no reference for this one, nor a placing network's for a plain one
    assert str(rec["folder"]) == str(folder) and len(str(rec["policy_sha256"])) == 64
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    (other / "policy.pt").write_bytes((folder / "policy.pt").read_bytes() + b"\0")
    with pytest.raises(SystemExit, match=re.escape(f"recorded with the policy in {folder}, not {other}'s network")):
        example.main(str(other), str(out))
    with pytest.raises(SystemExit, match=r"rounds of a placing network .* holds a non-placing one; record its own"):
        example.main(str(REPO / "experiments" / "policies" / "default-imitation"), str(tmp_path / "unnamed.npz"))


def test_record_rounds_refuses_agents_that_decide_otherwise_and_writes_nothing(tmp_path: Path) -> None:
    from marl.deploy.recorded_rounds import record_rounds

    out = tmp_path / "rounds.npz"
    with pytest.raises(ValueError, match="default-hetero: its agents decide through RoundsAgents"):
        record_rounds(REPO / "experiments" / "policies" / "default-hetero", "small-hetero", WORKLOAD, out)
    with pytest.raises(ValueError, match="none after the 100000 skipped; skip fewer"), pytest.warns(UserWarning):
        record_rounds(REPO / "experiments" / "policies" / "default-imitation", "small", WORKLOAD, out, skip=100_000)
    assert not list(tmp_path.iterdir())


def test_the_deployment_guide_names_every_input_column_in_the_networks_order() -> None:
    """The guide's table of inputs lists each array's columns as the code builds them, in order."""
    import re

    from marl.env.priority_features import JOB_FEATURES, PART_FEATURES
    from marl.env.topology_obs import topology_features

    text = (REPO / "docs" / "guide" / "deployment.md").read_text()
    listed: dict[str, list[str]] = {}
    for array, column in re.findall(r"^\| `(\w+)` \| `(\w+)` \|", text, re.M):
        listed.setdefault(array, []).append(column)
    want = {"jobs": list(JOB_FEATURES), "parts": list(PART_FEATURES)}
    want.update({f"{k.removesuffix('_features')}s": list(v) for k, v in topology_features(True).items()})
    assert listed == want
