"""Mistakes a user makes (a file where a folder goes, a folder of other files, a key given twice, a window
backwards, a misspelt name): each ends in one line that names the file, line or field and the fix, before any
work starts, and leaves nothing behind."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from experiments.cli import main

REPO = Path(__file__).resolve().parents[1]
RUN = "name: bad\ncluster: small\nworkload: 'synthetic:300,load=0.5'\nseeds: [0]\nschedulers: [fifo]\n"
TOPDRL = str(REPO / "experiments" / "configs" / "topdrl_small.yaml")


def _error(argv: list[str], capsys) -> str:
    """The one line a refused command prints (its exit code 2)."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def _config(tmp_path: Path, text: str, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_an_out_or_plot_that_is_a_file_or_cannot_be_made_is_named(tmp_path: Path, capsys) -> None:
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    simulate = ["simulate", "--workload", "synthetic:300,load=0.5", "--policy", "fifo", "--quiet"]
    for argv in (
        [*simulate, "--out", str(afile)],
        [*simulate, "--plot", str(afile)],
        ["run", _config(tmp_path, RUN), "--out", str(afile)],
        ["train", "--config", TOPDRL, "--out", str(afile), "--iterations", "1"],
    ):
        flag = "--plot" if "--plot" in argv else "--out"
        assert f"{flag} {afile} is a file; name a folder" in _error(argv, capsys)
    assert afile.read_text() == "mine\n"
    assert "cannot create the folder" in _error([*simulate, "--out", str(afile / "sub")], capsys)


def test_a_folder_of_ones_own_files_is_refused_and_left_as_it_was(tmp_path: Path, capsys) -> None:
    """run and train refuse a folder none of whose files they wrote, as simulate does; a refusal leaves no lock
    file in it, and a folder the failed command created itself is gone."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    cases = {
        "no run wrote": ["run", _config(tmp_path, RUN), "--out", str(mine)],
        "no training wrote": ["train", "--config", TOPDRL, "--out", str(mine), "--iterations", "1"],
        "no simulate wrote": ["simulate", "--workload", "synthetic:300,load=0.5", "--policy", "fifo", "--out",
                              str(mine)],
    }  # fmt: skip
    for said, argv in cases.items():
        assert f"holds files that {said} (notes.txt)" in _error(argv, capsys)
        assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]


def test_a_workload_only_its_build_can_refuse_is_named_at_its_line_before_any_run(tmp_path: Path, capsys) -> None:
    """A window that cannot offer its load, or a trace file with a bad row listed after good workloads: the run is
    refused at the workload's key and line before Ray starts or any run is made, and leaves no folder."""
    bad_rows = tmp_path / "jobs.csv"
    bad_rows.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2024-03-10 08:00:00,3600,1,3600,lab\n"
                        "2024-03-10 09:00:00,3600,four,3600,lab\n")  # fmt: skip
    cases = {
        "workloads:\n  a: 'synthetic:300,window_load=9'\n": (4, "a", "workload spec 'synthetic:300,window_load=9': "),
        f"workloads:\n  a: 'synthetic:300,load=0.5'\n  b: 'philly:{bad_rows}'\n": (5, "b", "line 3: column num_gpus"),
    }
    for i, (workloads, (line, label, said)) in enumerate(cases.items()):
        config = _config(tmp_path, RUN.replace("workload: 'synthetic:300,load=0.5'\n", workloads), f"run{i}.yaml")
        out = tmp_path / f"out{i}"
        assert main(["run", config, "--out", str(out)]) == 2
        captured = capsys.readouterr()
        assert f"{config}, line {line}: workloads.{label}: " in captured.err and said in captured.err, captured.err
        assert "ray:" not in captured.out + captured.err and "evaluation:" not in captured.out  # before anything ran
        assert not out.exists()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("synthetic:300,load=-0.9", "load=-0.9 must be a positive number"),
        ("synthetic:300,max_jobs=0", "max_jobs=0 must be an integer >= 1"),
        ("synthetic:300,lod=0.9", "unknown option 'lod=0.9' for synthetic; did you mean load=?"),
        ("philly:{t},start=2017-11-05,end=2017-11-01", "start=2017-11-05 is after end=2017-11-01; swap them"),
        ("philly:{t},start=500,end=100", "start=500.0 is after end=100.0"),
        ("philly:{t},start=2017-11-01,end=2017-11-01", "start=2017-11-01 and end=2017-11-01 hold no time"),
    ],
)
def test_a_workload_no_window_can_have_is_refused_as_typed(spec: str, said: str, traces_dir: Path, capsys) -> None:
    spec = spec.format(t=traces_dir / "pollux-osdi21" / "traces" / "philly.csv")
    assert said in _error(["simulate", "--workload", spec, "--policy", "fifo"], capsys)


def test_config_mistakes_are_named_at_their_line(tmp_path: Path, capsys) -> None:
    cases = {
        RUN + "seeds: [5]\n": "line 6: seeds: given twice (also at line 4); keep one",
        RUN.replace("seeds: [0]", "seeds: [0, -1]"): "line 4: seeds: a seed is an integer >= 0, got -1",
        RUN + "workloads: {a: 'synthetic:300'}\n": "line 3: workload: give one workload (workload:) or labelled",
        RUN.replace("[fifo]", "[fifo, tiresas]") + "scheduler_options:\n  tiresias: {policy: tiresias-pollux}\n": (
            "line 5: schedulers.1: 'tiresas': did you mean 'tiresias' (scheduler_options defines it)?"
        ),
        RUN.replace("[fifo]", "[fifo, tiresas]"): "line 5: schedulers.1: unknown scheduler 'tiresas'; did you mean",
        RUN.replace("[fifo]", "[fifo, mine]") + "scheduler_options:\n  mine: {polcy: tiresias-pollux}\n": (
            "line 7: scheduler_options.mine.polcy: unknown key; did you mean 'policy'?"
        ),
        RUN.replace("seeds: [0]", "seeds: [0"): "line 5: not valid YAML: expected ',' or ']'",
    }
    for text, said in cases.items():
        config = _config(tmp_path, text)
        assert f"{config}, {said}" in _error(["run", config, "--out", str(tmp_path / "out")], capsys)
        assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit):  # argparse's own refusal: its usage, then the line
        main(["simulate", "--workload", "synthetic:300,load=0.5", "--policy", "fifo", "--seed", "-3"])
    assert "argument --seed: a seed is an integer >= 0, got '-3'" in capsys.readouterr().err


def test_cluster_file_mistakes_are_named_at_their_line(tmp_path: Path, capsys) -> None:
    base = "name: c\npods: 1\nracks_per_pod: 1\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: V100\n"
    cases = {
        base + "pods: 2\n": "line 7: pods: given twice (also at line 2); keep one",
        base.replace("pods: 1\n", "pods: [1\n"): "line 3: not valid YAML",
        "": ": holds nothing; a cluster spec is a mapping of keys",
    }
    for text, said in cases.items():
        cluster = _config(tmp_path, text, "cluster.yaml")
        err = _error(["simulate", "--cluster", cluster, "--workload", "synthetic:30", "--policy", "fifo"], capsys)
        assert f"{cluster}{said}" in err if said.startswith(":") else f"{cluster}, {said}" in err
        assert "<unicode string>" not in err and "<file>" not in err


def test_training_settings_no_run_can_use_are_named_before_it_starts(tmp_path: Path, capsys) -> None:
    quickstart = str(REPO / "experiments" / "configs" / "quickstart.yaml")
    out = tmp_path / "q"
    err = _error(["run", quickstart, "--out", str(out), "--set", "train.env.window_days=-1"], capsys)
    assert "train.env.window_days: priority env_config.window_days must be > 0, got -1" in err and not out.exists()
    err = _error(["train", "--config", TOPDRL, "--out", str(out), "--set", "env.train.start=999999999"], capsys)
    assert "env.train.start: the training windows start at 999999999 s, not before the validation windows" in err


def test_a_policy_folder_whose_metadata_holds_a_wrong_value_is_named_with_the_fix(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "pol"
    shutil.copytree(REPO / "experiments" / "policies" / "default-imitation", folder)
    meta = json.loads((folder / "metadata.json").read_text())
    (folder / "metadata.json").write_text(json.dumps({**meta, "job_features": 3}))
    err = _error(["simulate", "--workload", "synthetic:300,load=0.5", "--policy", f"marl:{folder}"], capsys)
    assert f"{folder / 'metadata.json'}: job_features: expected a list of input names, got 3" in err
    assert "copy the policy folder again" in err
    # a value no check names (the agents' margin a list): the loader's own failure, said as one line
    (folder / "metadata.json").write_text(json.dumps({**meta, "agents": {"hysteresis": [1]}}))
    err = _error(["simulate", "--workload", "synthetic:300,load=0.5", "--policy", f"marl:{folder}"], capsys)
    assert f"{folder / 'metadata.json'}: does not hold what a priority policy needs (TypeError:" in err


def test_interference_and_record_rounds_outputs_are_checked_before_the_work(tmp_path: Path, capsys) -> None:
    """A folder where a file goes (or the reverse), the input file as the output, a count below 1, a model file
    that is not one: one line each, before any training or prediction runs."""
    model = str(REPO / "experiments" / "policies" / "interference-gavel" / "model.json")
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("a,b\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    gavel = "gavel:../shared/traces/gavel/simulation_throughputs.json"
    cases = {
        ("predict", "--model", model, "--pairs", str(pairs), "--out", str(folder)): f"--out {folder} is a folder",
        ("predict", "--model", model, "--pairs", str(pairs), "--out", str(pairs)): "is the --pairs file it reads",
        ("train", "--data", gavel, "--out", str(folder)): f"--out {folder} is a folder; name the file to write",
        ("eval", "--model", model, "--data", gavel, "--out", str(pairs)): f"--out {pairs} is a file; eval writes",
        ("predict", "--model", str(pairs), "--pairs", str(pairs), "--out", str(tmp_path / "p.csv")): (
            "not a marlsched interference model (not JSON"
        ),
        ("train", "--data", gavel, "--out", str(tmp_path / "m.json"), "--steps", "-5"): (
            "argument --steps: a count is an integer >= 1, got '-5'"
        ),
    }
    for argv, said in cases.items():
        with pytest.raises(SystemExit) as stop:
            main(["interference", *argv])
        assert stop.value.code == 2 and said in capsys.readouterr().err, argv
    assert pairs.read_text() == "a,b\n" and not (tmp_path / "m.json").exists()
    record = ["record-rounds", str(REPO / "experiments" / "policies" / "default-small"), "--out"]
    assert f"--out {folder} is a folder; name the .npz" in _error([*record, str(folder)], capsys)
    assert "--rounds 0, --skip 0: record at least 1 round" in _error(
        [*record, str(tmp_path / "r.npz"), "--rounds", "0"], capsys
    )


def test_training_mistakes_say_what_to_do(tmp_path: Path, capsys) -> None:
    """--resume where nothing can resume, and a fresh start over a kept checkpoint; a misspelt agent or algo key
    (which would train the default agent); a Ray address where nothing listens (Ray itself retries it for minutes)."""
    empty = tmp_path / "empty"
    ppo = str(REPO / "experiments" / "configs" / "default_small.yaml")
    assert f"--resume: {empty} holds no checkpoint" in _error(["train", "--config", ppo, "--out", str(empty),
                                                               "--resume"], capsys)  # fmt: skip
    assert "--resume: agent 'topdrl' with algo 'pg' keeps no checkpoint to go on from (ppo and appo do)" in _error(
        ["train", "--config", TOPDRL, "--out", str(empty), "--resume"], capsys
    )
    kept = tmp_path / "kept" / "checkpoint"  # a killed PPO training's: not trained over from the start
    kept.mkdir(parents=True)
    assert f"{kept.parent} holds the checkpoint of an unfinished training (checkpoint/): add --resume" in _error(
        ["train", "--config", ppo, "--out", str(kept.parent)], capsys
    )
    for text, said in (("agnet: topdrl\n", "line 1: agnet: unknown key; did you mean 'agent'?"),
                       ("agent: topdrl\nalog: pg\n", "line 2: alog: unknown key; did you mean 'algo'?")):  # fmt: skip
        config = _config(tmp_path, text, "t.yaml")
        assert f"{config}, {said}" in _error(["train", "--config", config, "--out", str(empty)], capsys)
    assert not empty.exists()
    from marl.deploy.local_ray import check_reachable  # what init_ray checks before it connects

    with pytest.raises(ValueError, match=r"Ray address 127.0.0.1:1: nothing answers there .*ray start --head"):
        check_reachable("127.0.0.1:1")
    with pytest.raises(ValueError, match=r"http://127.0.0.1:8265: a dashboard URL .* not the cluster's address"):
        check_reachable("http://127.0.0.1:8265")  # given by mistake: not read as a host named "http"


def test_a_policy_refused_mid_simulate_leaves_the_finished_ones_shown_and_replaceable(
    tmp_path: Path, traces_dir: Path, capsys
) -> None:
    """`simulate --policy sia,gavel` where gavel refuses a job larger than every GPU type: sia's results are
    printed and kept, recorded as this simulate's, so the same command fixed writes into the same --out."""
    trace = tmp_path / "jobs.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        "2024-03-10 00:00:00,3600,4,14400,a\n2024-03-10 06:00:00,3600,128,460800,a\n"
    )
    out = tmp_path / "out"
    argv = ["simulate", "--cluster", "small-hetero", "--workload",
            f"philly:{trace},apps={traces_dir}/pollux-osdi21/traces", "--quiet", "--out", str(out)]  # fmt: skip
    assert main([*argv, "--policy", "sia,gavel"]) == 2
    printed = capsys.readouterr()
    assert "(stopped at gavel)" in printed.out and "\nsia " in printed.out
    assert "128 GPUs and gavel keeps each job's GPU count" in printed.err and "Traceback" not in printed.err
    assert json.loads((out / "sia" / "metrics.json").read_text())["jobs_completed"] == 2
    stopped = json.loads((out / "simulate.json").read_text())["stopped"]  # the folder says it stopped, and why
    assert stopped["at"] == "gavel" and "128 GPUs" in stopped["error"] and stopped["not_run"] == []
    assert main([*argv, "--policy", "sia"]) == 0  # replaces what the stopped one wrote
    assert "stopped" not in json.loads((out / "simulate.json").read_text())
    assert (out / "metrics.json").is_file() and not (out / "sia").exists()
