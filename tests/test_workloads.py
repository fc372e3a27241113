"""Workload generation and trace loading, checked against the real public traces in ../shared/traces."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from cluster_sim import synthetic
from cluster_sim.model_zoo import MODEL_NAMES, ZOO
from cluster_sim.pollux_apps import load_application
from cluster_sim.synthetic import derive_philly_tables, synthetic_workload
from cluster_sim.traces import TraceFormatError, load_gavel, load_openb, load_philly, load_pollux
from cluster_sim.traces.periods import (
    DAY,
    HELD_OUT_START,
    PERIODS,
    PHILLY_START,
    REPORT_END,
    period,
    philly_seconds,
    window_spec,
)
from cluster_sim.workload import Workload
from cluster_sim.workload_spec import WorkloadSpecError, parse_workload_spec

COLUMNS = ("arrival", "num_gpus", "duration", "model", "batch_size", "tenant")


def same(a: Workload, b: Workload) -> bool:
    return all(np.array_equal(getattr(a, c), getattr(b, c)) for c in COLUMNS) and a.tenants == b.tenants


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    return rows[0], rows[1:]


@pytest.fixture(scope="module")
def philly_path(traces_dir: Path) -> Path:
    return traces_dir / "pollux-osdi21" / "traces" / "philly.csv"


@pytest.fixture(scope="module")
def philly_file(philly_path: Path) -> dict[str, np.ndarray]:
    """The Philly columns read independently of the loader, in file order."""
    header, rows = read_rows(philly_path)
    cols = dict(zip(header, (np.array(c) for c in zip(*rows, strict=True)), strict=True))
    return {
        "ts": cols["timestamp"].astype("datetime64[s]").astype(np.int64),
        "duration": cols["duration"].astype(float),
        "num_gpus": cols["num_gpus"].astype(int),
        "gpu_time": cols["gpu_time"].astype(float),
        "cluster": cols["cluster"],
    }


@pytest.fixture(scope="module")
def philly(philly_path: Path) -> Workload:
    return load_philly(philly_path)


# ---------------------------------------------------------------- synthetic


def test_synthetic_matches_philly_statistics(philly_file: dict[str, np.ndarray]) -> None:
    keep = (philly_file["duration"] >= 60) & (philly_file["gpu_time"] < 1000 * 3600)
    d, g = philly_file["duration"][keep], philly_file["num_gpus"][keep]
    w = synthetic_workload(20000, load=0.7, cluster_gpus=256, seed=3)
    assert len(w) == 20000 and w.arrival[0] == 0 and np.all(np.diff(w.arrival) >= 0)
    assert abs(np.median(w.duration) / np.median(d) - 1) < 0.2
    assert abs(np.mean(w.num_gpus == 1) - np.mean(g == 1)) < 0.02
    assert set(np.unique(w.num_gpus)) <= set(np.unique(g))
    realised = np.sum(w.num_gpus * w.duration) / (256 * w.arrival[-1])
    assert realised == pytest.approx(0.7, rel=0.05)


def test_synthetic_load_holds_for_small_workloads() -> None:
    loads = []
    for seed in range(20):
        w = synthetic_workload(300, load=1.2, cluster_gpus=64, seed=seed)
        loads.append(np.sum(w.num_gpus * w.duration) / (64 * w.arrival[-1]))
    assert np.median(loads) == pytest.approx(1.2, rel=0.1)


def test_synthetic_tables_are_what_philly_csv_gives(philly_path: Path) -> None:
    t = derive_philly_tables(philly_path)
    assert t["gpu_counts"] == synthetic.PHILLY_GPU_COUNTS
    assert t["duration_quantiles"] == synthetic.PHILLY_DURATION_QUANTILES
    assert t["gpu_time_quantiles"] == synthetic.PHILLY_GPU_TIME_QUANTILES


def test_synthetic_models_by_default_tell_nothing_of_size() -> None:
    w = synthetic_workload(4000, load=0.8, cluster_gpus=128, seed=7)
    assert w.meta["model_rule"] == "independent"
    gpu_h = w.num_gpus * w.duration / 3600
    names = np.array(MODEL_NAMES)[w.model]
    # every model appears among the short and among the long jobs: its name does not give the size away
    assert set(names[gpu_h < 1]) == set(names[gpu_h >= 10]) and len(set(names)) == 6
    # and the same tenant draws the same mix whatever its jobs' sizes: models follow tenants
    for t in range(4):
        short, long = names[(w.tenant == t) & (gpu_h < 1)], names[(w.tenant == t) & (gpu_h >= 1)]
        top = max(set(short), key=list(short).count)
        assert abs(np.mean(short == top) - np.mean(long == top)) < 0.15
    with pytest.raises(ValueError, match="model_rule='size'"):
        synthetic_workload(10, load=0.5, cluster_gpus=8, seed=1, model_rule="size")


def test_synthetic_determinism_models_batches_tenants() -> None:
    a = synthetic_workload(2000, load=0.8, cluster_gpus=128, seed=7, model_rule="pollux")
    b = synthetic_workload(2000, load=0.8, cluster_gpus=128, seed=7, model_rule="pollux")
    c = synthetic_workload(2000, load=0.8, cluster_gpus=128, seed=8, model_rule="pollux")
    assert same(a, b)
    assert not np.array_equal(a.model, c.model)
    assert a.models == MODEL_NAMES
    gpu_h = a.num_gpus * a.duration / 3600
    names = np.array(MODEL_NAMES)[a.model]
    assert set(names[gpu_h < 1]) == {"resnet18-cifar10", "ncf"}
    assert set(names[(gpu_h >= 1) & (gpu_h < 10)]) == {"deepspeech2", "bert-squad"}
    assert set(names[(gpu_h >= 10) & (gpu_h < 100)]) <= {"yolov3"}
    assert set(names[gpu_h >= 100]) <= {"resnet50-imagenet"}
    default = np.array([ZOO[n].default_batch for n in names])
    assert np.array_equal(a.batch_size, default * a.num_gpus)
    assert set(np.unique(a.tenant)) == {0, 1, 2, 3} and len(a.tenants) == 4


def test_synthetic_fits_cluster_and_model_list() -> None:
    w = synthetic_workload(3000, load=0.5, cluster_gpus=8, seed=1, models=["transformer", "a3c"])
    assert w.num_gpus.max() <= 8
    assert set(np.array(MODEL_NAMES)[w.model]) == {"transformer", "a3c"}
    assert len(synthetic_workload(0, load=0.5, cluster_gpus=8, seed=1)) == 0
    with pytest.raises(ValueError, match="load"):
        synthetic_workload(10, load=0, cluster_gpus=8, seed=1)
    with pytest.raises(KeyError, match="unknown model 'gpt'"):
        synthetic_workload(10, load=0.5, cluster_gpus=8, seed=1, models=["gpt"])


# ---------------------------------------------------------------- philly


def test_philly_loads_every_job_sorted(philly_file: dict[str, np.ndarray], philly: Workload) -> None:
    n = len(philly_file["ts"])
    assert len(philly) == n == 64483
    order = np.argsort(philly_file["ts"], kind="stable")
    assert np.array_equal(philly.arrival, philly_file["ts"][order] - philly_file["ts"].min())
    assert np.array_equal(philly.duration, philly_file["duration"][order])
    assert np.array_equal(philly.num_gpus, philly_file["num_gpus"][order])
    assert philly.tenants == tuple(sorted(set(philly_file["cluster"])))
    assert np.array_equal(np.array(philly.tenants)[philly.tenant], philly_file["cluster"][order])
    vals, counts = np.unique(philly_file["num_gpus"], return_counts=True)
    assert dict(zip(*np.unique(philly.num_gpus, return_counts=True), strict=True)) == dict(
        zip(vals, counts, strict=True)
    )


def test_philly_pollux_model_rule_follows_gpu_time(philly_path: Path) -> None:
    pollux = load_philly(philly_path, seed=0, model_rule="pollux")
    gpu_h = pollux.num_gpus * pollux.duration / 3600
    names = np.array(MODEL_NAMES)[pollux.model]
    assert set(names[gpu_h < 1]) == {"resnet18-cifar10", "ncf"}
    assert set(names[(gpu_h >= 1) & (gpu_h < 10)]) == {"deepspeech2", "bert-squad"}
    assert set(names[(gpu_h >= 10) & (gpu_h < 100)]) == {"yolov3"}
    assert set(names[gpu_h >= 100]) == {"resnet50-imagenet"}


def test_philly_default_models_tell_nothing_of_a_jobs_size(philly: Workload, philly_path: Path) -> None:
    """``model_rule=independent``: models come from the tenant's mix; short and long jobs of a tenant
    share one mix, while tenants differ."""
    from cluster_sim.model_rules import assign_models, make_rng

    assert philly.meta["model_rule"] == "independent"
    tenant = philly.tenant.astype(np.int64)
    gpu_time = philly.num_gpus * philly.duration
    shuffled = np.random.default_rng(1).permutation(gpu_time)
    a = assign_models("independent", tenant, gpu_time, make_rng(0))
    assert np.array_equal(a, assign_models("independent", tenant, shuffled, make_rng(0)))  # sizes never read
    big = int(np.bincount(tenant).argmax())
    mine = tenant == big
    short, long_ = mine & (gpu_time < 3600), mine & (gpu_time >= 36000)
    share = [np.bincount(philly.model[m], minlength=len(MODEL_NAMES)) / m.sum() for m in (short, long_)]
    assert np.abs(share[0] - share[1]).max() < 0.05  # one mix for short and long jobs
    other = tenant == int(np.argsort(np.bincount(tenant))[-2])
    share_other = np.bincount(philly.model[other], minlength=len(MODEL_NAMES)) / other.sum()
    assert np.abs(share[0] - share_other).max() > 0.05  # tenants differ
    with pytest.raises(ValueError, match="model_rule='size'; choose one of independent, pollux"):
        load_philly(philly_path, model_rule="size")


def test_philly_models_are_seeded(philly: Workload, philly_path: Path) -> None:
    again = load_philly(philly_path, seed=0)
    other = load_philly(philly_path, seed=1)
    assert same(philly, again)
    assert not np.array_equal(philly.model, other.model)
    assert np.array_equal(philly.duration, other.duration)


def test_philly_pollux_filter(philly_path: Path, philly_file: dict[str, np.ndarray], philly: Workload) -> None:
    f = load_philly(philly_path, pollux_filter=True)
    keep = (philly_file["duration"] >= 60) & (philly_file["gpu_time"] < 1000 * 3600)
    assert len(f) == keep.sum()
    assert f.duration.min() >= 60 and (f.num_gpus * f.duration).max() < 1000 * 3600
    # The filter removes jobs but does not move the trace start or change surviving jobs' models.
    kept = (philly.duration >= 60) & (philly.num_gpus * philly.duration < 1000 * 3600)
    assert np.array_equal(f.arrival, philly.arrival[kept]) and np.array_equal(f.model, philly.model[kept])


def test_philly_gpu_scale_multiplies_gpus_and_keeps_the_rest(philly_path: Path, philly: Workload) -> None:
    spec = f"philly:{philly_path},gpu_scale=8"
    big = parse_workload_spec(window_spec(spec, 40 * DAY, 47 * DAY), cluster_gpus=8192, seed=0)
    w = parse_workload_spec(window_spec(f"philly:{philly_path}", 40 * DAY, 47 * DAY), cluster_gpus=8192, seed=0)
    assert np.array_equal(big.num_gpus, 8 * w.num_gpus) and np.array_equal(big.batch_size, 8 * w.batch_size)
    assert all(np.array_equal(getattr(big, c), getattr(w, c)) for c in ("arrival", "duration", "model", "tenant"))
    assert np.array_equal(big.meta["history"]["num_gpus"], 8 * w.meta["history"]["num_gpus"])  # same groups
    # at dc-1k, 8x the GPUs of a 7-day window offer its load in a spread of arrivals, not in one burst
    busy = parse_workload_spec(window_spec(spec, 40 * DAY, 47 * DAY, 0.9), cluster_gpus=8192, seed=0)
    assert busy.arrival[-1] > DAY / 4
    with pytest.raises(WorkloadSpecError, match="gpu_scale=0 must be an integer >= 1"):
        parse_workload_spec(spec.replace("=8", "=0"), cluster_gpus=8192, seed=0)


def test_windowing_max_jobs_and_arrival_scale(philly_path: Path, philly: Workload) -> None:
    day = 86400.0
    w = load_philly(philly_path, time_range=(40 * day, 42 * day))
    inside = (philly.arrival >= 40 * day) & (philly.arrival < 42 * day)
    assert len(w) == inside.sum() > 0
    assert w.arrival.min() >= 0 and w.arrival.max() < 2 * day
    assert np.array_equal(w.arrival, philly.arrival[inside] - 40 * day)
    assert np.array_equal(w.model, philly.model[inside])

    m = load_philly(philly_path, time_range=(40 * day, 42 * day), max_jobs=100)
    assert len(m) == 100 and same(m, w.subset(np.arange(100)))

    s = load_philly(philly_path, max_jobs=5000, arrival_scale=0.5)
    full = philly.subset(np.arange(5000))
    assert s.arrival[-1] - s.arrival[0] == 0.5 * (full.arrival[-1] - full.arrival[0])
    assert np.array_equal(np.diff(s.arrival), 0.5 * np.diff(full.arrival))
    assert np.array_equal(s.duration, full.duration)
    with pytest.raises(ValueError, match="arrival_scale"):
        load_philly(philly_path, arrival_scale=0)
    with pytest.raises(ValueError, match="time_range"):
        load_philly(philly_path, time_range=(5.0, 1.0))


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
PHILLY_OK = "2017-10-09 07:01:55,66.0,1,66.0,aa\n"


@pytest.mark.parametrize(
    ("body", "line", "reason"),
    [
        (PHILLY_OK + "2017-10-09 07:02:00,5.0,abc,5.0,bb\n", 3, "num_gpus='abc' is not an integer"),
        (PHILLY_OK * 3 + "2017-10-09 07:02:00,,1,5.0,bb\n", 5, "duration='' is not a number"),
        (PHILLY_OK + "yesterday,5.0,1,5.0,bb\n", 3, "timestamp='yesterday' is not a date-time"),
        (PHILLY_OK + "1714953938,5.0,1,5.0,bb\n", 3, "timestamp='1714953938' is a number, not a date-time"),
        (PHILLY_OK + "2017-10-09 08:00:00+01:00,5.0,1,5.0,bb\n", 3, "carries a time zone; write every row in one zone"),
        (PHILLY_OK + "2017-10-09 07:02:00,5.0,1,5.0\n", 3, "expected 5 comma-separated fields"),
        (PHILLY_OK + "2017-10-09 07:02:00,5.0,0,0.0,bb\n", 3, "num_gpus='0' must be >= 1"),
        (PHILLY_OK + "2017-10-09 07:02:00,0.0,1,0.0,bb\n", 3, "duration='0.0' must be > 0"),
    ],
)
def test_philly_malformed_rows(tmp_path: Path, body: str, line: int, reason: str) -> None:
    p = write(tmp_path, "philly.csv", PHILLY_HEAD + body)
    with pytest.raises(TraceFormatError) as e:
        load_philly(p)
    assert str(p) in str(e.value) and f"line {line}: " in str(e.value) and reason in str(e.value)
    assert e.value.line == line


def test_philly_missing_column_lists_expected(tmp_path: Path) -> None:
    p = write(tmp_path, "philly.csv", "timestamp,duration,gpus,gpu_time,cluster\n" + PHILLY_OK)
    with pytest.raises(TraceFormatError, match=r"line 1: header lacks column\(s\) num_gpus; expected columns: "):
        load_philly(p)
    with pytest.raises(FileNotFoundError, match="philly trace not found"):
        load_philly(tmp_path / "nope.csv")
    # a log that names its tenant column otherwise is told what cluster means
    p = write(tmp_path, "users.csv", "timestamp,duration,num_gpus,gpu_time,user\n" + PHILLY_OK)
    with pytest.raises(TraceFormatError, match=r"line 1: header lacks column\(s\) cluster; .*cluster is each job's "
                                               r"tenant \(user, team or queue"):  # fmt: skip
        load_philly(p)


def test_philly_unsorted_ties_keep_file_order(tmp_path: Path) -> None:
    rows = [
        "2017-10-09 08:00:00,30.0,2,60.0,b\n",
        "2017-10-09 07:00:00,10.0,1,10.0,a\n",
        "2017-10-09 08:00:00,20.0,4,80.0,a\n",
        "\n",
    ]
    w = load_philly(write(tmp_path, "p.csv", PHILLY_HEAD + "".join(rows)))
    assert w.arrival.tolist() == [0.0, 3600.0, 3600.0]
    assert w.duration.tolist() == [10.0, 30.0, 20.0]
    assert w.tenants == ("a", "b") and w.tenant.tolist() == [0, 1, 0]


def test_a_logs_model_column_names_the_jobs_models_and_unread_columns_are_named(tmp_path: Path) -> None:
    """A lab's log that knows its jobs' models: a zoo name or a unique start of one, any case; an empty cell is
    drawn by the model rule as in a file without the column; a name of no zoo model is refused with its line.
    Columns no loader reads are named in a warning, not dropped silently."""
    from cluster_sim.protocol import SimulationWarning

    rows = [("2024-03-01 08:00:00", 1401, 1, "team-c"), ("2024-03-01 09:00:00", 5002, 4, "team-a"),
            ("2024-03-01 10:00:00", 3000, 2, "team-a"), ("2024-03-01 11:00:00", 800, 1, "team-b")]  # fmt: skip
    body = "".join(f"{t},{d},{g},{d * g},{c}\n" for t, d, g, c in rows)
    drawn = load_philly(write(tmp_path, "plain.csv", PHILLY_HEAD + body), seed=4).model
    named = ["resnet50", "", "BERT-squad", "ncf"]
    lines = [
        f"{line.rstrip()},{m},job-{i},done\n" for i, (line, m) in enumerate(zip(body.splitlines(), named, strict=True))
    ]
    path = write(tmp_path, "lab.csv", PHILLY_HEAD.rstrip() + ",model,job_id,state\n" + "".join(lines))
    with pytest.warns(SimulationWarning, match=r"lab\.csv: column\(s\) state not read"):
        w = load_philly(path, seed=4)
    assert [MODEL_NAMES[m] for m in w.model] == ["resnet50-imagenet", MODEL_NAMES[drawn[1]], "bert-squad", "ncf"]
    # the log's ids follow its jobs through a window, and every jobs.csv names them beside the simulator's index
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    window = parse_workload_spec(f"philly:{path},start=2024-03-01T08:30", cluster_gpus=8, seed=0)
    assert window.job_ids.tolist() == ["job-1", "job-2", "job-3"]
    jobs = build_simulator("small", window).run(get_policy("fifo")).job_rows()
    assert jobs[0][:2] == ["id", "job_id"] and [row[:2] for row in jobs[1:]] == [
        [0, "job-1"],
        [1, "job-2"],
        [2, "job-3"],
    ]
    for bad, why in (("vgg16", "names no model"), ("res", "names several")):
        lines[2] = lines[2].replace("BERT-squad", bad)
        path = write(tmp_path, f"{bad}.csv", PHILLY_HEAD.rstrip() + ",model,job_id,state\n" + "".join(lines))
        with (
            pytest.warns(SimulationWarning),
            pytest.raises(TraceFormatError, match=rf"line 4: column model='{bad}' {why}"),
        ):
            load_philly(path)
        lines[2] = lines[2].replace(bad, "BERT-squad")


def test_a_log_measured_on_another_gpu_type_runs_its_own_lengths_there(tmp_path: Path) -> None:
    """``measured_on=A100``: the log's durations are A100 run times, read as the V100 times the simulator keeps
    (each job's scaled by its model's speed there); on a cluster of A100s a single-GPU job that never waits then
    runs exactly its logged length. An unknown type is refused with the known ones."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    rows = "".join(
        f"2024-03-01 0{h}:00:00,{d},1,{d},team,{m}\n" for h, d, m in ((1, 1401, "resnet50"), (3, 900, "bert"))
    )
    path = write(tmp_path, "lab.csv", PHILLY_HEAD.rstrip() + ",model\n" + rows)
    plain = parse_workload_spec(f"philly:{path}", cluster_gpus=8, seed=0)
    on_a100 = parse_workload_spec(f"philly:{path},measured_on=A100", cluster_gpus=8, seed=0)
    assert np.all(on_a100.duration > 2 * plain.duration) and on_a100.meta["measured_on"] == "A100"
    cluster = {"name": "a100s", "pods": 1, "racks_per_pod": 1, "servers_per_rack": 1, "server": "nvswitch-8",
               "gpu_type": "A100"}  # fmt: skip
    result = build_simulator(cluster, f"philly:{path},measured_on=a100").run(get_policy("fifo"))
    assert result.jct.tolist() == pytest.approx([1401.0, 900.0])
    with pytest.raises(WorkloadSpecError, match=r"measured_on=B200: no speed for that GPU type; known: V100, "):
        parse_workload_spec(f"philly:{path},measured_on=B200", cluster_gpus=8, seed=0)


def test_philly_is_parsed_once_per_version_of_the_file(tmp_path: Path) -> None:
    # Env draws reuse the parsed file; a changed file is read again, and what a caller does with its workload
    # never reaches the next one.
    import os

    p = write(tmp_path, "p.csv", PHILLY_HEAD + PHILLY_OK + "2017-10-09 08:00:00,30.0,2,60.0,b\n")
    first = load_philly(p)
    first.duration[:] = 1.0
    assert load_philly(p).duration.tolist() == [66.0, 30.0]
    stat = p.stat()
    p.write_text(PHILLY_HEAD + PHILLY_OK + "2017-10-09 08:00:00,40.0,2,80.0,b\n")  # same size, new contents
    os.utime(p, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert load_philly(p).duration.tolist() == [66.0, 40.0]
    p.write_text(PHILLY_HEAD + PHILLY_OK)
    assert load_philly(p).duration.tolist() == [66.0]


# ---------------------------------------------------------------- gavel


def gavel_dir(traces_dir: Path) -> Path:
    return traces_dir / "gavel" / "traces" / "msr" / "seed=0"


def test_gavel_single_file(traces_dir: Path) -> None:
    path = gavel_dir(traces_dir) / "ee9e8c.trace"
    lines = [ln.split("\t") for ln in path.read_text().splitlines() if ln.strip()]
    w = load_gavel(path)
    assert len(w) == len(lines) and w.tenants == ("ee9e8c",) and np.all(np.diff(w.arrival) >= 0)
    thr = json.loads((traces_dir / "gavel" / "simulation_throughputs.json").read_text())["v100"]
    order = np.argsort([float(r[5]) for r in lines], kind="stable")
    checked = 0
    for i, r in enumerate(lines[j] for j in order):
        job_type, steps, sf = r[0], float(r[4]), int(r[6])
        key = str((job_type, sf))
        if key in thr and thr[key]["null"] > 0:
            assert w.duration[i] == pytest.approx(steps / thr[key]["null"], rel=1e-12)
            checked += 1
        assert w.num_gpus[i] == sf
        assert job_type.startswith(ZOO[MODEL_NAMES[w.model[i]]].gavel_name)
        if "(batch size " in job_type:
            assert w.batch_size[i] == int(job_type.split("(batch size ")[1].rstrip(")")) * sf
    assert checked > len(lines) // 2


def test_gavel_directory(traces_dir: Path) -> None:
    folder = gavel_dir(traces_dir)
    files = sorted(folder.glob("*.trace"))
    n = sum(sum(1 for ln in f.read_text().splitlines() if ln.strip()) for f in files)
    w = load_gavel(folder)
    assert len(w) == n == 15264
    assert w.tenants == tuple(f.stem for f in files) and len(w.tenants) == 15
    assert np.all(np.diff(w.arrival) >= 0) and np.all(w.duration > 0)
    assert w.meta["extrapolated_jobs"] > 0
    single = load_gavel(folder / "6214e9.trace")
    mine = w.subset(np.flatnonzero(w.tenant == w.tenants.index("6214e9")))
    assert np.array_equal(mine.arrival, single.arrival) and np.array_equal(mine.duration, single.duration)


def test_gavel_throughputs_location_and_errors(traces_dir: Path, tmp_path: Path) -> None:
    src = gavel_dir(traces_dir) / "23dbec.trace"
    lines = src.read_text().splitlines()
    copy = write(tmp_path, "x.trace", "\n".join(lines) + "\n")
    with pytest.raises(FileNotFoundError, match="pass throughputs_path="):
        load_gavel(copy)
    tp = traces_dir / "gavel" / "simulation_throughputs.json"
    a, b = load_gavel(copy, throughputs_path=tp), load_gavel(src)
    assert all(np.array_equal(getattr(a, c), getattr(b, c)) for c in COLUMNS) and a.tenants == ("x",)

    bad = list(lines)
    bad[2] = "\t".join(bad[2].split("\t")[:5])
    with pytest.raises(TraceFormatError, match=r"x\.trace: line 3: expected 7 tab-separated fields"):
        load_gavel(write(tmp_path, "x.trace", "\n".join(bad)), throughputs_path=tp)
    bad = list(lines)
    bad[1] = "\t".join([*bad[1].split("\t")[:6], "two"])
    with pytest.raises(TraceFormatError, match="line 2: column scale_factor='two' is not an integer"):
        load_gavel(write(tmp_path, "x.trace", "\n".join(bad)), throughputs_path=tp)
    bad = list(lines)
    bad[3] = "\t".join(["GPT-9 (batch size 8)", *bad[3].split("\t")[1:]])
    with pytest.raises(TraceFormatError, match=r"line 4: job_type 'GPT-9 \(batch size 8\)' matches no model-zoo"):
        load_gavel(write(tmp_path, "x.trace", "\n".join(bad)), throughputs_path=tp)


# ---------------------------------------------------------------- openb


def test_openb_default(traces_dir: Path) -> None:
    path = traces_dir / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv"
    header, rows = read_rows(path)
    c = {h: i for i, h in enumerate(header)}
    expect = [
        r
        for r in rows
        if int(r[c["num_gpu"]]) >= 1
        and r[c["scheduled_time"]] != ""
        and float(r[c["deletion_time"]]) > float(r[c["scheduled_time"]])
    ]
    expect.sort(key=lambda r: float(r[c["creation_time"]]))
    w = load_openb(path)
    assert len(w) == len(expect) > 6000
    assert np.array_equal(w.arrival, [float(r[c["creation_time"]]) for r in expect])
    dur = [float(r[c["deletion_time"]]) - float(r[c["scheduled_time"]]) for r in expect]
    assert np.array_equal(w.duration, dur)
    assert np.array_equal(w.num_gpus, [int(r[c["num_gpu"]]) for r in expect])
    assert np.array_equal(np.array(w.tenants)[w.tenant], [r[c["qos"]] for r in expect])
    pending = sum(1 for r in rows if int(r[c["num_gpu"]]) >= 1 and r[c["scheduled_time"]] == "")
    assert w.meta["pending_skipped"] == pending > 0
    assert len(load_openb(path, include_pending=True)) > len(w)


def test_openb_errors(traces_dir: Path, tmp_path: Path) -> None:
    variant = traces_dir / "alibaba-gpu-v2023-openb" / "variants" / "openb_pod_list_multigpu20.csv"
    with pytest.raises(TraceFormatError, match="no time columns"):
        load_openb(variant)
    head = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time\n"
    )
    ok = "p0,1000,1024,1,1000,,LS,Running,0,100,0\n"
    p = write(tmp_path, "pods.csv", head + ok + ok + "p2,1000,1024,x,1000,,LS,Running,5,100,5\n")
    with pytest.raises(TraceFormatError, match=r"pods\.csv: line 4: column num_gpu='x' is not an integer"):
        load_openb(p)
    p = write(tmp_path, "pods.csv", head + ok + "p1,1000,1024,1,1000,,LS,Running,soon,100,5\n")
    with pytest.raises(TraceFormatError, match="line 3: column creation_time='soon' is not a number"):
        load_openb(p)


# ---------------------------------------------------------------- pollux


def test_pollux_workload(traces_dir: Path) -> None:
    path = traces_dir / "pollux-osdi21" / "workloads" / "workload-1.csv"
    _, rows = read_rows(path)
    w = load_pollux(path, seed=0)
    assert len(w) == len(rows) == 160 and np.all(np.diff(w.arrival) >= 0)
    rows.sort(key=lambda r: float(r[1]))
    app_model = {"cifar10": "resnet18-cifar10", "imagenet": "resnet50-imagenet", "bert": "bert-squad"}
    assert [MODEL_NAMES[m] for m in w.model] == [app_model.get(r[2], r[2]) for r in rows]
    assert w.num_gpus.tolist() == [int(r[3]) for r in rows]
    assert w.batch_size.tolist() == [int(r[4]) for r in rows]
    # durations follow from the application's measurements, batch size and replicas: no seed involved
    app = load_application(path.parent.parent / "traces", rows[0][2])
    assert w.duration[0] == pytest.approx(app.ideal_duration(int(rows[0][4]), int(rows[0][3])))
    assert same(w, load_pollux(path, seed=0)) and same(w, load_pollux(path, seed=7))


def test_pollux_workload_needs_the_measurements(tmp_path: Path) -> None:
    head = "name,time,application,num_replicas,batch_size\n"
    p = write(tmp_path, "w.csv", head + "a,1,cifar10,1,128\n")
    with pytest.raises(FileNotFoundError, match=r"w\.csv: the applications' measurements were not found.*profiles=DIR"):
        load_pollux(p)
    # the option the message names is accepted and read; a folder lacking an application is refused by name
    (tmp_path / "profiles").mkdir()
    with pytest.raises(ValueError, match=r"application 'cifar10' has no measurements folder"):
        parse_workload_spec(f"pollux:{p},profiles={tmp_path / 'profiles'}", cluster_gpus=64, seed=0)


def test_sia_workload_with_per_type_profiles(traces_dir: Path) -> None:
    """Sia's Philly workloads with ``profiles=`` its per-GPU-type folder: a job's step times on each type
    are that type's measured rows, its per-GPU batch held to that type's memory (deepspeech2: 57 on an
    RTX 2080 Ti); an optional ``category`` column marks rigid jobs."""
    sia = traces_dir / "sia-sosp23"
    w = parse_workload_spec(
        f"pollux:{sia}/workloads/philly/workload-1.csv,profiles={sia}/traces", cluster_gpus=64, seed=0
    )
    assert len(w) == 160 and w.rigid is None
    ds2 = load_application(sia / "traces", "deepspeech2")
    assert ds2.per_type and set(ds2.steps_by_type) >= {"T4", "RTX2080Ti", "A100"}
    assert ds2.on("RTX2080Ti").max_local_bsz == 57
    rtx = ds2.on("RTX2080Ti")
    rows = [r for r in csv.DictReader((sia / "traces/deepspeech2/placements-rtx.csv").open()) if r["placement"] == "2"]
    r = rows[0]
    assert rtx.step_time((2,), float(r["local_bsz"])) == pytest.approx((float(r["step_time"]), float(r["sync_time"])))
    assert ds2.on("T4").step_time((2,), float(r["local_bsz"])) != rtx.step_time((2,), float(r["local_bsz"]))


def test_pollux_category_column_marks_rigid_jobs(tmp_path: Path, pollux_dir: Path) -> None:
    head = "name,time,application,num_replicas,batch_size,category\n"
    p = write(tmp_path, "w.csv", head + "a,1,cifar10,2,128,rigid\nb,2,cifar10,1,128,adaptive\n")
    w = load_pollux(p, traces=pollux_dir / "traces")
    assert w.rigid.tolist() == [True, False]


def test_pollux_errors(tmp_path: Path) -> None:
    head = "name,time,application,num_replicas,batch_size\n"
    p = write(tmp_path, "w.csv", head + "a,1,cifar10,1,128\nb,2,gpt,1,8\n")
    with pytest.raises(TraceFormatError, match=r"w\.csv: line 3: column application='gpt' is not a Pollux application"):
        load_pollux(p)
    p = write(tmp_path, "w.csv", "name,time,application,batch_size\na,1,cifar10,128\n")
    with pytest.raises(TraceFormatError, match="expected columns: name,time,application,num_replicas,batch_size"):
        load_pollux(p)
    p = write(tmp_path, "w.csv", head + "a,1,cifar10,1.5,128\n")
    with pytest.raises(TraceFormatError, match=r"line 2: column num_replicas='1\.5' is not an integer"):
        load_pollux(p)


# ---------------------------------------------------------------- spec strings


def test_spec_strings(philly_path: Path, traces_dir: Path) -> None:
    w = parse_workload_spec("synthetic:500", cluster_gpus=64, seed=2)
    assert len(w) == 500 and w.meta["load"] == 0.8
    assert same(w, synthetic_workload(500, load=0.8, cluster_gpus=64, seed=2))
    w = parse_workload_spec("synthetic:500,load=0.5,max_jobs=100", cluster_gpus=64, seed=2)
    assert len(w) == 100 and w.meta["load"] == 0.5
    w = parse_workload_spec(f"philly:{philly_path},max_jobs=5000,arrival_scale=0.5", cluster_gpus=64, seed=4)
    assert same(w, load_philly(philly_path, max_jobs=5000, arrival_scale=0.5, seed=4))
    w = parse_workload_spec(f"philly:{philly_path},start=2592000,end=2678400", cluster_gpus=64, seed=4)
    assert len(w) > 0 and same(w, load_philly(philly_path, time_range=(2592000, 2678400), seed=4))
    gavel = gavel_dir(traces_dir) / "23dbec.trace"
    assert len(parse_workload_spec(f"gavel:{gavel}", cluster_gpus=64, seed=0)) == len(load_gavel(gavel))
    pollux = traces_dir / "pollux-osdi21" / "workloads" / "workload-2.csv"
    assert same(parse_workload_spec(f"pollux:{pollux}", cluster_gpus=64, seed=1), load_pollux(pollux, seed=1))

    openb = traces_dir / "alibaba-gpu-v2023-openb" / "openb_pod_list_default.csv"
    assert len(parse_workload_spec(f"openb:{openb},max_jobs=10", cluster_gpus=64, seed=0)) == 10


def test_max_gpus_drops_the_larger_jobs_before_the_window(philly_path: Path) -> None:
    spec = f"philly:{philly_path},start=2592000,end=2764800"
    full = parse_workload_spec(spec, cluster_gpus=64, seed=4)
    capped = parse_workload_spec(spec + ",max_gpus=8,load=0.9", cluster_gpus=64, seed=4)
    assert full.num_gpus.max() > 8 and capped.num_gpus.max() <= 8
    assert len(capped) == int((full.num_gpus <= 8).sum())
    with pytest.raises(WorkloadSpecError, match="max_gpus=0 must be an integer >= 1"):
        parse_workload_spec(spec + ",max_gpus=0", cluster_gpus=64, seed=4)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("helios:x.csv", "unknown kind 'helios'; use one of: synthetic:N_JOBS"),
        ("synthetic", "unknown kind 'synthetic'"),
        ("slurm:x.csv", "a kind of a plugin's is known once it is imported: marlsched --plugin FILE, or a run config"),
        ("traces/philly.csv,load=0.9", "a file needs its kind in front, KIND:PATH (e.g. philly:traces/philly.csv for"),
        ("synthetic:100,speed=2", "unknown option 'speed=2' for synthetic; allowed: max_jobs=..., start=..."),
        (
            "philly:x.csv,tenants=3",
            "allowed: max_jobs=..., start=..., end=..., arrival_scale=..., load=..., apps=..., max_gpus=..., pollux",
        ),
        ("synthetic:many", "option N_JOBS='many' is not an integer"),
        ("synthetic:10,load=high", "option load='high' is not a number"),
        ("synthetic:10,max_jobs=2,max_jobs=3", "option max_jobs given twice"),
        ("synthetic:10,arrival_scale=-1", "arrival_scale=-1.0 must be a positive number"),
        ("pollux:", "missing argument; expected pollux:PATH"),
    ],
)
def test_spec_errors(spec: str, message: str) -> None:
    with pytest.raises(WorkloadSpecError) as e:
        parse_workload_spec(spec, cluster_gpus=64, seed=0)
    assert message in str(e.value)


def test_spec_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        parse_workload_spec(f"philly:{tmp_path / 'nope.csv'}", cluster_gpus=8, seed=0)


def test_load_option_rescales_a_trace_window_to_offer_that_load(traces_dir: Path) -> None:
    """``load=F``: the GPU-time the window's jobs can run inside the (rescaled) window equals F x the
    cluster's GPUs over it."""
    philly = traces_dir / "pollux-osdi21" / "traces" / "philly.csv"
    start, end = HELD_OUT_START, REPORT_END  # 2017-11-01 .. 2017-11-15
    base = parse_workload_spec(f"philly:{philly},start={start},end={end}", cluster_gpus=256, seed=0)
    for load in (0.7, 0.9, 1.1):
        w = parse_workload_spec(f"philly:{philly},start={start},end={end},load={load}", cluster_gpus=256, seed=0)
        scale = w.meta["window"]["arrival_scale"]
        length = (end - start) * scale
        inside = np.minimum(w.duration, length - w.arrival)  # run time that fits before the window ends
        assert float(np.dot(w.num_gpus, inside)) / (length * 256) == pytest.approx(load, rel=1e-6)
        np.testing.assert_allclose(w.arrival, base.arrival * scale)  # the same jobs, gaps scaled alike
        np.testing.assert_array_equal(w.duration, base.duration)
    with pytest.raises(WorkloadSpecError, match=r"offer at most .* choose a lower load"):
        parse_workload_spec(f"philly:{philly},start={start},end={start + 3600},load=0.9", cluster_gpus=8192, seed=0)
    with pytest.raises(WorkloadSpecError, match="not both"):
        parse_workload_spec(f"philly:{philly},end={end},load=0.9,arrival_scale=2", cluster_gpus=256, seed=0)
    # a generator that sets its own load keeps its meaning of the option
    own = synthetic_workload(50, load=0.5, cluster_gpus=64, seed=0)
    spec = parse_workload_spec("synthetic:50,load=0.5", cluster_gpus=64, seed=0)
    np.testing.assert_array_equal(spec.arrival, own.arrival)


def test_a_window_is_labelled_by_its_dates() -> None:
    from cluster_sim.traces.periods import HELD_OUT_START, window_label, window_spec

    spec = window_spec("philly:x.csv,model_rule=gavel", HELD_OUT_START, HELD_OUT_START + 2 * 86_400, 0.9)
    assert window_label(spec) == "2017-11-01..2017-11-03,model_rule=gavel,load=0.9"
    assert window_label("synthetic:30,load=0.9") == "load=0.9"


def test_windows_given_as_dates_are_the_windows_in_seconds(philly_path: Path) -> None:
    """``start=2017-11-01``: the same jobs as the seconds from the trace's first arrival; the periods are
    consecutive, in order, and their windows lie inside them."""
    by_date = parse_workload_spec(
        f"philly:{philly_path},start=2017-11-01,end=2017-11-03,load=0.9", cluster_gpus=256, seed=0
    )
    by_seconds = parse_workload_spec(
        window_spec(f"philly:{philly_path}", HELD_OUT_START, HELD_OUT_START + 2 * DAY, 0.9), cluster_gpus=256, seed=0
    )
    assert len(by_date) > 100 and same(by_date, by_seconds)
    assert philly_seconds("2017-11-01") == HELD_OUT_START == 4_973_359.0  # the offset the shipped policies recorded
    origin = np.datetime64(load_philly(philly_path).meta["trace_start"])
    assert origin == PHILLY_START  # the periods count from the first arrival the loader measures from
    assert philly_seconds("2017-11-01T12:00") == HELD_OUT_START + DAY / 2
    train, select, report = (PERIODS[n] for n in ("train", "select", "report"))
    assert train.start_s == 0.0 and train.end_s == select.start_s < select.end_s == report.start_s == HELD_OUT_START
    for spec in select.windows(f"philly:{philly_path}", days=2, stride=1, load=0.9):
        opts = dict(item.split("=") for item in spec.split(",")[1:])
        assert select.start_s <= float(opts["start"]) < float(opts["end"]) <= select.end_s
    with pytest.raises(ValueError, match="holds no 30-day window"):
        report.windows("philly:x", days=30, stride=1, load=None)
    with pytest.raises(ValueError, match="periods are train, select, report"):
        period("test")
    with pytest.raises(WorkloadSpecError, match=r"start='Nov 1'.* or a date \(YYYY-MM-DD"):
        parse_workload_spec(f"philly:{philly_path},start=Nov 1", cluster_gpus=256, seed=0)
    with pytest.raises(WorkloadSpecError, match="records no start time"):
        parse_workload_spec("synthetic:20,start=2017-11-01", cluster_gpus=64, seed=0)


def test_synthetic_gpu_scale_and_window_load_reach_a_queue_at_scale() -> None:
    """``gpu_scale=K``: the same jobs and durations on K x the GPUs (capped at the cluster);
    ``window_load=F``: arrivals rescaled so the jobs offer F x the cluster while they arrive."""
    base = synthetic_workload(4000, load=0.8, cluster_gpus=8192, seed=3)
    big = synthetic_workload(4000, load=0.8, cluster_gpus=8192, seed=3, gpu_scale=8)
    np.testing.assert_array_equal(big.num_gpus, base.num_gpus * 8)
    np.testing.assert_array_equal(big.duration, base.duration)
    capped = synthetic_workload(4000, load=0.8, cluster_gpus=64, seed=3, gpu_scale=8)
    assert capped.num_gpus.max() == 64 and capped.num_gpus.min() == 8
    with pytest.raises(WorkloadSpecError, match="gpu_scale=0 must be an integer >= 1"):
        parse_workload_spec("synthetic:10,gpu_scale=0", cluster_gpus=64, seed=0)
    w = parse_workload_spec("synthetic:4000,window_load=0.9,gpu_scale=8", cluster_gpus=8192, seed=3)
    length = w.arrival[-1]
    inside = np.minimum(w.duration, length - w.arrival)
    assert float(np.dot(w.num_gpus, inside)) / (length * 8192) == pytest.approx(0.9, rel=1e-6)
    # the mean-GPU-time load of the same jobs offers far less while they arrive: the tail runs past them
    length = big.arrival[-1]
    assert float(np.dot(big.num_gpus, np.minimum(big.duration, length - big.arrival))) / (length * 8192) < 0.5
    with pytest.raises(WorkloadSpecError, match="not both"):
        parse_workload_spec("synthetic:100,load=1,window_load=1", cluster_gpus=64, seed=0)
    with pytest.raises(WorkloadSpecError, match="more jobs or a larger gpu_scale"):
        parse_workload_spec("synthetic:100,window_load=5", cluster_gpus=8192, seed=0)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("synthetic:0", "no jobs (a job count must be >= 1"),
        ("synthetic:20,max_jobs=0", "max_jobs=0 must be an integer >= 1"),
        (
            "PHILLY,start=999999999",
            "no jobs in the window start=999999999.0 (seconds from the trace's start; the "
            "trace's jobs arrive from 2017-09-04T10:30:41 to 2017-11-14T23:56:00)",
        ),
        ("PHILLY,start=2017-11-20,load=0.9", "at least two jobs (the trace's jobs arrive from 2017-09-04T10:30:41 to"),
        ("PHILLY,start=41779759,end=41952559,load=0.9", "(the window 2019-01-01..2019-01-03): load=F needs a window"),
        ("HEADER_ONLY", "no jobs"),
    ],
)
def test_a_spec_that_yields_no_jobs_is_refused(spec: str, fragment: str, traces_dir: Path, tmp_path: Path) -> None:
    """An empty workload would simulate to NaN rows: it is refused, saying why."""
    philly = traces_dir / "pollux-osdi21" / "traces" / "philly.csv"
    if "PHILLY" in spec and not philly.is_file():
        pytest.skip("Philly trace not present")
    head = tmp_path / "w.csv"
    head.write_text("name,time,application,num_replicas,batch_size\n")
    spec = spec.replace("PHILLY", f"philly:{philly}").replace(
        "HEADER_ONLY", f"pollux:{head},profiles={traces_dir / 'pollux-osdi21' / 'traces'}"
    )
    with pytest.raises(WorkloadSpecError, match=re.escape(fragment)):
        parse_workload_spec(spec, cluster_gpus=64, seed=0)


def test_a_load_that_squeezes_a_window_into_one_burst_is_named(philly_path: Path, capsys) -> None:
    """Two weeks of Philly at load 0.9 of 8,192 GPUs arrive within a minute: the run is a burst and its drain,
    which ``simulate`` says; the same weeks on 256 GPUs are a load kept over time and pass unremarked."""
    from cluster_sim.traces.window import burst_warning

    spec = f"philly:{philly_path},start=2017-11-01,end=2017-11-15,load=0.9"
    big = parse_workload_spec(spec, cluster_gpus=8192, seed=0)
    msg = burst_warning(big)
    assert msg is not None and "load=0.9" in msg and "14.0 days" in msg and "gpu_scale=K" in msg, msg
    assert float(big.arrival.max()) < 120  # the burst the warning names
    assert burst_warning(parse_workload_spec(spec, cluster_gpus=256, seed=0)) is None
    at_its_rate = parse_workload_spec(spec.removesuffix(",load=0.9"), cluster_gpus=8192, seed=0)
    assert burst_warning(at_its_rate) is None
    from experiments.cli import main  # simulate says so before its table

    day = f"philly:{philly_path},start=2017-11-01,end=2017-11-02,load=0.04"
    assert main(["simulate", "--cluster", "dc-1k", "--workload", day, "--policy", "fifo", "--quiet"]) == 0
    assert "marlsched simulate: warning: load=0.04 squeezes this window's 24.0 h" in capsys.readouterr().err


def test_a_gpu_time_that_is_not_duration_times_gpus_is_named_with_its_line(tmp_path: Path) -> None:
    """``gpu_time`` decides Pollux's filter and ``model_rule=pollux``: a log that writes it in GPU-hours is named
    (the first line and how many rows), a rounded one is not."""
    import warnings

    from cluster_sim.traces.philly import GpuTimeWarning

    rows = [("2024-03-01 08:00:00", 7200, 2, 14400.4), ("2024-03-01 09:00:00", 3600, 4, 4.0)]
    body = "".join(f"{t},{d},{g},{gt},team\n" for t, d, g, gt in rows)
    with pytest.warns(GpuTimeWarning, match=r"hours\.csv, line 3: gpu_time=4 but duration x num_gpus = 14400 \(1 of 2"):
        load_philly(write(tmp_path, "hours.csv", PHILLY_HEAD + body))
    with warnings.catch_warnings():
        warnings.simplefilter("error", GpuTimeWarning)
        load_philly(write(tmp_path, "rounded.csv", PHILLY_HEAD + body.replace(",4.0,", ",14399.8,")))


def test_a_log_whose_median_job_runs_under_a_minute_is_said_to_be_in_another_unit(tmp_path: Path) -> None:
    """Durations in hours (with gpu_time in GPU-hours, so the two agree) would run silently as seconds: every
    figure 3600 times too small; the median job's length names it. A log in seconds is not warned about."""
    import warnings

    from cluster_sim.traces.philly import DurationUnitWarning

    rows = [("2024-03-01 08:00:00", 2.0, 2), ("2024-03-01 09:00:00", 0.5, 4), ("2024-03-01 10:00:00", 12.0, 1)]
    body = "".join(f"{t},{d},{g},{d * g},team\n" for t, d, g in rows)
    with pytest.warns(DurationUnitWarning, match=r"hours\.csv: the median job runs 2 s; duration is read as seconds "
                                                 r"\(a log in hours: multiply by 3600"):  # fmt: skip
        load_philly(write(tmp_path, "hours.csv", PHILLY_HEAD + body))
    seconds = "".join(f"{t},{d * 3600},{g},{d * g * 3600},team\n" for t, d, g in rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DurationUnitWarning)
        load_philly(write(tmp_path, "seconds.csv", PHILLY_HEAD + seconds))


def test_a_table_of_jobs_in_python_runs_as_the_same_jobs_in_a_csv_file(tmp_path: Path) -> None:
    """``workload_from_frame``: a pandas DataFrame of jobs (a gap in its GPU column made it float, as pandas does)
    gives the workload, and so the run, that the same jobs give from a ``philly:`` file: the same models drawn, the
    same batch sizes; ``arrival`` seconds stand for date-times; a value it cannot read is named with its row."""
    import pandas as pd

    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from cluster_sim.traces import FrameError, workload_from_frame

    rng = np.random.default_rng(1)
    n = 200
    stamps = np.datetime64("2024-03-01T08:00:00") + rng.integers(0, 3 * 86400, n).astype("timedelta64[s]")
    frame = pd.DataFrame({
        "timestamp": stamps, "duration": rng.integers(60, 20000, n), "num_gpus": rng.choice([1, 2, 4, 8], n),
        "cluster": rng.choice(["vision", "nlp"], n), "model": rng.choice(["", "resnet50", "bert-squad"], n),
        "job_id": [f"j{i}" for i in range(n)],
    })  # fmt: skip
    frame["num_gpus"] = frame["num_gpus"].astype(float)  # whole numbers, as a float column
    body = "".join(
        f"{pd.Timestamp(t):%Y-%m-%d %H:%M:%S},{d},{int(g)},{d * int(g)},{c},{m},{j}\n"
        for t, d, g, c, m, j in frame.itertuples(index=False)
    )
    csv_file = write(tmp_path, "jobs.csv", PHILLY_HEAD.rstrip() + ",model,job_id\n" + body)
    mine, filed = workload_from_frame(frame, seed=3), load_philly(csv_file, seed=3)
    for column in ("arrival", "num_gpus", "duration", "model", "batch_size", "tenant", "job_ids"):
        assert np.array_equal(getattr(mine, column), getattr(filed, column)), column
    assert mine.tenants == filed.tenants == ("nlp", "vision") and len(set(mine.batch_size.tolist())) > 3
    runs = [build_simulator("small", w, seed=0).run(get_policy("tiresias")) for w in (mine, filed)]
    assert runs[0].job_rows() == runs[1].job_rows()
    # seconds from an origin of one's own stand for the dates (no date to count windows from)
    seconds = frame.drop(columns="timestamp").assign(arrival=(stamps - stamps.min()).astype(float) + 50.0)
    by_seconds = workload_from_frame(seconds, seed=3)
    assert np.array_equal(by_seconds.arrival, mine.arrival) and "trace_start" not in by_seconds.meta
    # what it cannot read, named with the column, the row and its index label
    gap = frame.set_index("job_id").copy()
    gap.iloc[5, gap.columns.get_loc("num_gpus")] = np.nan
    with pytest.raises(FrameError, match=r"column 'num_gpus', row 5 \(index 'j5'\): nan; give a whole number"):
        workload_from_frame(gap)
    with pytest.raises(FrameError, match=r"row 7: column model='res' names several model"):
        workload_from_frame(frame.assign(model=["res" if i == 7 else "" for i in range(n)]))
    with pytest.raises(FrameError, match=r"no column timestamp \(date-times\) or arrival \(seconds\)"):
        workload_from_frame(frame.drop(columns="timestamp"))
    small = workload_from_frame({"arrival": [0, 10], "duration": [60, 60], "num_gpus": [1, 2]})  # a mapping of lists
    assert small.num_gpus.tolist() == [1, 2] and small.tenants == ("default",)


def test_a_workload_built_by_hand_converts_columns_that_hold_the_same_numbers_and_names_the_others() -> None:
    """Lists and float columns of whole numbers become the documented arrays; 2.5 GPUs, a missing value or a
    model index past the models tuple are named with the job's row before any simulation starts."""
    base = dict(arrival=[0.0, 5.0], num_gpus=[1.0, 2.0], duration=[60, 90], model=[0, 1], batch_size=[32, 64],
                tenant=[0, 0], models=MODEL_NAMES)  # fmt: skip
    w = Workload(**base)
    assert w.num_gpus.dtype == np.int32 and w.duration.dtype == np.float64 and w.model.tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"column 'num_gpus', job 1: 2.5 is not a whole number"):
        Workload(**{**base, "num_gpus": [1.0, 2.5]})
    with pytest.raises(ValueError, match=r"column 'duration', job 0: nan is not a finite number"):
        Workload(**{**base, "duration": [float("nan"), 1.0]})
    with pytest.raises(ValueError, match=r"column 'model', job 1: 2 is no index into models \(0..1\)"):
        Workload(**{**base, "models": MODEL_NAMES[:2], "model": [0, 2]})
