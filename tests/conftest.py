"""Shared test fixtures."""

import os
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Tests run in parallel workers (``-n``), one per core: a worker's BLAS, OpenMP and torch threads would
    # compete for the other workers' cores (several times slower), so each worker computes on one thread.
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")


@pytest.fixture(scope="session")
def traces_dir() -> Path:
    """The public traces in ``../shared/traces`` next to the repository; skips when they are absent."""
    path = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    if not path.is_dir():
        pytest.skip(f"public traces not found at {path}")
    return path


@pytest.fixture(scope="session")
def small_predictor(traces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A learned interference predictor fitted briefly on Gavel's pairs (2 members, 100 steps, no calibration)."""
    from interference.cli import main as interference_cli

    model = tmp_path_factory.mktemp("predictor") / "model.json"
    data = f"gavel:{traces_dir}/gavel/simulation_throughputs.json"
    rc = interference_cli(["interference", "train", "--data", data, "--members", "2", "--seed", "3",
                           "--steps", "100", "--no-calibrate", "--out", str(model)])  # fmt: skip
    assert rc == 0
    return model


def _artifact(traces_dir: Path, name: str, probe: str) -> Path:
    """``traces_dir / name``; the test skips when its file ``probe`` is absent."""
    d = traces_dir / name
    if not (d / probe).is_file():
        pytest.skip(f"{d / probe} not present")
    return d


@pytest.fixture(scope="session")
def pollux_dir(traces_dir: Path) -> Path:
    """Pollux's measurements and workloads (``pollux-osdi21``)."""
    return _artifact(traces_dir, "pollux-osdi21", "traces/cifar10/placements.csv")


@pytest.fixture(scope="session")
def sia_dir(traces_dir: Path) -> Path:
    """Sia's artifact (``sia-sosp23``: per-type profiles and its Philly workloads)."""
    return _artifact(traces_dir, "sia-sosp23", "traces/bert/placements-dgx-ext.csv")


@pytest.fixture(scope="session")
def sia_40(sia_dir: Path):
    """Sia's run of the first 40 jobs of its first Philly workload on its cluster (``sia_sim(sia_dir, 40)``): the
    reference several tests hold other policies to, run once per worker (tests only read it)."""
    from cluster_sim.policies.sia import Sia
    from tests.test_heterogeneous import sia_sim

    return sia_sim(sia_dir, 40).run(Sia())


@pytest.fixture
def refilled_by_export_program(tmp_path: Path):
    """``refill(folder)``: a copy of a policy folder as written before programs (no ``policy.pt2``, no
    ``program_max_abs_diff``), given its program by ``marlsched export-program`` and then stripped of its
    TorchScript, so that only the new program can be read from it."""
    import json
    import shutil

    from marl.cli import main

    def refill(folder: Path) -> Path:
        older = tmp_path / f"older-{folder.name}"
        shutil.copytree(folder, older)
        (older / "policy.pt2").unlink()
        meta = json.loads((older / "metadata.json").read_text())
        meta.pop("program_max_abs_diff")
        (older / "metadata.json").write_text(json.dumps(meta))
        assert main(["export-program", str(older)]) == 0
        assert json.loads((older / "metadata.json").read_text())["program_max_abs_diff"] < 1e-5
        (older / "policy.pt").unlink()
        return older

    return refill


@pytest.fixture(scope="session")
def _ray_session():
    """Stops the in-process Ray of :func:`ray_local` when the session ends."""
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _in_process_ray():
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        from marl.deploy.local_ray import start_local_ray

        start_local_ray(2, 100 * 1024**2)  # as the commands start it: seeded training repeats
    return ray


@pytest.fixture
def ray_local(_ray_session):
    """In-process Ray, 2 CPUs and a small object store as on a 2-core laptop, started as the commands start
    it and shared by every test that asks (a start costs seconds; tests leave no actors behind). The tests of
    one module that use it run on one worker."""
    return _in_process_ray()


@pytest.fixture
def ray_shared(_ray_session):
    """The same in-process Ray, for tests that would otherwise start and stop their own (an in-process
    ``marlsched run`` connects to it as to any running Ray): a start costs about 4 s of CPU and each new
    worker its imports. These tests are not grouped: each worker's one Ray serves them."""
    return _in_process_ray()


def _hypothesis_profiles() -> None:
    """``ci`` (default): a fixed, derandomised set of examples, so the test command gives the same verdict
    on every run. ``deep``: many more random examples, on demand: ``pytest --hypothesis-profile=deep``."""
    from hypothesis import settings

    settings.register_profile("ci", max_examples=60, derandomize=True, print_blob=True)
    settings.register_profile("deep", max_examples=2000, derandomize=False, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()


# Module fixtures that cost seconds (a training run, a local cluster): their tests share one worker.
BUILT_ONCE = frozenset({"trained", "tiny_policy", "rows", "two_node_cluster"})


def _xdist_group(item: pytest.Item, config: pytest.Config, name: str) -> None:
    """Put ``item`` in xdist's group ``name``: its ``xdist_group`` mark and, on a ``--dist loadgroup`` worker under a
    pytest with structured node ids (9.2), the ``@name`` suffix of its node id by which xdist's scheduler groups.
    xdist writes that suffix into the older ``_nodeid`` field, which such a pytest no longer reads, so the group
    would be silently ignored (pytest-xdist issue 1386)."""
    item.add_marker(pytest.mark.xdist_group(name))
    if getattr(config.option, "loadgroup", False) and not hasattr(item, "_nodeid"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(f"{item.nodeid}@{name}")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order and group the tests for parallel workers (``-n``, ``--dist loadgroup``).

    - The tests of one module on the in-process Ray (the ``ray_local`` fixture) run on one worker, so that its
      Ray starts once for them; the modules' groups spread over the workers, each worker with its own
      Ray (one group for all of them left a worker running Ray's tests alone for most of the run). Commands
      that start their own Ray in a subprocess run wherever a worker is free.
    - The tests that share a module fixture of :data:`BUILT_ONCE` run on one worker, so that it is built once.
    - The long end-to-end tests (``slow``) start first, so that no worker is left with one at the end.
    """
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        names = getattr(item, "fixturenames", ())
        if "ray_local" in names:
            _xdist_group(item, config, f"ray-{module}")
        elif once := sorted(BUILT_ONCE.intersection(names)):
            _xdist_group(item, config, f"{once[0]}-{module}")
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def train_command():
    """``train_command(config, out, *flags)``: ``marlsched train --config`` on ``config`` (a mapping, written as
    YAML beside ``out``), the trained folder's metadata. Tests train one of their two same-seed runs through it,
    so the one command is held to the trainer's own result, bit for bit. The config the folder records is itself
    a training config of the same agent, algorithm and settings (it rebuilds the folder as it stands)."""
    import dataclasses
    import json

    import yaml

    from experiments.cli import main
    from marl.training.recipes import load_recipe_config

    def run(config: dict, out: Path, *flags: str) -> dict:
        path = out.with_suffix(".yaml")
        path.write_text(yaml.safe_dump(config))
        assert main(["train", "--config", str(path), "--out", str(out), "--quiet", *flags]) == 0
        meta = json.loads((out / "policy" / "metadata.json").read_text())
        recorded = out.with_name(f"{out.name}-recorded.yaml")
        recorded.write_text(yaml.safe_dump(meta["provenance"]["config"]))
        (spec, algo, settings), (spec_again, algo_again, again) = load_recipe_config(path), load_recipe_config(recorded)
        if hasattr(settings, "source"):  # the file it was read from
            again = dataclasses.replace(again, source=settings.source)
        assert meta["agent"] == spec.name and (spec_again, algo_again) == (spec, algo) and again == settings
        return meta

    return run
