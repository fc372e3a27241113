"""Extension points: a scheduler from a file of one's own, plugins that register placements, workload
kinds and interference models, the README's Python API, and the PettingZoo / Gymnasium interfaces."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from experiments.cli import main

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "experiments" / "examples"
SMALLEST_FIRST = f"{EXAMPLES / 'smallest_first.py'}:SmallestRequestFirst"
CLUSTER_64 = str(REPO / "experiments" / "configs" / "clusters" / "small-64.yaml")

# Two 4-GPU servers; four jobs at t = 0, 1, 2, 3 s (GPUs, seconds): (6, 100), (4, 50), (1, 10), (2, 20).
TINY_CLUSTER = "name: tiny\npods: 1\nracks_per_pod: 1\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: V100\n"
TINY_JOBS = (
    "timestamp,duration,num_gpus,gpu_time,cluster\n"
    "2017-10-01 00:00:00,100,6,600,vc1\n"
    "2017-10-01 00:00:01,50,4,200,vc1\n"
    "2017-10-01 00:00:02,10,1,10,vc1\n"
    "2017-10-01 00:00:03,20,2,40,vc1\n"
)
# By hand. Smallest request first: job 0 starts at 0 (2 GPUs stay free); job 1 (4) waits; job 2 (1) starts
# at 2 and ends at 12; job 3 (2) cannot start at 3 (1 free), starts at 12 and ends at 32; job 1 starts when
# job 0 ends at 100 and ends at 150. JCTs 100, 149, 10, 29. FIFO (strict order): jobs 1-3 all wait for
# job 0 and start at 100: JCTs 100, 149, 108, 117.
HAND_JCT = {"smallest-first": [100, 149, 10, 29], "fifo": [100, 149, 108, 117]}


@pytest.fixture()
def tiny(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "cluster.yaml").write_text(TINY_CLUSTER)
    (tmp_path / "jobs.csv").write_text(TINY_JOBS)
    return tmp_path / "cluster.yaml", tmp_path / "jobs.csv"


def _jcts(folder: Path) -> list[float]:
    rows = (folder / "jobs.csv").read_text().splitlines()[1:]
    return [float(r.split(",")[5]) for r in rows]


def test_example_scheduler_runs_from_the_cli_with_the_hand_computed_result(tiny, tmp_path: Path, capsys) -> None:
    cluster, jobs = tiny
    out = tmp_path / "out"
    args = ["simulate", "--cluster", str(cluster), "--workload", f"philly:{jobs}", "--no-perf-model", "--quiet"]
    # --policy given twice: both run (the second adds to the first); the cluster file is said as it was read
    assert main([*args, "--policy", f"{SMALLEST_FIRST}", "--policy", "fifo", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith("tiny: 2 servers, ")
    summary = {m["scheduler"]: m for m in json.loads((out / "summary.json").read_text())}
    assert summary["smallest-first"]["avg_jct"] == pytest.approx(72.0)
    assert summary["fifo"]["avg_jct"] == pytest.approx(118.5)
    for name, jct in HAND_JCT.items():
        np.testing.assert_allclose(_jcts(out / name), jct)
    # constructor options after the class: another placement, same (placement-blind) JCTs here
    assert main([*args, "--policy", f"{SMALLEST_FIRST},placement=spread", "--out", str(tmp_path / "o2")]) == 0
    np.testing.assert_allclose(_jcts(tmp_path / "o2"), HAND_JCT["smallest-first"])


def test_example_scheduler_runs_in_a_run_config_beside_built_in_ones(
    ray_shared, tiny, tmp_path: Path, monkeypatch
) -> None:
    from experiments.run import run_experiment
    from experiments.run_config import parse_experiment_config

    cluster, jobs = tiny
    monkeypatch.chdir(tmp_path)
    cfg = parse_experiment_config(
        {
            "name": "custom",
            "cluster": str(cluster),
            "workload": f"philly:{jobs}",
            "interference": "none",
            "perf_model": False,
            "seeds": [1],
            "schedulers": ["fifo", f"{SMALLEST_FIRST}"],
            "baselines": ["fifo"],
            "timeline_points": 20,
            "plugins": [str(EXAMPLES / "rack_local_placement.py")],
            "ray": {"num_cpus": 2},
        }
    )
    summary = run_experiment(cfg, tmp_path / "run", log=lambda _: None)
    assert summary["tasks_run"] == 2
    rows = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    avg = {r.split(",")[header.index("scheduler")]: float(r.split(",")[header.index("avg_jct")]) for r in rows[1:]}
    assert avg == {"fifo": pytest.approx(118.5), SMALLEST_FIRST: pytest.approx(72.0)}
    # each run's jobs, one row each, as simulate --out writes them
    jobs = (tmp_path / "run" / "tasks").glob("*/jobs.csv")
    assert sorted(len(f.read_text().splitlines()) for f in jobs) == [1 + len(TINY_JOBS.splitlines()) - 1] * 2
    # what recomputes it later: the code version, the libraries, and the custom scheduler's and plugin's files
    import hashlib
    import json

    from marl.deploy.policy_files import code_version

    prov = json.loads((tmp_path / "run" / "state.json").read_text())["invocations"][-1]["provenance"]
    assert prov["code_version"] == code_version() and {"numpy", "torch", "ray"} <= set(prov["libraries"])
    for path in (EXAMPLES / "smallest_first.py", EXAMPLES / "rack_local_placement.py", Path(tiny[1])):
        assert prov["files"][str(path.resolve())] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert prov["command"] == f"marlsched run {cfg.source}"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("no_such_module_xyz:Sched", "cannot import module 'no_such_module_xyz'"),
        ("missing/file.py:Sched", f"missing/file.py: no such file (read from {Path.cwd()}, where the command runs"),
        (f"{EXAMPLES / 'smallest_first.py'}:Nope", "has no scheduler 'Nope'; schedulers it defines: SmallestRequest"),
        ("cluster_sim.placement:FreePool", "does not speak the scheduler protocol (no reset, schedule)"),
        (f"{SMALLEST_FIRST},colour=red", "unexpected keyword argument 'colour'"),
        (f"{SMALLEST_FIRST},placement=nowhere", "SmallestRequestFirst(placement='nowhere') failed: unknown placement"),
        (f"{SMALLEST_FIRST},oops", "unknown scheduler 'oops'"),  # a second name, not an option
        ("fifo+nowhere", "unknown placement 'nowhere'; placements: best-fit"),  # the part that is wrong
        (str(EXAMPLES / "smallest_first.py"), "a scheduler of your own is named FILE:Class"),
        ("", "--policy '' names no scheduler"),
        (" , ", "names no scheduler"),
    ],
)
def test_bad_policy_spec_gets_a_one_line_error(tiny, capsys, policy: str, expected: str) -> None:
    cluster, jobs = tiny
    code = main(["simulate", "--cluster", str(cluster), "--workload", f"philly:{jobs}", "--policy", policy])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("marlsched simulate: error:") and expected in err, err


def test_an_instance_run_from_python_is_held_to_the_protocol_before_the_run(tiny) -> None:
    """``sim.run(obj)`` from a notebook gets the CLI's one-line protocol message (not an AttributeError mid-run),
    and a ``schedule`` that returns None (a forgotten ``return``) is named at once, not as a stalled run."""
    from cluster_sim.build import build_simulator
    from cluster_sim.protocol import InvalidDecision

    cluster, jobs = tiny

    class NoReset:
        name = "no-reset"

        def schedule(self, view):
            return []

    class Forgot(NoReset):
        name = "forgot"

        def reset(self, view) -> None:
            pass

        def schedule(self, view):
            super().schedule(view)  # the decisions made, the `return` forgotten

    sim = build_simulator(str(cluster), f"philly:{jobs}")
    with pytest.raises(TypeError, match=r"NoReset does not speak the scheduler protocol \(no reset\); a scheduler has"):
        sim.run(NoReset())
    with pytest.raises(InvalidDecision, match=r"forgot at t=.* s: schedule\(view\) returned None; return a list"):
        sim.run(Forgot())  # a ValueError: the command line says it in one line


def test_an_error_in_a_schedulers_own_code_is_said_with_its_scheduler_time_file_and_line(
    tiny, tmp_path: Path, capsys
) -> None:
    """A scheduler of one's own that raises (a KeyError, a ValueError of its own code): the command's one line says
    the error, which scheduler decided when, and the file and line of the user's code that raised it."""
    cluster, jobs = tiny
    code = tmp_path / "crash.py"
    code.write_text(
        "def crash(view):\n    return {}['oops']\n\n\ndef bad(view):\n    return [int('x')]\n\n\n"
        "def typo(view):\n    return view.qeue\n\n\ndef bug(view):\n    raise RuntimeError('my bug')\n"
    )
    base = ["simulate", "--cluster", str(cluster), "--workload", f"philly:{jobs}", "--quiet", "--policy"]
    assert main([*base, f"{code}:crash"]) == 2
    assert capsys.readouterr().err == (
        f"marlsched simulate: error: KeyError: 'oops'; while crash decided at t=0 s; raised at {code}, line 2, in "
        "crash\n"
    )
    assert main([*base, f"{code}:bad"]) == 2
    assert (
        f"ValueError: invalid literal for int() with base 10: 'x'; while bad decided at t=0 s; raised at {code}, line 6"
        in (capsys.readouterr().err)
    )
    # any exception of the user's own code, not only a user error's type: one line, no traceback
    for name, said, line in (("typo", "AttributeError: ", 10), ("bug", "RuntimeError: my bug", 14)):
        assert main([*base, f"{code}:{name}"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and f"raised at {code}, line {line}, in {name}" in err, err
    # a constructor option the class does not take: named with those it does
    cls = tmp_path / "cls.py"
    cls.write_text("class Mine:\n    name = 'mine'\n\n    def __init__(self, placement='best-fit', skip=4):\n"
                   "        pass\n\n    def reset(self, view):\n        pass\n\n    def schedule(self, view):\n"
                   "        return []\n")  # fmt: skip
    assert main([*base, f"{cls}:Mine,skpi=8"]) == 2
    assert "got an unexpected keyword argument 'skpi'; Mine takes placement, skip" in capsys.readouterr().err


def test_get_policy_builds_a_scheduler_of_your_own_from_its_spec(tiny) -> None:
    """``get_policy("FILE:Class,key=value")`` in Python, as ``--policy`` takes it: the same hand-computed JCTs."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    cluster, jobs = tiny
    sched = get_policy(f"{SMALLEST_FIRST},placement=spread")
    result = build_simulator(str(cluster), f"philly:{jobs}", seed=0, perf_model=False).run(sched)
    np.testing.assert_allclose(np.sort(result.jct), np.sort(HAND_JCT["smallest-first"]))
    # its options may come beside the spec too (a run config's scheduler_options), but only once
    again = build_simulator(str(cluster), f"philly:{jobs}", seed=0, perf_model=False)
    np.testing.assert_array_equal(again.run(get_policy(SMALLEST_FIRST, placement="spread")).jct, result.jct)
    with pytest.raises(ValueError, match="option placement given in the spec and again beside it; give it once"):
        get_policy(f"{SMALLEST_FIRST},placement=spread", placement="consolidate")


def test_a_scheduler_that_is_one_function_runs_as_its_class_does(tiny) -> None:
    """The one-call form: ``FILE:function`` on the command line and ``FunctionScheduler(fn)`` in Python schedule
    as the class around the same rule, job for job; a function takes no option but its name."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from cluster_sim.protocol import FunctionScheduler
    from cluster_sim.scheduler_spec import import_target

    cluster, jobs = tiny
    runs = {}
    fn = import_target(str(EXAMPLES / "smallest_first.py")).smallest_first
    for label, sched in (
        ("class", get_policy(SMALLEST_FIRST)),
        ("spec", get_policy(f"{EXAMPLES / 'smallest_first.py'}:smallest_first,name=fn")),
        ("python", FunctionScheduler(fn)),
    ):
        runs[label] = (sched.name, build_simulator(str(cluster), f"philly:{jobs}", perf_model=False).run(sched).jct)
    assert [name for name, _ in runs.values()] == ["smallest-first", "fn", "smallest-first"]
    assert all(np.array_equal(jct, runs["class"][1]) for _, jct in runs.values())
    with pytest.raises(ValueError, match="smallest_first is a function: it takes no option 'placement'"):
        get_policy(f"{EXAMPLES / 'smallest_first.py'}:smallest_first,placement=spread")


def test_bad_custom_scheduler_in_a_run_config_names_its_entry() -> None:
    from experiments.run_config import ExperimentConfigError, parse_experiment_config

    with pytest.raises(ExperimentConfigError, match=r"schedulers\.1.*no scheduler 'Nope'"):
        parse_experiment_config({"schedulers": ["fifo", f"{EXAMPLES / 'smallest_first.py'}:Nope"]}, "exp.yaml")
    with pytest.raises(ExperimentConfigError, match=r"plugins\.0.*no such file"):
        parse_experiment_config({"plugins": ["nowhere/plugin.py"]}, "exp.yaml")
    # a short label for a scheduler of your own, its options beside it (reports name it by the label)
    named = {
        "schedulers": ["mine", "fifo"],
        "scheduler_options": {"mine": {"policy": SMALLEST_FIRST, "placement": "spread"}},
    }
    assert parse_experiment_config(named, "exp.yaml").policy_of("mine") == (SMALLEST_FIRST, {"placement": "spread"})
    named["scheduler_options"]["mine"]["speed"] = 2
    with pytest.raises(ExperimentConfigError, match=r"scheduler_options\.mine.*speed") as refused:
        parse_experiment_config(named, "exp.yaml")
    # named with the options the class takes, not with every built-in scheduler's name
    assert "SmallestRequestFirst takes placement" in str(refused.value) and "allowed:" not in str(refused.value)


def test_plugins_register_a_placement_a_workload_kind_and_an_interference_model(tmp_path: Path) -> None:
    (tmp_path / "my.csv").write_text("arrival_s,gpus,duration_s,tenant\n0,8,100,a\n5,4,50,b\n6,1,10,a\n")
    plugins = [f"--plugin={EXAMPLES / n}.py" for n in ("rack_local_placement", "jobs_csv_workload")]
    after = ["--plugin", str(EXAMPLES / "neighbour_count_interference.py")]  # after the command: the same
    out = tmp_path / "out"
    code = main(
        [*plugins, "simulate", *after, "--cluster", "small",
         "--workload", f"jobs:{tmp_path / 'my.csv'},model=bert-squad", "--policy", "fifo+rack-local,gandiva",
         "--interference", "per-neighbour", "--interference-model", "0.1", "--no-perf-model", "--quiet",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    # rack-local keeps every job on its own servers: nobody shares, nobody slows down
    np.testing.assert_allclose(_jcts(out / "fifo_rack-local"), [100, 50, 10])
    # gandiva packs the 1-GPU job (t=6) next to the 4-GPU one (t=5): both run at 0.9 while they share;
    # job 1 did 1 s alone, 10/0.9 s shared (10 s of work), then its last 39 s alone (jobs.csv: 3 decimals)
    np.testing.assert_allclose(_jcts(out / "gandiva"), [100, 1 + 10 / 0.9 + 39, 10 / 0.9], atol=1e-3)


def _workload_kinds(_: object) -> list[str]:
    """In a trainer's pool process: the workload kinds it knows."""
    from cluster_sim.workload_spec import WORKLOAD_KINDS

    return sorted(WORKLOAD_KINDS)


def test_a_plugins_workload_kind_reaches_the_processes_training_starts(tmp_path: Path) -> None:
    """``marlsched --plugin jobs_csv_workload.py train`` on ``jobs:`` windows: RLlib's EnvRunners (other processes)
    build the environment from its config, which carries the plugins the command imported, and a trainer's pool
    processes import them at their start, so neither meets an unknown kind 'jobs'."""
    import subprocess
    import sys

    import yaml

    from cluster_sim.plugins import load_plugins, loaded_plugins
    from marl.training.priority_train import parse_config, ppo_config
    from marl.training.worker_map import WorkerPool

    rng = np.random.default_rng(0)
    rows = [f"{t:.0f},{rng.choice([4, 8])},{rng.uniform(600, 7200):.0f},lab" for t in np.sort(rng.uniform(0, 3e5, 150))]
    (tmp_path / "jobs.csv").write_text("arrival_s,gpus,duration_s,tenant\n" + "\n".join(rows) + "\n")
    plugin = str(EXAMPLES / "jobs_csv_workload.py")
    load_plugins([plugin])
    assert plugin in loaded_plugins()
    env = {"trace": f"jobs:{tmp_path / 'jobs.csv'}", "train_start": 0, "train_end": 3e5, "window_days": 1,
           "load": 0.3, "interference": "none", "interference_data": None}  # fmt: skip
    env_config = dict(ppo_config(parse_config(yaml.safe_load(yaml.safe_dump({"env": env})), "x.yaml")).env_config)
    assert plugin in env_config["plugins"]
    build = "import json, sys; from marl.env.priority_env import PriorityEnv as E; E(json.loads(sys.argv[1])).reset()"
    proc = subprocess.run([sys.executable, "-c", build, json.dumps(env_config)], capture_output=True, text=True,
                          cwd=REPO)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    import warnings

    from experiments.cli import _format_warning

    shown, warnings.formatwarning = warnings.formatwarning, _format_warning  # as the command sets it
    try:
        pool = WorkerPool(2)
    finally:
        warnings.formatwarning = shown
    try:
        assert all("jobs" in kinds for kinds in pool.map(_workload_kinds, [0, 1]))
        # and its warnings print as the command's do: one marlsched line, not Python's file and source line
        lines = list(pool.map(_warning_line, [str(REPO / "cluster_sim" / "build.py")] * 2))
        assert lines == ["marlsched: warning: estimated\n"] * 2
    finally:
        pool.close()


def _warning_line(filename: str) -> str:
    """In a trainer's pool process: how a warning of marlsched's own code is printed."""
    import warnings

    return warnings.formatwarning("estimated", UserWarning, filename, 70)


def _touch(path: str) -> None:
    """In a trainer's pool process: say it started."""
    Path(path).touch()


POOL_INTERRUPTED = """
import sys, time
from marl.training.worker_map import WorkerPool
from tests.test_extensions import _touch
pool = WorkerPool(2)
try:
    list(pool.map(_touch, [sys.argv[1] + "/a", sys.argv[1] + "/b"]))
    open(sys.argv[1] + "/played", "w").close()
    time.sleep(60)  # the trainer's own work (its network's update, a window played here) while the pool idles
finally:
    pool.close()
"""


def test_ctrl_c_stops_a_trainer_without_a_traceback_from_each_of_its_pools_processes(tmp_path: Path) -> None:
    """Ctrl-C reaches the terminal's whole process group: the pool's processes leave it to the trainer, which
    ends them, instead of each printing its own KeyboardInterrupt traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", POOL_INTERRUPTED, str(tmp_path)], cwd=REPO, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a shell starts it (a test may not)
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (tmp_path / "played").exists() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        time.sleep(0.1)
    interrupted = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - interrupted < 20
    assert proc.returncode != 0 and err.count("Traceback") == 1 and "SpawnProcess" not in err, err[-2000:]


def test_an_interrupted_training_says_whether_it_can_resume(tmp_path: Path) -> None:
    """A training with a checkpoint is told to add --resume; one without (ES, DAgger, ...) that it starts again."""
    from argparse import Namespace

    from experiments.cli import _after_interrupt

    args = Namespace(command="train", out=str(tmp_path))
    assert "No checkpoint was kept" in _after_interrupt(args) and "starts the training again" in _after_interrupt(args)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "progress.json").write_text('{"rows": [{}, {}]}')
    assert "last checkpoint (after iteration 2: an iteration is saved after its line)" in _after_interrupt(args)
    assert "add --resume to the same command" in _after_interrupt(args)
    (tmp_path / "checkpoint" / "progress.json").unlink()
    (tmp_path / "checkpoint").rmdir()
    (tmp_path / "policy").mkdir()
    (tmp_path / "policy" / "metadata.json").write_text("{}")
    assert f"The policy was written before the interrupt: {tmp_path / 'policy'} is complete" in _after_interrupt(args)
    assert "the same command resumes" in _after_interrupt(Namespace(command="run", out=str(tmp_path)))


def test_an_elastic_scheduler_of_ones_own_is_told_to_ask_for_every_point_and_imports_its_neighbours(
    tmp_path: Path,
) -> None:
    """An elastic scheduler consulted only where jobs wait keeps running jobs at their size between arrivals: the run
    warns (ElasticPointsWarning) unless it declares wants_all_points; and a scheduler file imports a module beside
    it, as ``python FILE`` would."""
    import warnings

    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from cluster_sim.protocol import ElasticPointsWarning

    (tmp_path / "shared_rules.py").write_text("def nothing(view):\n    return []\n")
    (tmp_path / "mine.py").write_text(
        "from shared_rules import nothing\n\n\nclass Grow:\n    name = 'grow'\n    elastic = True\n\n"
        "    def reset(self, view):\n        pass\n\n    def schedule(self, view):\n        return nothing(view)\n"
    )
    sched = get_policy(f"{tmp_path / 'mine.py'}:Grow")
    sim = build_simulator("small", "synthetic:5,load=0.5", seed=0)
    with pytest.warns(ElasticPointsWarning, match="grow: elastic, but consulted only where jobs wait"):
        sim.start(sched)
    sched.wants_all_points = True
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElasticPointsWarning)
        sim.start(sched)


def test_the_elastic_example_resizes_running_jobs_to_equal_shares_through_the_frame(
    traces_dir: Path,
) -> None:
    """``equal_share.py`` is one ``allocate`` on :class:`ElasticPolicy`: on Pollux's workload-1 it is consulted at
    its rounds between arrivals, grows and shrinks running jobs (more GPUs than they asked for while few jobs
    run) and finishes every job."""
    import warnings

    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from cluster_sim.protocol import ElasticPointsWarning, Resize

    sched = get_policy(f"{EXAMPLES / 'equal_share.py'}:EqualShare")
    resized: list[int] = []
    schedule = sched.schedule

    def counting(view):
        decisions = schedule(view)
        resized.extend(len(d.gpus) - len(view.placement(d.job)) for d in decisions if isinstance(d, Resize))
        return decisions

    sched.schedule = counting
    workload = f"pollux:{traces_dir}/pollux-osdi21/workloads/workload-1.csv"
    sim = build_simulator("pollux-testbed", workload, preset="pollux")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ElasticPointsWarning)
        result = sim.run(sched)
    assert sched.name == "equal-share" and len(result.jct) == len(sim.jobs.arrival) == 160
    assert max(resized) > 0 and min(resized) < 0  # running jobs grew and shrank
    assert sched.rounds > 160  # consulted at its rounds, not only at the 160 arrivals


def test_registries_refuse_a_taken_name_and_plugins_fail_in_one_line(tmp_path: Path) -> None:
    from cluster_sim.placement import consolidate, register_placement
    from cluster_sim.plugins import PluginError, import_target
    from cluster_sim.policies import register_policy
    from cluster_sim.workload_spec import register_workload_kind
    from interference import register_interference_model

    with pytest.raises(ValueError, match="already registered"):
        register_placement("consolidate", consolidate)
    with pytest.raises(ValueError, match="already registered"):
        register_policy("fifo", lambda seed: None)
    with pytest.raises(ValueError, match="already registered"):
        register_workload_kind("philly", lambda arg, **kw: None, syntax="philly:PATH")
    with pytest.raises(ValueError, match="already registered"):
        register_interference_model("oracle", lambda path: None)
    bad = tmp_path / "bad_plugin.py"
    bad.write_text("1 / 0\n")
    with pytest.raises(PluginError, match=r"importing .*bad_plugin.py failed: ZeroDivisionError"):
        import_target(str(bad))


def test_docs_python_api_runs_exactly_as_printed(tmp_path: Path, monkeypatch, capsys) -> None:
    page = (REPO / "docs" / "guide" / "simulate.md").read_text()
    section = page.split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/guide/simulate.md (Python API)", "exec"), {"__name__": "__docs__"})
    printed = capsys.readouterr().out
    fifo, tiresias = (float(re.search(rf"{n}\s+avg JCT\s+(\d+) s", printed).group(1)) for n in ("fifo", "tiresias"))
    assert fifo > 1.2 * tiresias > 0, "the example must run where the schedulers differ (jobs queue)"
    assert f"fifo {fifo:,.0f} s and tiresias {tiresias:,.0f} s" in " ".join(section.split()), "the page's figures"
    metrics = json.loads((tmp_path / "results" / "api-demo" / "metrics.json").read_text())
    assert metrics["scheduler"] == "tiresias" and metrics["jobs_completed"] == 2000
    assert metrics["avg_jct"] == pytest.approx(tiresias, abs=1)


# ------------------------------------------------------------------------------- standard environments


ENV_64 = {"cluster": CLUSTER_64, "workload": "synthetic:200,window_load=1.2", "interference": "none",
          "interference_data": None}  # fmt: skip


def test_pettingzoo_parallel_env_passes_the_api_test() -> None:
    from pettingzoo.test import parallel_api_test

    from marl.env.standard_envs import ParallelSchedEnv

    env = ParallelSchedEnv({**ENV_64, "num_agents": 4, "relative": False})
    parallel_api_test(env, num_cycles=1000)
    assert "critic" not in env.observation_space("p0").spaces  # the reference's state is training-only
    # play one episode to its end with random residuals: every agent ends together, nobody is left
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    total, steps = 0.0, 0
    while env.agents:
        acts = {a: rng.normal(0, 0.5, env.action_space(a).shape).astype(np.float32) for a in env.agents}
        _, rew, term, trunc, infos = env.step(acts)
        total += rew["p0"]
        steps += 1
    assert all(term.values()) and not any(trunc.values()) and steps > 1
    assert infos["p0"]["jobs"] == 200
    # the shared reward (not relative to a reference here) sums to minus the total JCT in reward_scale units
    assert total == pytest.approx(-infos["p0"]["avg_jct"] * 200 / 360_000.0, rel=1e-9)
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})
    env.reset(seed=3)
    with pytest.raises(ValueError, match="action_space"):
        env.step({"p0": np.zeros(3)})


def test_gymnasium_env_at_zero_residual_is_qssf_and_passes_check_env() -> None:
    from gymnasium.utils.env_checker import check_env

    from cluster_sim.build import build_simulator
    from marl.env.priority_agents import PriorityAgents
    from marl.env.standard_envs import SingleAgentSchedEnv

    env = SingleAgentSchedEnv(ENV_64)
    check_env(env, skip_render_check=True)
    with pytest.raises(ValueError, match="one agent"):
        SingleAgentSchedEnv({**ENV_64, "num_agents": 2})
    # zero residuals play the untrained network (QSSF's scores), the same schedule as the heuristic agents
    env.reset(seed=1)
    done, steps = False, 0
    while not done:
        _, _, done, _, info = env.step(np.zeros(env.action_space.shape, dtype=np.float32))
        steps += 1
    sim = build_simulator(CLUSTER_64, ENV_64["workload"], seed=env.parallel.env.workload_seed, interference="none",
                          restart_cost=30.0)  # fmt: skip
    assert info["avg_jct"] == float(sim.run(PriorityAgents(None, num_agents=1)).jct.mean()) and steps > 1
    # large residuals change the schedule: the action is used
    env.reset(seed=1)
    rng = np.random.default_rng(1)
    done = False
    while not done:
        _, _, done, _, other = env.step(rng.normal(0, 5, env.action_space.shape).astype(np.float32))
    assert other["avg_jct"] != info["avg_jct"]


def test_sb3_example_trains_and_runs_in_marlsched_simulate(tmp_path: Path, capsys) -> None:
    pytest.importorskip("stable_baselines3")
    import importlib.util

    spec = importlib.util.spec_from_file_location("sb3_example", EXAMPLES / "sb3_single_agent.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.main(["--steps", "256", "--out", str(tmp_path / "sb3"), "--cluster", CLUSTER_64, "--workload",
                  ENV_64["workload"]])  # fmt: skip
    assert (tmp_path / "sb3" / "model.zip").is_file()
    out = tmp_path / "eval"
    policy = f"{EXAMPLES / 'sb3_single_agent.py'}:SB3Scheduler,model={tmp_path / 'sb3'},fifo"
    code = main(["simulate", "--cluster", CLUSTER_64, "--workload", "synthetic:80,load=10", "--policy", policy,
                 "--quiet", "--out", str(out)])  # fmt: skip
    assert code == 0
    summary = {m["scheduler"]: m for m in json.loads((out / "summary.json").read_text())}
    assert summary["sb3-ppo"]["jobs_completed"] == 80 and summary["sb3-ppo"]["decisions"] > 0


def test_two_schedulers_of_one_name_are_refused_before_they_overwrite_each_other(tmp_path, capsys) -> None:
    """``--policy fifo,fifo`` (or two predictors' GpuPacking, both ``pack-aware``) would share one results folder
    and one row: refused naming both, nothing written; ``name=`` sets one apart."""
    from experiments.cli import main

    out = tmp_path / "out"
    base = ["simulate", "--cluster", "small", "--workload", "synthetic:500,window_load=0.9", "--quiet"]
    assert main([*base, "--policy", "qssf,fifo,fifo", "--out", str(out)]) == 2
    assert "'fifo' and 'fifo' are both named 'fifo'" in capsys.readouterr().err and not out.exists()
    spec = "experiments/examples/smallest_first.py:SmallestRequestFirst"  # two placements, one name
    assert main([*base, "--policy", f"{spec},{spec},placement=consolidate", "--out", str(out)]) == 2
    assert "are both named 'smallest-first'" in capsys.readouterr().err and not out.exists()
    folder = "marl:experiments/policies/philly-small-dagger"
    assert main([*base, "--policy", f"{folder},{folder},num_agents=2,name=two-agents", "--out", str(out)]) == 0
    assert {"marl_experiments_policies_philly-small-dagger", "two-agents"} <= {p.name for p in out.iterdir()}


def test_an_output_folder_is_held_by_one_command_and_simulate_replaces_its_own_results(tmp_path, capsys) -> None:
    """A second command writing a held folder is refused at once, naming the holder (a finished one leaves the
    lock file empty); a simulate into its own earlier --out replaces those results (no old file survives), into a
    folder of other files refuses."""
    from cluster_sim.out_folder import folder_lock

    out = tmp_path / "out"
    args = ["simulate", "--cluster", "small", "--workload", "synthetic:60,load=2", "--quiet", "--out", str(out)]
    with folder_lock(out, "run"):
        assert main([*args, "--policy", "fifo"]) == 2
        assert "is being written by marlsched run (pid" in capsys.readouterr().err
    assert main([*args, "--policy", "fifo,sjf"]) == 0
    assert {p.name for p in out.iterdir()} == {".lock", "fifo", "sjf", "summary.json", "simulate.json"}
    prov = json.loads((out / "simulate.json").read_text())["provenance"]
    assert prov["command"] == shlex.join(["marlsched", *args, "--policy", "fifo,sjf"])
    assert prov["code_version"] and prov["files"] == {}  # synthetic jobs and built-in schedulers read no file
    assert main([*args, "--policy", "tiresias"]) == 0
    assert {p.name for p in out.iterdir()} == {".lock", "jobs.csv", "metrics.json", "simulate.json"}
    assert json.loads((out / "metrics.json").read_text())["scheduler"] == "tiresias"
    assert (out / ".lock").read_text() == ""  # a finished command's lock file names no process
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert main([*args[:-1], str(other), "--policy", "fifo"]) == 2
    assert "holds files that no simulate wrote (notes.txt)" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "keep me"


def test_a_damaged_policy_folder_is_named_with_the_fix(tmp_path, capsys) -> None:
    """A truncated network (policy.pt and its program policy.pt2) or metadata.json: one line naming the file,
    what is wrong and what to do, from simulate and from a run config (checked when the config is read, not
    inside a Ray task). A truncated policy.pt alone still runs, from the program (where this torch reads it)."""
    import shutil

    from experiments.run_config import ExperimentConfigError, parse_experiment_config
    from marl.deploy.policy_files import load_program

    shipped = Path(__file__).parents[1] / "experiments" / "policies" / "philly-small"
    try:
        program_loads = load_program(shipped / "policy.pt2") is not None
    except ValueError:  # written by a torch release whose programs this torch does not read (2.13's in 2.3)
        program_loads = False
    args = ["simulate", "--cluster", "small", "--workload", "synthetic:30", "--quiet", "--policy"]
    for damaged, name, keep in ((("policy.pt",), "", 2000), (("policy.pt", "policy.pt2"), "policy.pt2", 2000),
                                (("metadata.json",), "metadata.json", 100)):  # fmt: skip
        bad = tmp_path / "_".join(damaged).replace(".", "_")
        shutil.copytree(shipped, bad)
        for file in damaged:
            (bad / file).write_bytes((shipped / file).read_bytes()[:keep])
        if not name and program_loads:
            with pytest.warns(UserWarning, match="policy.pt: not a readable TorchScript policy .* policy.pt2"):
                assert main([*args, f"marl:{bad}"]) == 0
            continue
        if not name:  # a torch of another export schema than the one that wrote the shipped program: it says so
            assert main([*args, f"marl:{bad}"]) == 2
            err = capsys.readouterr().err.strip()
            assert f"{bad / 'policy.pt2'}: written by torch " in err and f"export-program {bad} --force" in err, err
            continue
        assert main([*args, f"marl:{bad}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{bad / name}:" in err and "train it again" in err, err
        with pytest.raises(ExperimentConfigError, match=re.escape(f"{bad / name}:")):
            parse_experiment_config(
                {"name": "x", "cluster": "small", "workload": "synthetic:30", "interference": "none", "seeds": [0],
                 "schedulers": ["fifo", f"marl:{bad}"]}, "x.yaml",
            )  # fmt: skip
    # a file where a folder belongs: said so, and an interference model is pointed to its option
    model = Path(__file__).parents[1] / "experiments" / "policies" / "interference-gavel" / "model.json"
    assert main([*args, f"marl:{model}"]) == 2
    assert "is a file, not a policy folder (an interference model: give it to --interference-model)" in (
        capsys.readouterr().err
    )


def test_every_documented_command_names_what_exists(monkeypatch) -> None:
    """Each command of the README and the docs pages (the runner's, fast or not) parses, and what it names
    exists and is understood: workload specs, clusters, schedulers (custom ones loaded), configs and their
    workload labels, data files, scripts. Files an earlier command writes (results/...) are taken on trust.
    Running them all is the job of experiments/readme_examples.py (the fast ones run in tests/test_docs.py)."""
    from cluster_sim.plugins import load_plugins
    from cluster_sim.workload_spec import check_workload_spec
    from experiments.cli import build_parser
    from experiments.readme_examples import all_examples
    from experiments.run_config import load_experiment_config
    from experiments.simulate import make_scheduler_by_name, split_policies
    from marl.training.recipes import load_recipe_config
    from topology.datacenter import CLUSTER_PRESETS

    monkeypatch.chdir(REPO)
    commands = [e.command for e in all_examples()]
    assert len(commands) >= 40
    checked = 0
    for line in commands:
        argv = shlex.split(line)
        if argv[0] == "python":
            if argv[1] == "-m":
                import importlib.util

                assert importlib.util.find_spec(argv[2]) is not None, line
            else:
                assert (REPO / argv[1]).is_file(), line
            continue
        if argv[0] != "marlsched":
            continue  # ray start / job submit
        args = build_parser().parse_args(argv[1:])
        if args.plugin:
            load_plugins(args.plugin)
        later = lambda p: str(p).startswith("results/")  # noqa: E731
        if args.command == "simulate":
            check_workload_spec(args.workload)
            assert args.cluster in CLUSTER_PRESETS or Path(args.cluster).is_file(), line
            for name in split_policies(args.policy):
                if not later(name.removeprefix("marl:")) and "=results/" not in name:
                    make_scheduler_by_name(name, 0)
        elif args.command == "run":
            load_experiment_config(args.config, workloads=args.workload)
        elif args.command in ("train", "train-priority"):
            load_recipe_config(args.config)
        elif args.command == "interference":
            data = getattr(args, "data", None)
            sources = data if isinstance(data, list) else [data]  # train takes --data again for each source
            for value in (*sources, getattr(args, "model", None), getattr(args, "pairs", None)):
                if value and not later(value):
                    assert Path(value.removeprefix("gavel:").removeprefix("pairs:")).exists(), (line, value)
        checked += 1
    assert checked >= 35


def test_readme_examples_runner_runs_commands_in_order_and_stops_at_a_failure(tmp_path: Path) -> None:
    """The runner that CI-style checks the README runs each example in a fresh shell with the project's
    environment active, skips what needs a multi-machine cluster, and stops at the first failure."""
    from experiments import readme_examples

    readme = tmp_path / "README.md"
    setup = "```bash\nsetup\n```\n```bash\ntests\n```\n```bash\n. .venv/bin/activate\n```\n"
    readme.write_text(setup + "```bash\nmarlsched --help > /dev/null  # a comment\n"
                      "ray start --address=HEAD_IP:6379\nfalse\necho never\n```\n")  # fmt: skip
    commands = readme_examples.readme_commands(readme)
    assert commands == ["marlsched --help > /dev/null", "ray start --address=HEAD_IP:6379", "false", "echo never"]
    assert readme_examples.skip_reason(commands[1]) and not readme_examples.skip_reason(commands[0])
    import subprocess
    import sys

    runner = [sys.executable, "experiments/readme_examples.py", "--readme", str(readme), "--logs", str(tmp_path)]
    proc = subprocess.run(runner, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[1/4]" in proc.stdout and "ok in" in proc.stdout and "[2/4] skipped" in proc.stdout
    assert "FAILED (exit 1)" in proc.stderr and "--from 3" in proc.stderr and "[4/4]" not in proc.stdout


def test_a_results_provenance_hashes_the_policy_folder_and_the_trace_it_read(tmp_path: Path, traces_dir: Path) -> None:
    """``simulate.json`` names what the numbers came from beyond the code: every file of the ``marl:DIR`` folder its
    loader reads (weights, metadata; not README or plots) and the trace, each with its SHA-256."""
    import hashlib

    folder = REPO / "experiments" / "policies" / "philly-small-dagger"
    trace = traces_dir / "pollux-osdi21" / "traces" / "philly.csv"
    out = tmp_path / "out"
    args = ["simulate", "--cluster", "small", "--workload", f"philly:{trace},start=2017-11-07,end=2017-11-08,load=0.9",
            "--policy", f"marl:{folder}", "--quiet", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    files = json.loads((out / "simulate.json").read_text())["provenance"]["files"]
    read = [trace, *(p for p in folder.iterdir() if p.suffix not in (".md", ".png"))]
    assert files == {str(p.resolve()): hashlib.sha256(p.read_bytes()).hexdigest() for p in read}
    assert str((folder / "policy.pt").resolve()) in files and str((folder / "README.md").resolve()) not in files
    # the interference measurements a run read are hashed too, and GPU sharing is in its table's title
    gavel = traces_dir / "gavel" / "simulation_throughputs.json"
    shared = ["simulate", "--workload", "synthetic:40,load=1.0", "--policy", "fifo", "--gpu-sharing", "--interference",
              "oracle", "--interference-model", f"gavel:{gavel}", "--out", str(tmp_path / "shared")]  # fmt: skip
    assert main(shared) == 0
    files = json.loads((tmp_path / "shared" / "simulate.json").read_text())["provenance"]["files"]
    assert files == {str(gavel.resolve()): hashlib.sha256(gavel.read_bytes()).hexdigest()}
    # a folder of measured tables an option names (profiles=, apps=) is one digest over every file under it
    from experiments.provenance import result_provenance

    profiles = tmp_path / "profiles"
    (profiles / "bert").mkdir(parents=True)
    (profiles / "bert" / "placements.csv").write_text("a,b\n1,2\n")
    spec = f"pollux:{tmp_path / 'w.csv'},profiles={profiles}"

    def digest() -> str:
        return result_provenance("x", ["sia"], workloads=[spec])["files"][f"{profiles.resolve()}/"]

    before = digest()
    (profiles / "bert" / "placements.csv").write_text("a,b\n1,3\n")
    assert digest() != before and len(before) == 64


class _FirstFreeGpus:
    """A scheduler of one's own that places on the first free GPUs whatever their type (no traits declared)."""

    name = "first-free"

    def reset(self, view) -> None:
        pass

    def schedule(self, view) -> list:
        from cluster_sim.protocol import Start

        out, free = [], np.flatnonzero(np.asarray(view.gpu_job) < 0)
        for j in view.queue:
            n = int(view.jobs.num_gpus[j])
            if n <= len(free):
                out.append(Start(int(j), free[:n]))
                free = free[n:]
        return out


def test_a_scheduler_of_ones_own_that_mixes_gpu_types_is_told_and_can_be_held_to_one_type() -> None:
    """On mixed GPUs a scheduler that declares nothing may place a job across types, as the built-in ones never
    do: the run says how many jobs it did and how to keep Sia's rule; declaring ``one_gpu_type`` refuses such a
    decision, and ``mix_gpu_types=True`` allows it without a word."""
    import warnings

    from cluster_sim import policies
    from cluster_sim.build import build_simulator
    from cluster_sim.protocol import InvalidDecision, MixedGpuTypesWarning

    def sim(**kw):
        return build_simulator("small-hetero", "synthetic:1000,window_load=0.9", seed=0, **kw)

    with pytest.warns(MixedGpuTypesWarning, match=r"first-free: \d+ of 1000 jobs ran on several GPU types at once"):
        mixed = sim().run(_FirstFreeGpus())
    assert mixed.metrics()["jobs_completed"] == 1000
    held = _FirstFreeGpus()
    held.one_gpu_type = True
    with pytest.raises(InvalidDecision, match="a job runs on one GPU type at a time"):
        sim().run(held)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MixedGpuTypesWarning)
        sim(mix_gpu_types=True).run(_FirstFreeGpus())
        sim().run(policies.get_policy("fifo"))  # a built-in one keeps the rule: nothing to say
