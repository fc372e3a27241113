"""Interference: Gavel loader, ground truth, learned set model, CLI."""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from interference.base import CoLocation, JobDescriptor, NoInterference, Sharing
from interference.cli import main as cli_main
from interference.contention import GPU_SHARE_COEF, SERVER_MAX_SLOWDOWN, fit_gpu_share
from interference.evaluation import folds, global_mean_mae
from interference.features import JobColumns, job_features
from interference.gavel_data import load_gavel_pairs
from interference.gavel_jobs import gavel_job_type_of, parse_gavel_job_type
from interference.ground_truth import INFEASIBLE_GPU_FACTOR, GroundTruthInterference
from interference.learned import LearnedInterference
from interference.loader import load_interference_model
from interference.pairs_csv import REQUIRED
from interference.training import SampleSet, TrainConfig, build_training_set, gavel_queries, train_model


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny networks: one thread is fastest, and avoids oversubscribing a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def gavel_dir(traces_dir: Path) -> Path:
    d = traces_dir / "gavel"
    if not (d / "simulation_throughputs.json").is_file():
        pytest.skip("Gavel throughput tables not present")
    return d


@pytest.fixture(scope="module")
def pairs(gavel_dir: Path):
    return load_gavel_pairs(f"gavel:{gavel_dir}")


@pytest.fixture(scope="module")
def truth(pairs) -> GroundTruthInterference:
    return GroundTruthInterference(pairs)


@pytest.fixture(scope="module")
def small_model(tmp_path_factory, gavel_dir: Path) -> Path:
    """A model trained through the CLI with a short schedule (shared by the CLI tests)."""
    out = tmp_path_factory.mktemp("model") / "model.pt"
    rc = cli_main(
        [
            *("interference", "train", "--data", f"gavel:{gavel_dir}", "--oracle-samples", "300"),
            *("--seed", "3", "--steps", "150", "--out", str(out)),
        ]
    )
    assert rc == 0 and out.is_file()
    return out


# -- loader ------------------------------------------------------------------------------------------


def test_loader_reads_gavel_tables(pairs, gavel_dir: Path):
    assert len(pairs) == 3 * 26 * 27 // 2  # every unordered pair of 26 job types on K80, P100, V100
    assert set(pairs.gpu_type.tolist()) == {"K80", "P100", "V100"}
    assert int((~pairs.feasible).sum()) == 77
    assert np.isnan(pairs.norm_a[~pairs.feasible]).all()
    ok = pairs.feasible
    assert ((pairs.norm_a[ok] > 0) & (pairs.norm_a[ok] <= 1.0 + 1e-9)).all()
    assert len(pairs.descriptors) == 78
    # Independent recomputation of a few rows straight from the JSON.
    raw = json.loads((gavel_dir / "simulation_throughputs.json").read_text())
    rng = np.random.default_rng(0)
    for r in rng.choice(np.flatnonzero(ok), size=20, replace=False):
        table = raw[str(pairs.gpu_type[r]).lower()]
        ka, kb = str((str(pairs.job_a[r]), 1)), str((str(pairs.job_b[r]), 1))
        ta, tb = table[ka][kb]
        assert pairs.norm_a[r] == pytest.approx(ta / table[ka]["null"], rel=1e-12)
        assert pairs.norm_b[r] == pytest.approx(tb / table[kb]["null"], rel=1e-12)


def test_loader_descriptors_and_other_formats(pairs, gavel_dir: Path):
    d = pairs.descriptor("V100", "ResNet-50 (batch size 64)")
    assert (d.params_m, d.gflops, d.batch, d.amp, d.gpu_type) == (25.6, 12.3, 64, False, "V100")
    raw = json.loads((gavel_dir / "simulation_throughputs.json").read_text())
    assert d.solo_sps == pytest.approx(64 * raw["v100"][str(("ResNet-50 (batch size 64)", 1))]["null"])
    assert parse_gavel_job_type("CycleGAN")[1] == 1 and parse_gavel_job_type("A3C")[1] == 4
    oracle = load_gavel_pairs(gavel_dir / "oracle_throughputs.json")  # bare job-type keys
    assert len(oracle) == len(pairs) and oracle.feasible.sum() > 900
    multi = load_gavel_pairs(gavel_dir, scale_factors=(1, 2, 4, 8))
    assert sorted(set(multi.scale_factor.tolist())) == [1, 2, 4, 8]
    assert len(multi) == len(pairs) + 3 * 3 * 19 * 20 // 2


def test_mean_predictor_baseline_matches_issue(pairs):
    assert global_mean_mae(pairs) == pytest.approx(0.144, abs=0.001)


def test_bad_json_inputs_give_clear_errors(tmp_path: Path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"v100": {')
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON .* line 1"):
        load_gavel_pairs(broken)
    bad_key = tmp_path / "badkey.json"
    bad_key.write_text(json.dumps({"v100": {"('Resnet-18 (batch size 16)', 1)": {"null": 1.0}}}))
    with pytest.raises(ValueError, match="unknown Gavel job type 'Resnet-18"):
        load_gavel_pairs(bad_key)
    bad_pair = tmp_path / "badpair.json"
    key = "('A3C', 1)"
    bad_pair.write_text(json.dumps({"k80": {key: {"null": 2.0, key: [1.0]}}}))
    with pytest.raises(ValueError, match=r"badpair\.json: \[k80\]\[\('A3C', 1\)\]\[\('A3C', 1\)\]: expected"):
        load_gavel_pairs(bad_pair)
    no_workers = tmp_path / "empty.json"
    no_workers.write_text("{}")
    with pytest.raises(ValueError, match="no worker type"):
        load_gavel_pairs(no_workers)
    with pytest.raises(FileNotFoundError, match=r"nowhere\.json not found"):
        load_gavel_pairs(tmp_path / "nowhere.json")


# -- ground truth ------------------------------------------------------------------------------------


def _queries(pairs, rows, reverse=False):
    out = []
    for r in rows:
        g = str(pairs.gpu_type[r])
        a, b = pairs.descriptor(g, str(pairs.job_a[r])), pairs.descriptor(g, str(pairs.job_b[r]))
        if reverse:
            a, b = b, a
        out.append(CoLocation(a, ((b, Sharing.GPU),)))
    return out


def test_ground_truth_reproduces_measured_pairs_exactly(pairs, truth):
    ok = pairs.feasible
    distinct = np.flatnonzero(ok & (pairs.job_a != pairs.job_b))
    np.testing.assert_array_equal(truth.throughput_factors(_queries(pairs, distinct)), pairs.norm_a[distinct])
    np.testing.assert_array_equal(
        truth.throughput_factors(_queries(pairs, distinct, reverse=True)), pairs.norm_b[distinct]
    )
    same = np.flatnonzero(ok & (pairs.job_a == pairs.job_b))
    np.testing.assert_allclose(
        truth.throughput_factors(_queries(pairs, same)), 0.5 * (pairs.norm_a[same] + pairs.norm_b[same])
    )
    bad = np.flatnonzero(~ok)
    assert (truth.throughput_factors(_queries(pairs, bad)) == INFEASIBLE_GPU_FACTOR).all()
    r = bad[0]
    g = str(pairs.gpu_type[r])
    assert not truth.feasible(pairs.descriptor(g, str(pairs.job_a[r])), pairs.descriptor(g, str(pairs.job_b[r])))


def test_ground_truth_recognises_zoo_descriptors_by_facts(pairs, truth):
    r50 = JobDescriptor(25.6, 12.3, 64, 280.0, False, "V100", name="resnet50-imagenet")
    lm = JobDescriptor(28.0, 1.5, 20, 1300.0, False, "V100", name="lstm-lm")
    assert gavel_job_type_of(r50) == "ResNet-50 (batch size 64)"
    row = np.flatnonzero(
        (pairs.gpu_type == "V100")
        & (pairs.job_a == "ResNet-50 (batch size 64)")
        & (pairs.job_b == "LM (batch size 20)")
    )
    assert len(row) == 1
    assert truth.pair_factor(r50, lm, Sharing.GPU) == pairs.norm_a[row[0]]
    # Unmeasured pair (unknown model): parametric value, strictly inside (0, 1).
    bert = JobDescriptor(110.0, 253.0, 12, 40.0, True, "A100", name="bert-squad")
    f = truth.pair_factor(bert, replace(bert, name="x"), Sharing.GPU)
    assert 0.0 < f < 1.0


def test_ground_truth_composition_and_levels(pairs, truth):
    lm = pairs.descriptor("V100", "LM (batch size 20)")
    r50 = pairs.descriptor("V100", "ResNet-50 (batch size 64)")
    # Gandiva calibration: two LMs on different GPUs of one server lose about 19%; ResNet-50 barely any.
    assert truth.pair_factor(lm, lm, Sharing.SERVER) == pytest.approx(0.81, abs=0.01)
    assert truth.pair_factor(r50, lm, Sharing.SERVER) > 0.98
    assert truth.pair_factor(r50, r50, Sharing.UPLINK) > truth.pair_factor(lm, lm, Sharing.UPLINK)
    assert truth.throughput_factors([CoLocation(lm, ())])[0] == 1.0
    # More data-hungry server neighbours never help, and the host's capacity bounds the slowdown.
    server = [truth.throughput_factors([CoLocation(lm, ((lm, Sharing.SERVER),) * k)])[0] for k in range(1, 8)]
    assert all(b <= a for a, b in itertools.pairwise(server))
    assert server[-1] >= 1.0 - SERVER_MAX_SLOWDOWN
    # GPU-level neighbours compound multiplicatively; levels multiply; order does not matter.
    g = truth.pair_factor(r50, lm, Sharing.GPU)
    two = CoLocation(r50, ((lm, Sharing.GPU), (lm, Sharing.GPU)))
    assert truth.throughput_factors([two])[0] == pytest.approx(g * g)
    mixed = ((lm, Sharing.GPU), (lm, Sharing.SERVER), (r50, Sharing.UPLINK))
    expect = g * truth.pair_factor(r50, lm, Sharing.SERVER) * truth.pair_factor(r50, r50, Sharing.UPLINK)
    f1, f2 = truth.throughput_factors([CoLocation(r50, mixed), CoLocation(r50, mixed[::-1])])
    assert f1 == pytest.approx(expect) and f2 == pytest.approx(f1)


def test_gpu_share_constants_are_the_fit_on_gavel(pairs):
    queries, y, _ = gavel_queries(pairs)
    job = JobColumns.from_descriptors([q.job for q in queries])
    other = JobColumns.from_descriptors([q.neighbours[0][0] for q in queries])
    np.testing.assert_allclose(fit_gpu_share(job, other, y), GPU_SHARE_COEF, atol=1e-3)


def test_features_extend_descriptor_features(pairs):
    d = pairs.descriptor("P100", "Transformer (batch size 64)")
    np.testing.assert_allclose(job_features(JobColumns.from_descriptors([d]))[0, :6], d.features(), rtol=1e-6)


# -- learned model -----------------------------------------------------------------------------------


def test_learned_model_beats_mean_on_held_out_pairs(pairs):
    v100 = pairs.select(pairs.gpu_type == "V100")
    _, held = folds(v100, "random", seed=0)[0]
    train = v100.select(v100.feasible & ~held)
    cfg = TrainConfig(steps=400, seed=0)
    gavel, oracle = build_training_set(train, cfg, np.random.Generator(np.random.PCG64(0)))
    assert oracle is None and len(gavel) == 2 * int(train.feasible.sum())
    model = train_model(gavel, None, cfg)
    q, y, _ = gavel_queries(v100.select(held))
    mae = np.abs(model.throughput_factors(q) - y).mean()
    mean_mae = np.abs(gavel.y.mean() - y).mean()
    assert mae < 0.8 * mean_mae, (mae, mean_mae)


def test_training_is_deterministic_and_oracle_samples_cover_levels(pairs):
    small = pairs.select(pairs.gpu_type == "K80")
    cfg = TrainConfig(steps=20, oracle_samples=200, oracle_batch=64, seed=7)

    def run():
        gavel, oracle = build_training_set(small, cfg, np.random.Generator(np.random.PCG64(cfg.seed)))
        return oracle, train_model(gavel, oracle, cfg)

    oracle, m1 = run()
    _, m2 = run()
    for k, v in m1.net.state_dict().items():
        assert torch.equal(v, m2.net.state_dict()[k]), k
    assert {0, 1, 2} >= set(oracle.nbr_level.tolist()) >= {1, 2}
    counts = np.bincount(oracle.nbr_query, minlength=len(oracle))
    assert counts.min() >= 1 and counts.max() > 1
    assert ((oracle.y > 0) & (oracle.y <= 1)).all()
    sub = oracle.subset(np.array([5, 2]))
    np.testing.assert_array_equal(sub.job_x, oracle.job_x[[5, 2]])
    np.testing.assert_array_equal(sub.nbr_x[sub.nbr_query == 0], oracle.nbr_x[oracle.nbr_query == 5])
    np.testing.assert_array_equal(sub.nbr_x[sub.nbr_query == 1], oracle.nbr_x[oracle.nbr_query == 2])


def test_set_model_is_permutation_invariant_and_round_trips(small_model: Path, pairs, tmp_path: Path):
    model = load_interference_model("learned", str(small_model))
    assert isinstance(model, LearnedInterference)
    a = pairs.descriptor("V100", "LM (batch size 20)")
    b = pairs.descriptor("V100", "ResNet-50 (batch size 64)")
    c = pairs.descriptor("V100", "CycleGAN")
    nbrs = ((b, Sharing.GPU), (c, Sharing.SERVER), (a, Sharing.UPLINK), (b, Sharing.SERVER))
    qs = [CoLocation(a, nbrs), CoLocation(a, nbrs[::-1]), CoLocation(a, ()), CoLocation(a, nbrs[:1])]
    f = model.throughput_factors(qs)
    assert f[0] == pytest.approx(f[1], abs=1e-6)
    assert f[2] == 1.0
    assert ((f > 0) & (f <= 1)).all()
    again = model.throughput_factors(qs)  # from the cache
    np.testing.assert_array_equal(f, again)
    assert model._cache.hits >= len(qs)
    copy = tmp_path / "copy.pt"
    model.save(copy)
    np.testing.assert_array_equal(LearnedInterference.load(copy).throughput_factors(qs), f)
    assert model.meta["train_config"]["seed"] == 3
    junk = tmp_path / "junk.pt"
    junk.write_text("not a model")
    with pytest.raises(ValueError, match=r"junk\.pt: not a marlsched interference model"):
        LearnedInterference.load(junk)


def test_loader_modes(gavel_dir: Path):
    assert isinstance(load_interference_model("none", None), NoInterference)
    assert load_interference_model("oracle", f"gavel:{gavel_dir}").num_measured > 1900
    with pytest.raises(ValueError, match="needs --interference-model"):
        load_interference_model("learned", None)
    with pytest.raises(ValueError, match="unknown interference mode 'magic'"):
        load_interference_model("magic", None)


# -- CLI ---------------------------------------------------------------------------------------------


def _write_pairs(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(REQUIRED))
        w.writeheader()
        w.writerows(rows)


def test_predict_cli_on_unseen_descriptors(small_model: Path, tmp_path: Path):
    unseen = [  # job types no table measured, on GPUs Gavel never used
        dict(a_params_m=110, a_gflops=253, a_batch=12, a_solo_sps=95, a_amp=1, b_params_m=61.9, b_gflops=198)
        | dict(b_batch=8, b_solo_sps=60, b_amp=0, gpu_type="A100", level="gpu"),
        dict(a_params_m=1300, a_gflops=7800, a_batch=4, a_solo_sps=3.5, a_amp=1, b_params_m=5, b_gflops=0.001)
        | dict(b_batch=256, b_solo_sps=90000, b_amp=0, gpu_type="H100", level="server"),
        dict(a_params_m=38, a_gflops=30, a_batch=20, a_solo_sps=300, a_amp=0, b_params_m=38, b_gflops=30)
        | dict(b_batch=20, b_solo_sps=300, b_amp=0, gpu_type="T4", level="uplink"),
    ]
    src, out = tmp_path / "pairs.csv", tmp_path / "out" / "pred.csv"
    _write_pairs(src, unseen)
    assert (
        cli_main(["interference", "predict", "--model", str(small_model), "--pairs", str(src), "--out", str(out)]) == 0
    )
    with out.open() as f:
        got = list(csv.DictReader(f))
    assert len(got) == 3 and got[0]["gpu_type"] == "A100"
    for r in got:
        for c in ("pred_norm_a", "pred_norm_b"):
            assert 0.0 < float(r[c]) <= 1.0
    # Identical jobs get identical predictions in both directions.
    assert got[2]["pred_norm_a"] == got[2]["pred_norm_b"]


def test_predict_cli_rejects_bad_csv(small_model: Path, tmp_path: Path):
    good = dict(a_params_m=10, a_gflops=1, a_batch=32, a_solo_sps=500, a_amp=0, b_params_m=20, b_gflops=2)
    good |= dict(b_batch=64, b_solo_sps=400, b_amp=0, gpu_type="V100", level="gpu")
    cases = [
        ({k: v for k, v in good.items() if k != "b_gflops"}, "missing column"),
        (good | {"a_batch": "lots"}, "line 2: column 'a_batch' is 'lots'; expected a number"),
        (good | {"gpu_type": "GTX480"}, "column 'gpu_type' is 'GTX480'; expected one of"),
        (good | {"level": "rack"}, "column 'level' is 'rack'; expected gpu, server or uplink"),
        (good | {"a_amp": "maybe"}, "column 'a_amp' is 'maybe'"),
        (good | {"b_solo_sps": "-3"}, "expected a positive number"),
    ]
    for i, (row, message) in enumerate(cases):
        src = tmp_path / f"bad{i}.csv"
        with src.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            w.writeheader()
            w.writerow(row)
        with pytest.raises(SystemExit) as exc:
            cli_main(["interference", "predict", "--model", str(small_model), "--pairs", str(src), "--out", "x.csv"])
        assert f"bad{i}.csv" in str(exc.value) and message in str(exc.value), str(exc.value)
    with pytest.raises(SystemExit, match=r"interference model .*missing\.pt not found"):
        cli_main(["interference", "predict", "--model", str(tmp_path / "missing.pt"), "--pairs", "p", "--out", "o"])


def test_eval_cli_writes_metrics_and_parity_plot(small_model: Path, gavel_dir: Path, tmp_path: Path):
    out = tmp_path / "eval"
    args = ["interference", "eval", "--model", str(small_model), "--data", f"gavel:{gavel_dir}"]
    assert cli_main([*args, "--split", "random", "--steps", "40", "--out", str(out)]) == 0
    res = json.loads((out / "eval.json").read_text())
    for key in ("mae", "mape", "spearman", "n", "mean_predictor_mae", "issue_mean_predictor_mae"):
        assert key in res, key
    assert res["n"] == 2 * 976 and res["issue_mean_predictor_mae"] == 0.144
    assert res["mae"] < res["mean_predictor_mae"]
    assert (out / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_leave_model_out_folds_hide_the_family(pairs):
    for fam, held in folds(pairs, "leave-model-out", seed=0):
        fa, fb = pairs.family_a(), pairs.family_b()
        assert ((fa[held] == fam) | (fb[held] == fam)).all()
        assert held.sum() == (pairs.feasible & ((fa == fam) | (fb == fam))).sum()


def test_sample_set_from_queries_keeps_queries_apart():
    j = JobDescriptor(10, 1, 32, 500)
    k = JobDescriptor(20, 2, 64, 400)
    qs = [CoLocation(j, ((k, Sharing.SERVER),)), CoLocation(k, ((j, Sharing.GPU), (j, Sharing.UPLINK)))]
    s = SampleSet.from_queries(qs, np.array([0.9, 0.8]))
    assert s.nbr_query.tolist() == [0, 1, 1] and s.nbr_level.tolist() == [1, 0, 2]
    np.testing.assert_allclose(s.y, [0.9, 0.8])
