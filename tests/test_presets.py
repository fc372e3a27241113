"""A paper's simulator settings are one preset that `marlsched simulate --preset` and a run config's
``preset:`` both read, so the two paths to a comparison give the same figures; a paper's workload run
without them is warned about; `simulate --plot` writes the plots `marlsched run` writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cluster_sim.sim_presets import SIM_PRESETS, preset_warning
from experiments.cli import main
from experiments.run_config import ExperimentConfigError, load_experiment_config, parse_experiment_config

REPO = Path(__file__).resolve().parents[1]


def _sia_workload(sia_dir: Path, jobs: int) -> str:
    return f"pollux:{sia_dir}/workloads/philly/workload-1.csv,profiles={sia_dir}/traces,max_jobs={jobs}"


def test_simulate_preset_and_the_sia_config_give_the_same_figures(sia_dir: Path, tmp_path: Path, capsys) -> None:
    """gavel on the first jobs of Sia's workload 1: `simulate --preset sia` equals the task sia_sosp23.yaml
    runs; plain `simulate` differs (no per-application restart costs, no calibration) and warns."""
    from experiments.run import task_specs
    from experiments.tasks import evaluate

    workload = _sia_workload(sia_dir, 12)
    data = yaml.safe_load((REPO / "experiments" / "configs" / "sia_sosp23.yaml").read_text())
    data.update(
        workloads={"w1": workload}, schedulers=["gavel"], baselines=["gavel"], published=None, scheduler_options=None
    )
    cfg = parse_experiment_config(data, "sia_sosp23.yaml")
    (spec,) = task_specs(cfg, tmp_path)
    by_config = evaluate(spec)["metrics"]

    figures = {}
    for name, extra in (("preset", ["--preset", "sia"]), ("plain", [])):
        out = tmp_path / name
        argv = ["simulate", "--cluster", "sia-hetero", "--workload", workload, "--policy", "gavel", "--quiet"]
        assert main([*argv, *extra, "--out", str(out)]) == 0
        figures[name] = json.loads((out / "metrics.json").read_text())
        captured = capsys.readouterr()
        figures[name + "_err"], figures[name + "_out"] = captured.err, captured.out
    for key in ("avg_jct", "p95_jct", "makespan", "restarts_per_job"):
        assert figures["preset"][key] == by_config[key], key
    # from Python, build_simulator(preset=) is the same replay, and a setting given beside it wins
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    python = build_simulator("sia-hetero", workload, preset="sia").run(get_policy("gavel")).metrics()
    assert all(python[key] == by_config[key] for key in ("avg_jct", "p95_jct", "makespan", "restarts_per_job"))
    uncalibrated = build_simulator("sia-hetero", workload, preset="sia", calibration=False)
    assert uncalibrated.run(get_policy("gavel")).metrics()["avg_jct"] != python["avg_jct"]
    with pytest.raises(ValueError, match="unknown preset 'sia2'; choose one of: sia, pollux"):
        build_simulator("sia-hetero", workload, preset="sia2")
    assert figures["plain"]["avg_jct"] != by_config["avg_jct"]
    assert "warning" not in figures["preset_err"]
    # the title names the costs the figures move with: Sia's 30 s start cost only where it is charged
    costs = "start and restart cost each application's own on every allocation (cifar10 50 s, deepspeech2 25 s, "
    costs += "bert 120 s, yolov3 80 s, imagenet 250 s, ncf 15 s; Sia's), 30 s restart, 30 s start for others"
    assert costs in figures["preset_out"]
    assert ", start cost" not in figures["plain_out"]
    assert "Sia's published workload" in figures["plain_err"] and "--preset sia" in figures["plain_err"]


def test_a_flag_beside_a_preset_wins_and_a_config_key_beside_it_too() -> None:
    from experiments.cli import build_parser
    from experiments.simulate import simulator_settings

    args = build_parser().parse_args(["simulate", "--preset", "sia", "--start-cost", "0", "--no-calibration"])
    assert simulator_settings(args) == {**SIM_PRESETS["sia"].settings, "start_cost": 0.0, "calibration": False}
    cfg = parse_experiment_config({"preset": "pollux", "restart_cost": 5, "schedulers": ["fifo"]})
    assert (cfg.interference, cfg.start_cost, cfg.restart_cost) == ("none", 30.0, 5)
    with pytest.raises(ExperimentConfigError, match=r"preset: unknown preset 'sia2'; choose one of: sia, pollux"):
        parse_experiment_config({"preset": "sia2"})


def test_the_sia_configs_use_the_preset(monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    for name in ("sia_sosp23.yaml", "sia_sosp23_homogeneous.yaml"):
        cfg = load_experiment_config(f"experiments/configs/{name}")
        assert cfg.preset == "sia"
        for spec in cfg.workload_specs.values():
            settings = {k: getattr(cfg, k) for k in SIM_PRESETS["sia"].settings}
            assert preset_warning(spec, settings) is None


def test_pollux_workload_without_its_start_cost_is_warned_about() -> None:
    spec = "pollux:../shared/traces/pollux-osdi21/workloads/workload-1.csv"
    warning = preset_warning(spec, {**SIM_PRESETS["pollux"].settings, "start_cost": 0.0})
    assert warning and "start_cost 0.0 (paper: 30.0)" in warning and "--preset pollux" in warning
    assert preset_warning("synthetic:100", {}) is None


def test_simulate_plot_writes_the_plots_of_run(tmp_path: Path, capsys) -> None:
    argv = ["simulate", "--workload", "synthetic:60,load=1.2", "--policy", "fifo,qssf", "--quiet"]
    assert main([*argv, "--plot", str(tmp_path / "plots")]) == 0
    written = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert written == ["avg_jct.png", "jct_cdf.png", "paired_avg_jct.png", "timeline.png"]
    assert "plots: " in capsys.readouterr().out


def test_simulate_plots_inside_its_out_folder_and_again(tmp_path: Path) -> None:
    """``--out R --plot R/plots`` (``marlsched run``'s layout): the plots are among the results, and a rerun
    replaces both; an empty plot folder left by a simulate that stopped early does not block the next one."""
    import json

    out = tmp_path / "res"
    argv = ["simulate", "--workload", "synthetic:60,load=1.2", "--policy", "fifo,qssf", "--quiet", "--out", str(out)]
    (out / "plots").mkdir(parents=True)  # what a stopped run leaves
    for _ in range(2):
        assert main([*argv, "--plot", str(out / "plots")]) == 0
        assert (out / "plots" / "jct_cdf.png").stat().st_size > 1000
        assert "plots" in json.loads((out / "simulate.json").read_text())["written"]
    assert main(argv) == 0 and not (out / "plots").exists()  # the earlier run's plots went with its results
