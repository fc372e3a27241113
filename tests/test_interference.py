"""Interference: Gavel loader, ground truth, learned contention model, CLI."""

from __future__ import annotations

import csv
import itertools
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from interference.base import CoLocation, JobDescriptor, NoInterference, Sharing
from interference.cli import main as cli_main
from interference.contention import GPU_SHARE_COEF, SERVER_MAX_SLOWDOWN, fit_gpu_share
from interference.evaluation import folds, global_mean_mae, partner_ranking
from interference.features import JobColumns, frac_peak_flops, gpu_table, intensity_features
from interference.gavel_data import load_gavel_pairs
from interference.gavel_jobs import gavel_job_type_of, parse_gavel_job_type
from interference.ground_truth import INFEASIBLE_GPU_FACTOR, GroundTruthInterference
from interference.learned import LearnedInterference
from interference.loader import load_interference_model
from interference.pairs_csv import REQUIRED
from interference.training import TrainConfig, fit_queries, gavel_queries


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
    out = tmp_path_factory.mktemp("model") / "model.json"
    rc = cli_main(
        [
            *("interference", "train", "--data", f"gavel:{gavel_dir}", "--members", "4"),
            *("--seed", "3", "--steps", "150", "--no-calibrate", "--out", str(out)),
        ]
    )
    assert rc == 0 and out.is_file()
    return out


def _unguarded(model: LearnedInterference) -> LearnedInterference:
    """``model`` without its recorded range: the fitted structure everywhere, profile columns fed in."""
    from dataclasses import asdict

    from interference.learned import ContentionParams

    return LearnedInterference(ContentionParams(**{**asdict(model.params), "gpu_lo": [], "gpu_hi": []}), model.meta)


@pytest.fixture(scope="module")
def own_pairs(tmp_path_factory, pairs, gavel_dir: Path) -> dict[str, Path]:
    """A user's source: Gavel's V100 pairs with stand-in profiles (from the K80 and P100 pairs); 40 of them
    measured (``few``), the others the test; and Gavel's tables without V100."""
    from interference.evaluation import stand_in_profiles, write_gavel_pairs_csv

    d = tmp_path_factory.mktemp("own")
    v100 = np.flatnonzero(pairs.feasible & (pairs.scale_factor == 1) & (pairs.gpu_type == "V100"))
    order = np.random.default_rng(0).permutation(v100)
    profiles = stand_in_profiles(pairs, "V100")
    write_gavel_pairs_csv(d / "few.csv", pairs, order[:40], profiles)
    write_gavel_pairs_csv(d / "test.csv", pairs, order[40:], profiles)
    write_gavel_pairs_csv(d / "test_plain.csv", pairs, order[40:])
    raw = json.loads((gavel_dir / "simulation_throughputs.json").read_text())
    raw.pop("v100")
    (d / "no_v100.json").write_text(json.dumps(raw))
    return {k: d / f"{k}.{'json' if k == 'no_v100' else 'csv'}" for k in ("few", "test", "test_plain", "no_v100")}


@pytest.fixture(scope="module")
def profiled_model(tmp_path_factory, own_pairs) -> Path:
    """Trained through the CLI on Gavel's tables without V100 and 40 profiled V100 pairs of the user's."""
    out = tmp_path_factory.mktemp("profiled") / "model.json"
    rc = cli_main(
        [
            *(
                "interference",
                "train",
                "--data",
                f"gavel:{own_pairs['no_v100']}",
                "--data",
                f"pairs:{own_pairs['few']}",
            ),
            *("--members", "4", "--seed", "3", "--steps", "150", "--no-calibrate", "--out", str(out)),
        ]
    )
    assert rc == 0
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


def test_memoised_host_scalars_compose_bit_for_bit_as_columns(pairs):
    """The per-descriptor memo of host pressure and communication share gives exactly the factors that
    composing from columns gives, for mixed levels, repeated and fresh descriptors alike."""
    from interference.composition import HostScalars, compose
    from interference.queries import flatten

    descs = [d for (g, _), d in sorted(pairs.descriptors.items()) if g == "V100"][:12]
    rng = np.random.default_rng(0)
    levels = [Sharing.GPU, Sharing.SERVER, Sharing.UPLINK]
    host = HostScalars()
    for _ in range(3):  # later rounds hit the memo
        queries = [
            CoLocation(descs[i], tuple((descs[k], levels[k % 3]) for k in rng.integers(0, 12, rng.integers(0, 6))))
            for i in rng.integers(0, 12, 40)
        ]
        flat = flatten(queries)
        gpu = lambda a, b: np.full(len(a), 0.7)  # noqa: E731
        np.testing.assert_array_equal(compose(flat, None, gpu, host=host), compose(flat, flat.columns(), gpu))


def test_gpu_share_constants_are_the_fit_on_gavel(pairs):
    queries, y, _ = gavel_queries(pairs)
    job = JobColumns.from_descriptors([q.job for q in queries])
    other = JobColumns.from_descriptors([q.neighbours[0][0] for q in queries])
    np.testing.assert_allclose(fit_gpu_share(job, other, y), GPU_SHARE_COEF, atol=1e-3)


def test_intensity_is_relative_to_the_gpu(pairs):
    d = pairs.descriptor("P100", "Transformer (batch size 64)")
    on = {g: replace(d, gpu_type=g) for g in ("K80", "P100", "H100")}
    z = intensity_features(JobColumns.from_descriptors(list(on.values())))
    assert z[0, 0] > z[1, 0] > z[2, 0]  # the same job is a heavier tenant on an older GPU
    cols = JobColumns.from_descriptors([d])
    assert np.exp(z[1, 0]) == pytest.approx(frac_peak_flops(cols, gpu_table(cols.gpu_type))[0])


# -- learned model -----------------------------------------------------------------------------------


def test_learned_model_beats_mean_on_held_out_pairs(pairs):
    v100 = pairs.select(pairs.gpu_type == "V100")
    _, held = folds(v100, "random", seed=0)[0]
    train_q, train_y, _ = gavel_queries(v100.select(v100.feasible & ~held))
    model = fit_queries(train_q, train_y, TrainConfig(steps=400, members=4, seed=0))
    q, y, _ = gavel_queries(v100.select(held))
    mae = np.abs(model.throughput_factors(q) - y).mean()
    mean_mae = np.abs(train_y.mean() - y).mean()
    assert mae < 0.6 * mean_mae, (mae, mean_mae)


def test_training_is_deterministic(pairs):
    q, y, _ = gavel_queries(pairs.select(pairs.gpu_type == "K80"))
    cfg = TrainConfig(steps=30, members=3, seed=7)
    m1, m2 = fit_queries(q, y, cfg), fit_queries(q, y, cfg)
    assert m1.params == m2.params
    assert fit_queries(q, y, replace(cfg, seed=8)).params != m1.params
    with pytest.raises(ValueError, match="exactly one neighbour on the job's GPU"):
        fit_queries([CoLocation(q[0].job, ((q[0].job, Sharing.SERVER),))], y[:1], cfg)


def _cols(n: int, gpu: str = "V100", **kw) -> JobColumns:
    """``n`` copies of a ResNet-50-like job, with fields overridden by ``kw``."""
    base = dict(params_m=25.0, gflops=12.3, batch=64.0, solo_sps=400.0, amp=0.0) | kw
    out = {k: np.full(n, float(v)) for k, v in base.items()}
    return JobColumns(**out, gpu_type=np.full(n, gpu))


def _victims(pairs) -> JobColumns:
    """Every measured job type plus jobs no table has, as victims."""
    measured = list(pairs.descriptors.values())
    new = [JobDescriptor(110, 253, 12, 95, True, "A100"), JobDescriptor(1.6, 0.01, 1024, 90000, False, "T4")]
    return JobColumns.from_descriptors(measured + new)


def test_physical_sanity(small_model: Path, pairs):
    """Monotone in the partner's intensity, tiny partners barely matter, symmetric, in (0, 1]. The sweeps
    reach far beyond the fitted range, where answers head for the safe prior instead (tested below), so
    monotonicity is checked on the fitted structure itself."""
    model = _unguarded(LearnedInterference.load(small_model))
    victims = _victims(pairs)
    n = len(victims)
    gpu_level = np.zeros(n, dtype=np.int64)
    # a heavier partner (more of peak FLOP/s, longer steps, more FLOPs per parameter) never predicts less
    for field, values in (("solo_sps", np.geomspace(1, 3000, 12)), ("batch", np.geomspace(1, 512, 10))):
        prev = np.ones(n)
        for v in values:
            partner = _cols(n, **{field: v})
            f = model.predict_pairs(replace(victims, gpu_type=np.full(n, "V100")), partner, gpu_level).factor
            assert (f <= prev + 1e-12).all(), (field, v)
            prev = f
    for field in ("gpu_util", "mem_util"):
        prev = np.ones(n)
        for v in (1, 10, 40, 70, 100):
            partner = _cols(n, **{field: float(v)})
            f = model.predict_pairs(replace(victims, gpu_type=np.full(n, "V100")), partner, gpu_level).factor
            assert (f <= prev + 1e-12).all(), (field, v)
            prev = f
    # a partner at <= 1% of peak FLOP/s slows no victim by more than 5%, structure or answer
    model = LearnedInterference.load(small_model)
    for gpu in ("K80", "V100", "H100"):
        peak = gpu_table(np.array([gpu]))["fp32_tflops"][0] * 1e3
        v = replace(victims, gpu_type=np.full(n, gpu))
        for gflops, params in ((0.1, 1.0), (5.0, 20.0), (50.0, 300.0)):
            tiny = _cols(n, gflops=gflops, params_m=params, solo_sps=0.01 * peak / gflops, gpu=gpu)
            assert model.predict_pairs(v, tiny, gpu_level).factor.min() >= 0.95, (gpu, gflops)
    # symmetric inputs, symmetric outputs; every factor in (0, 1]
    a, b = model.predict_pairs(victims, victims, gpu_level), model.predict_pairs(victims, victims, gpu_level)
    np.testing.assert_array_equal(a.factor, b.factor)
    rng = np.random.default_rng(0)
    perm = rng.permutation(n)
    for level in range(3):
        f = model.predict_pairs(victims, victims.take(perm), np.full(n, level)).factor
        assert ((f > 0) & (f <= 1)).all()


def test_profile_columns_uncertainty_and_range(small_model: Path, pairs):
    """The profile path of the structure (a model fitted on profiled pairs takes it; see
    test_train_on_own_measured_pairs), the memory check, the spread and the range flag."""
    model = _unguarded(LearnedInterference.load(small_model))
    victims = _victims(pairs)
    n = len(victims)
    lvl = np.zeros(n, dtype=np.int64)
    victims = replace(victims, gpu_type=np.full(n, "V100"))
    est = model.predict_pairs(victims, _cols(n), lvl)
    busy = model.predict_pairs(victims, _cols(n, gpu_util=100.0, mem_util=100.0), lvl)
    idle = model.predict_pairs(victims, _cols(n, gpu_util=1.0, mem_util=1.0), lvl)
    assert (busy.factor < est.factor).any() and (idle.factor > est.factor).all()
    assert (busy.factor <= idle.factor).all()
    # memory: together over the device's 16 GB is infeasible, under it is not
    over = model.predict_pairs(replace(victims, mem_gb=np.full(n, 9.0)), _cols(n, mem_gb=8.0), lvl).factor
    under = model.predict_pairs(replace(victims, mem_gb=np.full(n, 7.0)), _cols(n, mem_gb=8.0), lvl).factor
    assert (over == INFEASIBLE_GPU_FACTOR).all() and (under > INFEASIBLE_GPU_FACTOR).all()
    model = LearnedInterference.load(small_model)
    # spread across members at the GPU level, none at the physical levels; out of range is flagged
    assert (est.std > 0).all()
    assert (model.predict_pairs(victims, _cols(n), np.ones(n, dtype=np.int64)).std == 0).all()
    huge = _cols(1, params_m=1e5, gflops=1e4, batch=1.0, solo_sps=0.5)
    fitted = JobColumns.from_descriptors([q.job for q in gavel_queries(pairs)[0]])
    assert model.out_of_range(huge).all() and not model.out_of_range(fitted).any()


def test_sensitivity_follows_the_jobs_own_use(small_model: Path):
    """A new job's sensitivity is a function of its GPU and memory-bandwidth use alone: profiled alike, jobs
    of any batch and speed suffer alike; profiled differently, they do not (the structure, range aside)."""
    model = _unguarded(LearnedInterference.load(small_model))
    n = 6
    lvl = np.zeros(n, dtype=np.int64)
    victims = replace(
        _cols(n, gpu_util=60.0, mem_util=40.0), batch=np.geomspace(8, 1024, n), solo_sps=np.geomspace(50, 5000, n)
    )
    f = model.predict_pairs(victims, _cols(n), lvl).factor
    np.testing.assert_allclose(f, f[0], rtol=1e-12)
    assert f[0] < 1.0
    other = model.predict_pairs(replace(victims, gpu_util=np.full(n, 95.0), mem_util=np.full(n, 5.0)), _cols(n), lvl)
    assert np.abs(other.factor - f).min() > 1e-4


def test_measured_types_get_their_residual_new_jobs_do_not(pairs):
    """The type residual sharpens measured pairs; a job one parameter away from a measured one is new: next
    to a measured partner it gets that partner's measured pressure, next to a new one the structure alone."""
    q, y, _ = gavel_queries(pairs.select(pairs.gpu_type == "V100"))
    cfg = TrainConfig(steps=300, members=2, seed=0)
    with_types, without = fit_queries(q, y, cfg), fit_queries(q, y, replace(cfg, type_rank=0))
    err = np.abs(with_types.throughput_factors(q) - y).mean()
    assert err < 0.7 * np.abs(without.throughput_factors(q) - y).mean()

    def nudge(d: JobDescriptor) -> JobDescriptor:
        return replace(d, params_m=d.params_m * 1.001)

    both_new = [CoLocation(nudge(c.job), ((nudge(c.neighbours[0][0]), Sharing.GPU),)) for c in q[:50]]
    np.testing.assert_allclose(
        with_types.throughput_factors(both_new), without.throughput_factors(both_new), atol=0.02
    )  # both are the structure alone (its parameters differ only through the residual stages: not at all)
    job_new = [CoLocation(nudge(c.job), c.neighbours) for c in q]
    side_err = np.abs(with_types.throughput_factors(job_new) - y).mean()
    assert side_err < 0.9 * np.abs(without.throughput_factors(job_new) - y).mean(), "the partner's measurement helps"


def test_partner_ranking_metric():
    job = np.array(["a"] * 4 + ["b"] * 3)
    y = np.array([0.9, 0.7, 0.5, 0.52, 0.8, 0.6, 0.4])
    perfect = partner_ranking(y.copy(), y, job)
    assert perfect["pairwise_order_accuracy"] == 1.0 and perfect["ranked_pairs"] == 5 + 3
    reversed_ = partner_ranking(-y, y, job)
    assert reversed_["pairwise_order_accuracy"] == 0.0 and reversed_["share_jobs_negative"] == 1.0


def test_model_is_permutation_invariant_and_round_trips(small_model: Path, pairs, tmp_path: Path):
    model = load_interference_model("learned", str(small_model))
    assert isinstance(model, LearnedInterference)
    a = pairs.descriptor("V100", "LM (batch size 20)")
    b = pairs.descriptor("V100", "ResNet-50 (batch size 64)")
    c = pairs.descriptor("V100", "CycleGAN")
    nbrs = ((b, Sharing.GPU), (c, Sharing.SERVER), (a, Sharing.UPLINK), (b, Sharing.SERVER))
    qs = [CoLocation(a, nbrs), CoLocation(a, nbrs[::-1]), CoLocation(a, ()), CoLocation(a, nbrs[:1])]
    f = model.throughput_factors(qs)
    assert f[0] == pytest.approx(f[1], abs=1e-12)
    assert f[2] == 1.0
    assert ((f > 0) & (f <= 1)).all() and f[0] < f[3]
    again = model.throughput_factors(qs)  # from the cache
    np.testing.assert_array_equal(f, again)
    assert model._cache.hits >= len(qs)
    copy = tmp_path / "copy.json"
    model.save(copy)
    np.testing.assert_array_equal(LearnedInterference.load(copy).throughput_factors(qs), f)
    assert model.meta["train_config"]["seed"] == 3
    junk = tmp_path / "junk.json"
    junk.write_text("not a model")
    with pytest.raises(ValueError, match=r"junk\.json: not a marlsched interference model"):
        LearnedInterference.load(junk)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": "marlsched-interference-set-model/1"}))
    with pytest.raises(ValueError, match="retrain it"):
        LearnedInterference.load(old)


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


def test_predict_cli_on_unseen_descriptors(small_model: Path, tmp_path: Path, capsys):
    unseen = [  # job types no table measured, on GPUs Gavel never used
        dict(a_params_m=110, a_gflops=253, a_batch=12, a_solo_sps=95, a_amp=1, b_params_m=61.9, b_gflops=198)
        | dict(b_batch=8, b_solo_sps=60, b_amp=0, gpu_type="A100", level="gpu"),
        dict(a_params_m=1300, a_gflops=7800, a_batch=4, a_solo_sps=3.5, a_amp=1, b_params_m=5, b_gflops=0.001)
        | dict(b_batch=256, b_solo_sps=90000, b_amp=0, gpu_type="H100", level="server"),
        dict(a_params_m=38, a_gflops=30, a_batch=20, a_solo_sps=100, a_amp=0, b_params_m=38, b_gflops=30)
        | dict(b_batch=20, b_solo_sps=100, b_amp=0, gpu_type="T4", level="uplink"),
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
        assert float(r["pred_std_a"]) >= 0 and r["out_of_range"] in ("0", "1")
    assert float(got[0]["pred_std_a"]) > 0 and float(got[1]["pred_std_a"]) == 0  # fitted GPU level vs physics
    # mixed precision (Gavel measured none) and 1.3B parameters are beyond anything measured
    assert [r["out_of_range"] for r in got] == ["1", "1", "0"]
    assert "a:amp" in got[0]["ood"] and "a:gpu_mem_bw_gbs" in got[0]["ood"] and got[2]["ood"] == ""
    err = capsys.readouterr().err
    assert "2 of 3 pairs have a job outside the range the model was fitted on (lines 2, 3;" in err
    assert "amp (2)" in err and "move toward the prior" in err
    # Identical jobs get identical predictions in both directions.
    assert got[2]["pred_norm_a"] == got[2]["pred_norm_b"]


def test_predict_cli_rejects_bad_csv(small_model: Path, tmp_path: Path, capsys):
    good = dict(a_params_m=10, a_gflops=1, a_batch=32, a_solo_sps=500, a_amp=0, b_params_m=20, b_gflops=2)
    good |= dict(b_batch=64, b_solo_sps=400, b_amp=0, gpu_type="V100", level="gpu")
    cases = [
        ({k: v for k, v in good.items() if k != "b_gflops"}, "missing column"),
        (good | {"a_batch": "lots"}, "line 2: column 'a_batch' is 'lots'; expected a number"),
        (good | {"gpu_type": "GTX480"}, "column 'gpu_type' is 'GTX480'; expected one of"),
        (good | {"level": "rack"}, "column 'level' is 'rack'; expected gpu, server or uplink"),
        (good | {"a_amp": "maybe"}, "column 'a_amp' is 'maybe'"),
        (good | {"b_solo_sps": "-3"}, "expected a positive number"),
        (good | {"a_gpu_util": "150"}, "column 'a_gpu_util' is '150'; expected a percentage, 0-100"),
        (good | {"b_mem_gb": "0"}, "column 'b_mem_gb' is '0'; expected a positive number of GB"),
    ]
    for i, (row, message) in enumerate(cases):
        src = tmp_path / f"bad{i}.csv"
        with src.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(row))
            w.writeheader()
            w.writerow(row)
        with pytest.raises(SystemExit) as exc:
            cli_main(["interference", "predict", "--model", str(small_model), "--pairs", str(src), "--out", "x.csv"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"bad{i}.csv" in err and message in err, err
    with pytest.raises(SystemExit) as exc:
        cli_main(["interference", "predict", "--model", str(tmp_path / "missing.json"), "--pairs", "p", "--out", "o"])
    assert exc.value.code == 2
    assert re.search(r"interference model .*missing\.json not found", capsys.readouterr().err)


def test_predict_with_profile_columns_and_gpu_specs_file(small_model: Path, tmp_path: Path, capsys):
    specs = tmp_path / "gpus.yaml"
    specs.write_text("L40S: {fp32_tflops: 91.6, mem_bw_gbs: 864, mem_gb: 48, pcie_gbs: 31.5}\n")
    row = dict(a_params_m=25.6, a_gflops=12.3, a_batch=64, a_solo_sps=1500, a_amp=1, b_params_m=25.6)
    row |= dict(b_gflops=12.3, b_batch=64, b_solo_sps=1500, b_amp=1, gpu_type="L40S", level="gpu")
    rows = [row, row | {"a_gpu_util": 95, "b_gpu_util": 5}, row | {"a_mem_gb": 30, "b_mem_gb": 30}]
    src, out = tmp_path / "pairs.csv", tmp_path / "pred.csv"
    with src.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=[*REQUIRED, "a_gpu_util", "b_gpu_util", "a_mem_gb", "b_mem_gb"])
        w.writeheader()
        w.writerows(rows)
    args = ["interference", "predict", "--model", str(small_model), "--pairs", str(src), "--out", str(out)]
    assert cli_main([*args, "--gpu-specs", str(specs)]) == 0
    got = list(csv.DictReader(out.open()))
    # Gavel's tables carry no profile: the model does not use the columns (before, it fed them to its
    # structure, which no measurement had fitted), and says so; L40S is beyond Gavel's GPUs
    err = capsys.readouterr().err
    assert "not fitted on profile column(s) gpu_util, mem_gb" in err and "gpu_fp32_tflops (3)" in err
    assert "a:gpu_util (not fitted)" in got[1]["ood"] and "b:gpu_fp32_tflops" in got[0]["ood"]
    plain, profiled, too_big = (float(r["pred_norm_a"]) for r in got)
    assert profiled == plain and float(got[1]["pred_norm_b"]) == float(got[0]["pred_norm_b"])  # 95 + 5 = 100%
    assert too_big == plain  # 60 GB on a 48 GB GPU: mem_gb is not used by a model not fitted on it
    bad = tmp_path / "bad.yaml"
    bad.write_text("L40S: {fp32_tflops: 91.6, mem_bw_gbs: fast, mem_gb: 48, pcie_gbs: 31.5}\n")
    with pytest.raises(SystemExit) as exc:
        cli_main([*args, "--gpu-specs", str(bad)])
    assert exc.value.code == 2
    assert "bad.yaml: L40S.mem_bw_gbs: is 'fast'; expected a positive number" in capsys.readouterr().err


def test_eval_cli_writes_metrics_and_parity_plot(small_model: Path, gavel_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "eval"
    args = ["interference", "eval", "--model", str(small_model), "--data", f"gavel:{gavel_dir}"]
    assert cli_main([*args, "--split", "random", "--steps", "40", "--out", str(out)]) == 0
    res = json.loads((out / "eval.json").read_text())
    said = capsys.readouterr().err  # the figures the doubt is judged by are printed, not only in eval.json
    assert f"the fitted structure alone: MAE {res['structure_alone']['mae']:.3f}" in said
    assert f"coverage of the std {res['coverage']:.2f} (calibrated {res['coverage_calibrated']:.2f})" in said
    for key in ("mae", "mape", "spearman", "n", "mean_predictor_mae", "reference_mean_predictor_mae"):
        assert key in res, key
    assert 0.5 < res["pairwise_order_accuracy"] <= 1 and res["ranked_pairs"] > 1000
    assert res["n"] == 2 * 976 and res["reference_mean_predictor_mae"] == 0.144
    assert res["mae"] < res["mean_predictor_mae"]
    assert (out / "parity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_leave_model_out_folds_hide_the_family(pairs):
    for fam, held in folds(pairs, "leave-model-out", seed=0):
        fa, fb = pairs.family_a(), pairs.family_b()
        assert ((fa[held] == fam) | (fb[held] == fam)).all()
        assert held.sum() == (pairs.feasible & ((fa == fam) | (fb == fam))).sum()


class _Plain:
    """A model seen only through ``throughput_factors`` (as a plugin would be), recording every query."""

    name = "plain"

    def __init__(self, inner, pure: bool = False) -> None:
        self.inner, self.pure, self.asked = inner, pure, []

    def throughput_factors(self, queries):
        self.asked.extend(queries)
        return self.inner.throughput_factors(queries)


@pytest.mark.parametrize("kind", ["oracle", "learned"])
def test_simulator_flat_queries_and_memo_match_plain_queries(kind, pairs, small_model: Path):
    """The simulator's flat, memoised co-locations give the very results of asking every job's query, and a
    pure model is asked each distinct co-location once, a plain one at every refresh."""
    from cluster_sim.policies import get_policy
    from cluster_sim.simulator import Simulator
    from cluster_sim.workload_spec import parse_workload_spec
    from tests.test_simulator import tiny_cluster

    def fresh():
        return GroundTruthInterference(pairs) if kind == "oracle" else LearnedInterference.load(small_model)

    view = tiny_cluster(servers=2).view  # 16 GPUs: one-GPU jobs queue, and blind packing shares GPUs
    w = parse_workload_spec("synthetic:200,load=3", cluster_gpus=view.num_gpus, seed=4)
    runs = {}
    for name, model in (("flat", fresh()), ("plain", _Plain(fresh())), ("pure", _Plain(fresh(), pure=True))):
        sim = Simulator(view, w, interference=model, gpu_sharing=True, restart_cost=30.0)
        runs[name] = (sim.run(get_policy("pack-blind", seed=0)), model)
    jct = {name: r.jct for name, (r, _) in runs.items()}
    assert np.array_equal(jct["flat"], jct["plain"]) and np.array_equal(jct["pure"], jct["plain"])
    assert (runs["flat"][0].interference_slowdown > 0.01).any()  # jobs did slow each other down
    plain, pure = runs["plain"][1].asked, runs["pure"][1].asked
    levels = {level for q in plain for _, level in q.neighbours}
    assert levels == {Sharing.GPU, Sharing.SERVER}  # both levels were exercised
    assert len(pure) == len(set(pure)) < len(plain)
    assert set(pure) == set(plain)


# -- online correction and what the model says of itself -------------------------------------------------


def test_metadata_names_the_inputs_and_out_of_range_jobs_stay_within_the_bound(small_model: Path) -> None:
    """The model file says which inputs it was trained with (Gavel: descriptors, no profile column); jobs far
    outside the fitted range are flagged and still never predicted below 1 / (1 + MAX_SENSITIVITY)."""
    from interference.learned import MAX_SENSITIVITY

    model = LearnedInterference.load(small_model)
    assert model.meta["inputs"]["descriptors"] == ["params_m", "gflops", "batch", "solo_sps", "amp", "gpu_type"]
    assert model.meta["inputs"]["profile"] == {"gpu_util": 0.0, "mem_util": 0.0, "mem_gb": 0.0}
    extreme = [
        _cols(1, params_m=1e5, gflops=1e4, batch=1.0, solo_sps=0.5),
        _cols(1, params_m=1e-3, gflops=1e-4, batch=1e5, solo_sps=1e7),
        _cols(1, params_m=3e3, gflops=5e3, batch=4096.0, solo_sps=1e5, gpu_util=100.0, mem_util=100.0),
    ]
    for a, b in itertools.product(extreme, repeat=2):
        p = model.predict_pairs(a, b, np.zeros(1, dtype=np.int64))
        assert p.out_of_range.all() or a is extreme[2]
        assert 1.0 / (1.0 + MAX_SENSITIVITY) <= float(p.factor[0]) <= 1.0


def test_online_correction_shrinks_towards_what_it_observes_and_is_deterministic(small_model: Path) -> None:
    """One observation moves a pair's prediction part of the way to what was seen, many bring it there; a
    job type corrected next to one partner moves next to others the same way; same evidence, same answer."""
    from interference.online import OnlineCorrection

    base = LearnedInterference.load(small_model)
    a = JobDescriptor(25.0, 12.3, 64, 400.0, False, "V100")
    b = JobDescriptor(110.0, 253.0, 12, 95.0, False, "V100")
    c = JobDescriptor(1.6, 0.5, 512, 9000.0, False, "V100")
    start = float(base.throughput_factors([CoLocation(a, ((b, Sharing.GPU),))])[0])
    seen = 0.97 if start < 0.9 else 0.5
    model = OnlineCorrection(base)
    model.observe(a, b, seen)
    once, sd_once = model.predict(a, b)
    assert min(start, seen) < once < max(start, seen)
    for _ in range(40):
        model.observe(a, b, seen)
    many, sd_many = model.predict(a, b)
    assert abs(many - seen) < 0.02 and sd_many < sd_once
    # the type's sensitivity offset carries to a partner it was never seen with
    before = float(base.throughput_factors([CoLocation(a, ((c, Sharing.GPU),))])[0])
    after, _ = model.predict(a, c)
    assert (after - before) * (seen - start) > 0
    # the simulator-facing answer is the corrected one; other levels pass through
    q = [CoLocation(a, ((b, Sharing.GPU),)), CoLocation(a, ((b, Sharing.SERVER),))]
    got = model.throughput_factors(q)
    assert got[0] == pytest.approx(many) and got[1] == base.throughput_factors(q[1:])[0]
    again = OnlineCorrection(base)
    for job, partner, f in model.history:
        again.observe(job, partner, f)
    assert again.predict(a, c) == model.predict(a, c)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        model.observe(a, b, 1.5)


def test_server_level_correction_leaves_gpu_pairs_and_unseen_answers_as_the_model_gives_them(small_model: Path) -> None:
    """A corrector at the server level (what the placing agents' inputs ask) moves the server-level answers of
    what it saw and passes GPU-level queries through; a query with no evidence is the model's answer exactly,
    even next to 1.0 (the log scale's floor is for observations only)."""
    from interference.online import OnlineCorrection

    base = LearnedInterference.load(small_model)
    a = JobDescriptor(25.0, 12.3, 64, 400.0, False, "V100")
    b = JobDescriptor(110.0, 253.0, 12, 95.0, False, "V100")
    c = JobDescriptor(1.6, 0.5, 512, 9000.0, False, "P100")
    model = OnlineCorrection(base, level=Sharing.SERVER)
    near_one = [CoLocation(c, ((c, Sharing.SERVER),)), CoLocation(a, ((b, Sharing.GPU),))]
    model.observe(b, a, 0.999)  # evidence, but none on c
    assert list(model.throughput_factors(near_one)) == list(base.throughput_factors(near_one))
    start = float(base.throughput_factors([CoLocation(a, ((b, Sharing.SERVER),))])[0])
    for _ in range(40):
        model.observe(a, b, 0.6)
    q = [CoLocation(a, ((b, Sharing.SERVER),)), CoLocation(a, ((b, Sharing.GPU),))]
    got = model.throughput_factors(q)
    assert abs(got[0] - 0.6) < 0.02 < abs(start - 0.6)
    assert got[1] == base.throughput_factors(q[1:])[0]


def test_placing_agents_with_online_inputs_observe_server_pairs_and_schedule_as_the_predictor_does(
    small_model: Path, gavel_dir: Path
) -> None:
    """interference_online: pairs of jobs alone together on a server are observed (both jobs), with the factor
    the simulator gives each; where the predictor already gives that factor the schedule is the one
    without correction, job for job, and the same run twice observes the same history."""
    from cluster_sim.build import build_simulator
    from interference.online import OnlineCorrection
    from marl.env.priority_agents import PriorityAgents

    spec = "synthetic:200,load=3,model_rule=gavel"
    data = f"gavel:{gavel_dir}"
    runs, histories = [], []
    for online in (False, True, True):
        sim = build_simulator("small-hetero", spec, seed=1, interference="oracle", interference_data=data)
        agents = PriorityAgents(None, placing=True, interference_inputs=f"learned:{small_model}",
                                interference_online=online)  # fmt: skip
        res = sim.run(agents)
        runs.append((res.jct.tolist(), res.metrics()["jobs_completed"]))
        if online:
            assert isinstance(agents.inputs.model, OnlineCorrection)
            histories.append(agents.inputs.model.history)
    history = histories[0]
    assert len(history) >= 10 and len(history) % 2 == 0 and history == histories[1]
    pairs = [(a, b) for a, b, _ in history]
    truth = load_interference_model("oracle", data)
    observed = np.array([f for _, _, f in history])
    told = truth.throughput_factors([CoLocation(a, ((b, Sharing.SERVER),)) for a, b in pairs])
    assert np.allclose(observed, told, atol=1e-6)  # what the simulator ran them at, alone together on a server
    assert runs[0] == runs[1] == runs[2]
    with pytest.raises(ValueError, match="interference_inputs too"):
        PriorityAgents(None, placing=True, interference_online=True)


def test_packing_scheduler_corrects_its_predictor_from_the_pairs_it_runs(small_model: Path, gavel_dir: Path) -> None:
    """pack-aware with online=True observes every pair it co-locates (both jobs) and its corrected predictor
    then matches the ground truth on those pairs better than the predictor alone; two runs, one history."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies.gpu_packing import GpuPacking
    from interference.online import OnlineCorrection

    cluster = {"name": "one-gpu", "pods": 1, "racks_per_pod": 2, "servers_per_rack": 6,
               "server": {"base": "pcie-4", "gpus_per_server": 1}, "gpu_type": "V100"}  # fmt: skip
    data = f"gavel:{gavel_dir}"
    sim = build_simulator(cluster, "synthetic:300,load=5,model_rule=gavel", seed=2, interference="oracle",
                          interference_data=data, gpu_sharing=True)  # fmt: skip
    jobs = sim.jobs.subset(np.flatnonzero(sim.jobs.num_gpus == 1))
    histories = []
    for _ in range(2):
        sim = build_simulator(cluster, jobs, seed=2, interference="oracle", interference_data=data, gpu_sharing=True)
        policy = GpuPacking(mode="aware", predictor=str(small_model), online=True)
        assert sim.run(policy).metrics()["jobs_completed"] == len(jobs)
        assert isinstance(policy.model, OnlineCorrection)
        histories.append(policy.model.history)
    history = histories[0]
    assert history == histories[1] and len(history) >= 10 and len(history) % 2 == 0
    truth = load_interference_model("oracle", data)
    pairs = list(dict.fromkeys((a, b) for a, b, _ in history))
    y = truth.throughput_factors([CoLocation(a, ((b, Sharing.GPU),)) for a, b in pairs])
    before = np.abs(policy.base_model.throughput_factors([CoLocation(a, ((b, Sharing.GPU),)) for a, b in pairs]) - y)
    after = np.abs(np.array([policy.model.predict(a, b)[0] for a, b in pairs]) - y)
    assert after.mean() < 0.5 * before.mean()
    with pytest.raises(ValueError, match="online=True"):
        GpuPacking(mode="blind", online=True)


def test_eval_on_a_measured_pairs_file_sits_beside_the_no_slowdown_and_utilisation_answers(
    small_model: Path, tmp_path: Path, gavel_dir: Path
) -> None:
    """``eval --pairs``: any source's measured pairs (descriptor columns + norm_a, norm_b), the model's MAE,
    bias, rank and coverage next to always answering 1.0 and, with utilisation columns, the reference."""
    pairs = load_gavel_pairs(gavel_dir)
    rows = np.flatnonzero(pairs.feasible & (pairs.scale_factor == 1) & (pairs.gpu_type == "P100"))[:120]
    src = tmp_path / "measured.csv"
    cols = [*REQUIRED, "a_gpu_util", "b_gpu_util", "norm_a", "norm_b"]
    with src.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for r in rows.tolist():
            a = pairs.descriptor("P100", str(pairs.job_a[r]))
            b = pairs.descriptor("P100", str(pairs.job_b[r]))
            row = {f"{p}_{c}": getattr(d, c) for p, d in (("a", a), ("b", b)) for c in ("params_m", "gflops", "batch")}
            row |= {"a_solo_sps": a.solo_sps, "b_solo_sps": b.solo_sps, "a_amp": int(a.amp), "b_amp": int(b.amp)}
            row |= {"gpu_type": "P100", "level": "gpu", "a_gpu_util": 60, "b_gpu_util": 70}
            w.writerow(row | {"norm_a": pairs.norm_a[r], "norm_b": pairs.norm_b[r]})
    out = tmp_path / "ev"
    assert cli_main(["interference", "eval", "--model", str(small_model), "--pairs", str(src), "--out", str(out)]) == 0
    result = json.loads((out / "eval.json").read_text())
    model, none = result["model"], result["no_slowdown"]
    assert model["n"] == none["n"] == 2 * len(rows)
    assert model["mae"] < none["mae"] and none["bias"] > 0 and none["pairwise_order_accuracy"] == 0.5
    assert 0.0 <= model["coverage"] <= 1.0 and "utilisation_reference" in result
    assert (out / "parity.png").is_file()
    # a pairs file without the measured columns is refused by name
    plain = tmp_path / "plain.csv"
    plain.write_text(",".join(REQUIRED) + "\n" + "10,1,32,500,0,20,2,64,400,0,V100,gpu\n")
    with pytest.raises(SystemExit) as exc:
        cli_main(["interference", "eval", "--model", str(small_model), "--pairs", str(plain), "--out", str(out)])
    assert exc.value.code == 2


def test_light_pairs_are_not_slowed_by_extrapolation(small_model: Path) -> None:
    """Below the lowest combined GPU use of any training pair, the slowdown shrinks in proportion: profiled
    light jobs slow each other less than the bare structure says, heavy ones exactly as much."""
    from dataclasses import asdict

    from interference.learned import ContentionParams

    model = _unguarded(LearnedInterference.load(small_model))  # profile columns fed to the structure
    assert len(model.params.pair_use_lo) == model.params.members
    bare = LearnedInterference(ContentionParams(**{**asdict(model.params), "pair_use_lo": []}), model.meta)
    level = np.zeros(1, dtype=np.int64)
    light = _cols(1, gpu_util=4.0, mem_util=4.0)
    heavy = _cols(1, gpu_util=95.0, mem_util=95.0)
    guarded, unguarded = model.predict_pairs(light, light, level), bare.predict_pairs(light, light, level)
    assert 1.0 / guarded.factor[0] - 1.0 < 0.5 * (1.0 / unguarded.factor[0] - 1.0)
    assert model.predict_pairs(heavy, heavy, level).factor[0] == bare.predict_pairs(heavy, heavy, level).factor[0]


def test_train_calibrates_the_doubt_of_new_job_types(gavel_dir: Path, tmp_path: Path) -> None:
    """`train` (calibration on by default) stores one extra std per novelty class from held-out errors,
    growing with novelty; a pair of new job types then gets a wider std than the ensemble's spread alone."""
    out = tmp_path / "cal.json"
    rc = cli_main(["interference", "train", "--data", f"gavel:{gavel_dir}", "--members", "2", "--steps", "40",
                   "--seed", "1", "--out", str(out)])  # fmt: skip
    assert rc == 0
    model = LearnedInterference.load(out)
    sigma = model.params.novelty_std
    assert len(sigma) == 3 and 0 < sigma[1] <= sigma[2]
    assert model.meta["calibration"]["samples"][1] > 0 and model.meta["calibration"]["coverage_target"] > 0.6
    from dataclasses import asdict

    from interference.learned import ContentionParams

    bare = LearnedInterference(ContentionParams(**{**asdict(model.params), "novelty_std": []}), model.meta)
    new = _cols(3, params_m=7.0, gflops=3.0, batch=48.0, solo_sps=900.0)
    level = np.zeros(3, dtype=np.int64)
    wide, narrow = model.predict_pairs(new, new, level), bare.predict_pairs(new, new, level)
    assert np.allclose(wide.factor, narrow.factor) and (wide.std >= sigma[2] - 1e-12).all()
    assert (wide.std > narrow.std).all()


def test_every_gpu_type_a_cluster_can_name_has_datasheet_figures() -> None:
    """Each GPU generation the topology knows resolves in the interference datasheet (whatever its case),
    so the measured-slowdown ground truth runs on Sia's cluster (RTX 2080 Ti) as on Gavel's."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from interference.gpu_specs import gpu_spec
    from topology.servers import GPU_LINKS

    for name in GPU_LINKS:
        assert gpu_spec(name).name == name.upper()
    data = Path(__file__).resolve().parents[2] / "shared" / "traces" / "gavel" / "simulation_throughputs.json"
    sim = build_simulator("sia-hetero", "synthetic:30,load=0.8,model_rule=gavel", seed=0, interference="oracle",
                          interference_data=f"gavel:{data}")  # fmt: skip
    assert sim.run(get_policy("gavel")).metrics()["jobs_completed"] == 30


# -- out of range: the safe prior; training on a user's own pairs ------------------------------------------


def test_out_of_range_answers_move_to_the_safe_prior(small_model: Path, pairs) -> None:
    """Within the fitted range the answer is the structure's; far beyond it (descriptors, GPU, mixed
    precision), or with profile columns the model was not fitted on, it is the prior's but for OOD_FLOOR of
    the gap, with the prior's std, the inputs named, and the simulator getting the same answers."""
    from interference.learned import OOD_FLOOR, safe_prior

    model = LearnedInterference.load(small_model)
    bare = _unguarded(model)
    q, _, _ = gavel_queries(pairs.select(pairs.gpu_type == "V100"))
    a = JobColumns.from_descriptors([c.job for c in q])
    b = JobColumns.from_descriptors([c.neighbours[0][0] for c in q])
    lvl = np.zeros(len(q), dtype=np.int64)
    inside = model.predict_pairs(a, b, lvl)
    np.testing.assert_array_equal(inside.factor, bare.predict_pairs(a, b, lvl).factor)
    assert (inside.trust == 1).all() and not inside.out_of_range.any() and set(inside.ood) == {""}
    h200 = np.full(len(q), "H200")
    far = {
        "log_flops_per_param": lambda c: replace(c, params_m=c.params_m * 1e-6),
        "gpu_mem_bw_gbs": lambda c: replace(c, gpu_type=h200, solo_sps=c.solo_sps * 67 / 15.7),
        "amp": lambda c: replace(c, amp=np.ones(len(c))),
    }
    for name, move in far.items():
        p, raw = model.predict_pairs(move(a), move(b), lvl), bare.predict_pairs(move(a), move(b), lvl)
        assert p.out_of_range.all() and all(f"a:{name}" in x and f"b:{name}" in x for x in p.ood), name
        np.testing.assert_allclose(p.factor - 1.0, OOD_FLOOR * (raw.factor - 1.0), atol=1e-12)
        assert (p.std >= np.sqrt(1 - OOD_FLOOR) * model.params.prior_std).all()
        flat = model.throughput_factors([CoLocation(x, ((y, Sharing.GPU),)) for x, y in zip(
            *(_descs(move(c)) for c in (a, b)), strict=True)])  # fmt: skip
        np.testing.assert_allclose(flat, p.factor, atol=1e-12)
    # the prior covers what was measured: the 68% quantile of Gavel's deviations from 1.0
    _, y, _ = gavel_queries(pairs)
    assert model.params.prior_std == pytest.approx(np.quantile(np.abs(1 - y), 0.6827), rel=1e-9)
    # profile columns the model was not fitted on: the structure ignores them, the prior is time slicing
    for util in (30.0, 90.0):
        pa, pb = replace(a, gpu_util=np.full(len(q), util)), replace(b, gpu_util=np.full(len(q), util))
        p = model.predict_pairs(pa, pb, lvl)
        prior = safe_prior(pa.gpu_util, pb.gpu_util)
        assert prior[0] == min(1.0, 100 / (2 * util))
        np.testing.assert_allclose(p.factor, OOD_FLOOR * inside.factor + (1 - OOD_FLOOR) * prior, atol=1e-12)
        assert all("a:gpu_util (not fitted)" in x for x in p.ood)
    # mem_gb, never fitted, does not make a pair infeasible
    over = model.predict_pairs(replace(a, mem_gb=np.full(len(q), 9.0)), replace(b, mem_gb=np.full(len(q), 8.0)), lvl)
    assert (over.factor > INFEASIBLE_GPU_FACTOR).all()


def _descs(c: JobColumns) -> list[JobDescriptor]:
    from interference.training import descriptors_of

    return descriptors_of(c)


def test_out_of_range_is_never_worse_than_the_prior_on_a_held_out_gpu(pairs) -> None:
    """Fitted on K80 and P100, the V100 pairs lie beyond its GPU range: the answer's MAE there is at most the
    prior's (1.0), and its std covers at least 68% of the errors."""
    keep = pairs.feasible & (pairs.scale_factor == 1)
    q, y, _ = gavel_queries(pairs.select(keep & (pairs.gpu_type != "V100")))
    model = fit_queries(q, y, TrainConfig(steps=150, members=2, seed=0))
    tq, ty, _ = gavel_queries(pairs.select(keep & (pairs.gpu_type == "V100")))
    a = JobColumns.from_descriptors([c.job for c in tq])
    b = JobColumns.from_descriptors([c.neighbours[0][0] for c in tq])
    p = model.predict_pairs(a, b, np.zeros(len(tq), dtype=np.int64))
    assert p.out_of_range.all() and all("gpu_fp32_tflops" in x for x in p.ood)
    err = np.abs(p.factor - ty)
    assert err.mean() <= np.abs(1.0 - ty).mean() and (err <= p.std).mean() >= 0.68


def test_train_on_own_measured_pairs(profiled_model: Path, own_pairs, gavel_dir: Path, tmp_path: Path, capsys) -> None:
    """`train --data gavel:... --data pairs:FILE` fits the profile path on the user's pairs: the model uses the
    profile columns (a busier partner slows more), records both sources, and on other pairs of the same source
    beats the descriptor-only model fitted on the same Gavel tables (and the prior)."""
    from interference.evaluation import evaluate_pairs_file, floor_unmeasured

    model = LearnedInterference.load(profiled_model)
    assert model.params.profile_fitted == ["gpu_util", "mem_util"]
    assert [s["kind"] for s in model.meta["data"]] == ["gavel", "pairs"] and model.meta["data"][1]["samples"] == 80
    assert model.meta["inputs"]["profile"]["gpu_util"] > 0
    v = _cols(4, gpu_util=50.0, mem_util=50.0)
    lvl = np.zeros(4, dtype=np.int64)
    busy = model.predict_pairs(v, _cols(4, gpu_util=95.0, mem_util=95.0), lvl)
    idle = model.predict_pairs(v, _cols(4, gpu_util=10.0, mem_util=10.0), lvl)
    assert (busy.factor < idle.factor).all() and not busy.out_of_range.any() and (busy.trust == 1).all()
    desc = tmp_path / "desc.json"
    cli_main(["interference", "train", "--data", f"gavel:{own_pairs['no_v100']}", "--members", "4", "--seed", "3",
              "--steps", "150", "--no-calibrate", "--out", str(desc)])  # fmt: skip
    mine = evaluate_pairs_file(model, own_pairs["test"])["result"]
    theirs = evaluate_pairs_file(LearnedInterference.load(desc), own_pairs["test_plain"])["result"]
    assert mine["model"]["mae"] < 0.75 * theirs["model"]["mae"], (mine["model"], theirs["model"])
    assert mine["model"]["mae"] < mine["safe_prior"]["mae"] and mine["model"]["mae"] < mine["no_slowdown"]["mae"]
    # alone, with the doubt calibrated on the pairs themselves (five folds)
    alone = tmp_path / "alone.json"
    assert cli_main(["interference", "train", "--data", f"pairs:{own_pairs['few']}", "--members", "2", "--steps",
                     "100", "--out", str(alone)]) == 0  # fmt: skip
    solo = LearnedInterference.load(alone)
    assert solo.meta["calibration"]["own_pairs"]["samples"][0] > 0 and solo.params.novelty_std[0] > 0
    # random folds hold out no job type: a type the pairs lack gets at least the measured types' doubt, said so
    own = solo.meta["calibration"]["own_pairs"]
    assert own["floored"] == [c for c in (1, 2) if own["samples"][c] == 0]  # these pairs' folds hold types out
    # where no fold held a type out, a type the pairs lack is never surer than a measured one
    assert floor_unmeasured([0.05, 0.0, 0.0], [40, 0, 0]) == ([0.05, 0.05, 0.05], [1, 2])
    assert floor_unmeasured([0.05, 0.2, 0.0], [40, 6, 0]) == ([0.05, 0.2, 0.2], [2])
    assert floor_unmeasured([0.05, 0.2, 0.3], [40, 6, 2]) == ([0.05, 0.2, 0.3], [])


def test_a_pair_measured_again_with_other_throughputs_is_said_by_its_lines(tmp_path: Path, own_pairs) -> None:
    """The same two jobs on one GPU type and level on two lines (in either order) with throughputs more than 0.1
    apart: a warning names both lines and values; an equal repeat is quiet."""
    import csv
    import warnings

    from interference.pairs_csv import JOB_COLUMNS, PROFILE, read_measured, read_pairs_csv

    lines = own_pairs["few"].read_text().splitlines()
    header = lines[0].split(",")
    row = dict(zip(header, lines[1].split(","), strict=True))
    swapped = {**row, **{f"{p}_{c}": row[f"{q}_{c}"] for p, q in ("ab", "ba") for c in (*JOB_COLUMNS, *PROFILE)
                         if f"{q}_{c}" in row}}  # fmt: skip
    swapped["norm_a"], swapped["norm_b"] = "0.2", "0.3"
    path = tmp_path / "again.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, header)
        writer.writeheader()
        writer.writerows([row, row, swapped])
    rows = read_pairs_csv(path)[0]  # line 2's values are said in line 4's order
    with pytest.warns(UserWarning, match=rf"{path}: the same pair measured again with other throughputs, on lines 2 "
                      rf"and 4 \({float(row['norm_b']):g}/{float(row['norm_a']):g} against 0.2/0.3\)"):  # fmt: skip
        read_measured(path, rows, "training")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_measured(path, rows[:2], "training")  # line 3 repeats line 2 exactly


def test_train_refuses_bad_pairs_files_by_file_line_and_column(tmp_path: Path, own_pairs, capsys) -> None:
    lines = own_pairs["few"].read_text().splitlines()
    header = lines[0].split(",")
    cases = {
        "level": ("server", "line 3: column 'level' is 'server'; training uses pairs measured on one GPU"),
        "norm_a": ("fast", "line 3: column 'norm_a' is 'fast'; expected a number"),
        "norm_b": ("0", "line 3: column 'norm_b' is '0'; expected a measured normalised throughput"),
        "a_gpu_util": ("130", "line 3: column 'a_gpu_util' is '130'; expected a percentage, 0-100"),
    }
    for col, (value, message) in cases.items():
        bad = tmp_path / f"bad_{col}.csv"
        row = lines[2].split(",")
        row[header.index(col)] = value
        bad.write_text("\n".join([lines[0], lines[1], ",".join(row)]) + "\n")
        with pytest.raises(SystemExit) as exc:
            cli_main(["interference", "train", "--data", f"pairs:{bad}", "--out", str(tmp_path / "m.json")])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"bad_{col}.csv: {message}" in err, err
    no_norm = tmp_path / "no_norm.csv"
    no_norm.write_text("\n".join(",".join(x.split(",")[:-2]) for x in lines[:3]) + "\n")
    with pytest.raises(SystemExit):
        cli_main(["interference", "train", "--data", f"pairs:{no_norm}", "--out", str(tmp_path / "m.json")])
    err = capsys.readouterr().err
    assert "no_norm.csv: line 1: missing column(s) norm_a, norm_b; training needs" in err
    with pytest.raises(SystemExit):
        cli_main(["interference", "train", "--data", f"pair:{no_norm}", "--out", str(tmp_path / "m.json")])
    assert "unknown source kind 'pair'; pass gavel:PATH or pairs:FILE" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a bare .csv is a pairs file, not Gavel's JSON
        cli_main(["interference", "train", "--data", str(no_norm), "--out", str(tmp_path / "m.json")])
    assert "no_norm.csv: line 1: missing column(s) norm_a, norm_b" in capsys.readouterr().err
    shipped = Path(__file__).resolve().parents[1] / "experiments" / "policies" / "interference-gavel" / "model.json"
    with pytest.raises(SystemExit):  # eval's --data refits Gavel's folds; measured pairs go to --pairs
        cli_main(["interference", "eval", "--model", str(shipped), "--data", str(no_norm), "--out", str(tmp_path)])
    assert (
        f"eval's --data holds Gavel's tables (gavel:PATH), refitted per fold; score the model on measured pairs "
        f"with --pairs {no_norm}" in capsys.readouterr().err
    )


def test_online_packing_observes_the_gpu_term_on_shared_servers(small_model: Path, gavel_dir: Path, truth) -> None:
    """On servers of four GPUs the simulator's factor of a shared-GPU job also holds the server term of the
    jobs on the server's other GPUs; the packing scheduler divides it out, so what it observes of each pair
    is the pair's own GPU factor (the measured one here), not a busy server."""
    from cluster_sim.build import build_simulator
    from cluster_sim.scheduler_spec import load_custom_scheduler

    cluster = {"name": "four-gpu", "pods": 1, "racks_per_pod": 1, "servers_per_rack": 3,
               "server": {"base": "pcie-4", "gpus_per_server": 4}, "gpu_type": "V100"}  # fmt: skip
    data = f"gavel:{gavel_dir}"
    sim = build_simulator(cluster, "synthetic:200,load=4,model_rule=gavel", seed=1, interference="oracle",
                          interference_data=data, gpu_sharing=True)  # fmt: skip
    jobs = sim.jobs.subset(np.flatnonzero(sim.jobs.num_gpus == 1))
    sim = build_simulator(cluster, jobs, seed=1, interference="oracle", interference_data=data, gpu_sharing=True)
    spec = f"cluster_sim.policies.gpu_packing:GpuPacking,mode=aware,predictor={small_model},online=true"
    policy = load_custom_scheduler(spec)  # the command line's spelling
    sim.run(policy)
    history = policy.model.history
    assert len(history) >= 10
    observed = np.array([f for _, _, f in history])
    measured = np.array([truth.pair_factor(a, b, Sharing.GPU) for a, b, _ in history])
    np.testing.assert_allclose(observed, np.minimum(measured, 1.0), atol=1e-9)


def test_the_marlsched_command_records_how_a_predictor_was_made(own_pairs, tmp_path: Path) -> None:
    """``marlsched interference train`` writes the command as given, the code and library versions and the SHA-256
    of its data into the predictor, as a policy folder records its own; the file still loads and predicts."""
    import hashlib
    import shlex

    from experiments.cli import main
    from marl.deploy.policy_files import code_version

    out = tmp_path / "m.json"
    argv = ["interference", "train", "--data", f"pairs:{own_pairs['few']}", "--members", "2", "--steps", "50",
            "--no-calibrate", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    prov = json.loads(out.read_text())["provenance"]
    assert prov["command"] == shlex.join(["marlsched", *argv])
    assert prov["code_version"] == code_version() and {"numpy", "torch"} <= set(prov["libraries"])
    data = Path(own_pairs["few"])
    assert prov["files"] == {str(data.resolve()): hashlib.sha256(data.read_bytes()).hexdigest()}
    assert LearnedInterference.load(out).meta["provenance"] == prov


def test_measured_pairs_over_the_gpus_memory_are_named_and_a_card_of_more_memory_can_be_given(
    tmp_path: Path, capsys
) -> None:
    """Pairs that ran together on one GPU, whose ``mem_gb`` add up to more than the built-in V100's 16 GB: ``train``
    says the model answers them 0.05 (they cannot share it) and how to describe the card; given as a 32 GB card
    (``--gpu-specs``, for ``train`` as for ``predict``), they are fitted as measured."""
    head = "a_params_m,a_gflops,a_batch,a_solo_sps,a_amp,b_params_m,b_gflops,b_batch,b_solo_sps,b_amp,gpu_type,level,"
    head += "a_mem_gb,b_mem_gb,norm_a,norm_b\n"
    rows = ["25.6,12.3,64,380,0,3.5,0.9,64,900,0,{g},gpu,9.1,4.2,0.71,0.58\n",
            "25.6,12.3,64,380,0,110,33.6,32,150,0,{g},gpu,9.1,12.5,0.55,0.52\n",
            "110,33.6,32,150,0,3.5,0.9,64,900,0,{g},gpu,12.5,4.2,0.62,0.49\n"]  # fmt: skip
    specs = tmp_path / "gpus.yaml"
    specs.write_text("V100-32GB: {fp32_tflops: 15.7, mem_bw_gbs: 900, mem_gb: 32, pcie_gbs: 15.8}\n")
    fitted = {}
    for g, extra in (("V100", []), ("V100-32GB", ["--gpu-specs", str(specs)])):
        data = tmp_path / f"{g}.csv"
        data.write_text(head + "".join(r.format(g=g) for r in rows))
        out = tmp_path / f"{g}.json"
        argv = ["interference", "train", "--data", f"pairs:{data}", "--members", "2", "--steps", "60", "--no-calibrate"]
        assert cli_main([*argv, *extra, "--out", str(out)]) == 0
        fitted[g] = (capsys.readouterr().err, json.loads(out.read_text())["fit_in_sample"]["mae"])
    said, mae = fitted["V100"]
    assert (
        "warning: 4 of the 6 measured samples are of pairs whose mem_gb add up to more than their GPU's memory " in said
    )
    assert "(V100), which the model answers with 0.05" in said and "--gpu-specs FILE" in said
    assert "warning" not in fitted["V100-32GB"][0] and fitted["V100-32GB"][1] < mae
