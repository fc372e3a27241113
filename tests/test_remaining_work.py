"""Sia weighted by a learned estimate of remaining work: no leak, export, determinism, the policy folder."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from marl.deploy.registry import load_policy
from marl.deploy.remaining_policy import LearnedWeightSia, load_remaining_policy
from marl.models.remaining_work import FEATURES, RemainingWorkNet, fit_remaining
from marl.training.remaining_work import RemainingWorkConfig, train
from tests.test_dl2 import NoLengthView
from tests.test_heterogeneous import sia_sim


def tiny_config(traces_dir: Path, **kw) -> RemainingWorkConfig:
    """One 6-hour window before 2017-11-01, its first 40 jobs; a short fit."""
    trace = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,apps={traces_dir}/sia-sosp23/traces,max_jobs=40"
    base = dict(trace=trace, load=0.5, windows=1, dagger_windows=1, dagger_rounds=1, record_every=3,
                hidden=8, epochs=20, workers=1)  # fmt: skip
    return RemainingWorkConfig(**{**base, **kw})


class Guarded(LearnedWeightSia):
    """The learned policy shown a view that raises on any read of a job's length."""

    def job_weights(self, view, jobs):
        return super().job_weights(NoLengthView(view), jobs)


def test_the_weights_change_sias_schedule_and_read_no_length(sia_dir: Path, sia_40) -> None:
    torch.manual_seed(1)
    net = RemainingWorkNet(hidden=8)
    with torch.no_grad():  # a network whose estimates differ by job, as a trained one's do
        net.mlp[-1].weight.mul_(20.0)
    learned = sia_sim(sia_dir, 40).run(Guarded(net))
    assert np.isfinite(learned.end).all() and not np.array_equal(learned.end, sia_40.end)
    # without a network it is Sia itself, bit for bit (the warm start)
    assert np.array_equal(sia_sim(sia_dir, 40).run(Guarded(None)).end, sia_40.end)


def test_fit_is_seeded_and_learns_a_log_linear_rule() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, len(FEATURES))).astype(np.float32)
    y = (2.0 * x[:, 0] - x[:, 1] + 0.05 * rng.normal(size=400)).astype(np.float32)
    a, b = (fit_remaining(x, y, hidden=16, epochs=300, seed=3) for _ in range(2))
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())
    with torch.no_grad():
        pred = a(torch.from_numpy(x)).numpy()
    assert np.corrcoef(pred, y)[0, 1] > 0.95


@pytest.fixture(scope="module")
def trained(tmp_path_factory, traces_dir: Path, sia_dir) -> tuple[Path, dict]:
    """A brief training's folder (``tiny_config``) and what it returned, for the tests that read a trained one."""
    folder = tmp_path_factory.mktemp("remaining") / "a"
    return folder, train(tiny_config(traces_dir), folder, log=lambda _: None)


def test_training_writes_a_seeded_policy_folder_that_loads_as_marl(
    tmp_path: Path, traces_dir: Path, sia_dir, trained, train_command
) -> None:
    folder, meta = trained
    train_command({"agent": "sia-remaining", "algo": "dagger", **asdict(tiny_config(traces_dir))}, tmp_path / "b")
    assert [r["collected_by"] for r in meta["progress"]] == ["sia", "policy"]
    assert meta["progress"][1]["rows"] > meta["progress"][0]["rows"] > 0
    assert (folder / "policy.pt").read_bytes() != b""
    a, b = (torch.jit.load(str(f)) for f in (folder / "policy.pt", tmp_path / "b" / "policy" / "policy.pt"))
    assert all(torch.equal(a.state_dict()[k], b.state_dict()[k]) for k in a.state_dict())  # same seed, same policy
    saved = json.loads((folder / "metadata.json").read_text())
    assert saved["export_max_abs_diff"] < 1e-5 and saved["config"]["hidden"] == 8
    assert saved["program_max_abs_diff"] < 1e-5  # the torch.export program too
    assert (folder / "estimates.png").stat().st_size > 0
    # the export equals the module it came from
    net = RemainingWorkNet(hidden=8)
    net.load_state_dict(a.state_dict())
    x = torch.randn(11, len(FEATURES))
    with torch.no_grad():
        assert torch.allclose(a(x), net.eval()(x), atol=1e-6)
    policy = load_policy(folder, name="learned")
    assert isinstance(policy, LearnedWeightSia) and policy.name == "learned"
    result = sia_sim(sia_dir, 20).run(policy)
    assert np.isfinite(result.end).all()


def test_a_folder_of_other_features_names_the_file_and_the_fix(tmp_path: Path, trained) -> None:
    import shutil

    folder = Path(shutil.copytree(trained[0], tmp_path / "p"))
    meta = json.loads((folder / "metadata.json").read_text())
    meta["features"] = meta["features"][:-1]
    (folder / "metadata.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"metadata\.json: features .* retrain it"):
        load_remaining_policy(folder)


@pytest.mark.parametrize(("field", "value"), [("hours", 30.0), ("holdout", 1.0), ("record_every", 0), ("power", 0.0)])
def test_config_rejects_bad_values_by_name(field: str, value) -> None:
    with pytest.raises(ValueError, match=field):
        RemainingWorkConfig(**{field: value})


def test_shipped_sia_philly_policy_loads_by_name_and_moves_sia(sia_dir: Path, sia_40) -> None:
    """The shipped folder loads as ``marl:DIR`` with this version's features, finishes every job of Sia's
    first workload and schedules it differently from Sia (its weights differ by job)."""
    from experiments.simulate import make_scheduler_by_name

    folder = Path(__file__).resolve().parents[1] / "experiments" / "policies" / "sia-philly"
    policy = make_scheduler_by_name(f"marl:{folder}", 0)
    assert isinstance(policy, LearnedWeightSia)
    learned = sia_sim(sia_dir, 40).run(policy)
    assert np.isfinite(learned.end).all()
    assert not np.array_equal(learned.end, sia_40.end)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variants", "sia", "bogus"], "unknown ['bogus']"),
        (["--philly", "3", "--first", "12"], "nothing after 2017-11-14"),
    ],
)
def test_sia_room_rejects_unknown_variants_and_windows_after_the_report_weeks(capsys, argv, message) -> None:
    from experiments.benchmarks.sia_room import main

    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err
