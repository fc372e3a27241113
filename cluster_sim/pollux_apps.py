"""Pollux's six training applications from their measurements: how long a job trains, and how fast.

Pollux (Qiao et al., OSDI'21) measured each application (``pollux-osdi21/traces/<app>/``) on its testbed
of 16 nodes x 4 T4 GPUs:

- ``placements.csv``: step and gradient-sync time per placement (GPUs per node, e.g. ``22`` = two nodes
  with two GPUs each) and per-GPU batch size;
- ``scalability.csv``: the same for larger placements, keyed by node and replica counts;
- ``validation-<B>.csv``: for a run at global batch size ``B``, per epoch, the statistical progress
  reached (in steps of the smallest measured batch size), the iterations run, and the gradient's squared
  norm and variance.

A job trains its application for a fixed number of epochs (bert 2, cifar10 100, deepspeech2 80, imagenet 90,
ncf 10, yolov3 50, as Pollux's simulator does). At batch size ``B`` its statistical efficiency in epoch
``e`` is ``gain = (var + sqr) / (var / (B / B0) + sqr)`` (gradient statistics interpolated linearly in
``B`` between measured batch sizes), so the epoch takes ``Δprogress / gain`` iterations, and each
iteration takes the measured step time of its placement and per-GPU batch (plus the compute part again
for each gradient-accumulation step). Step times are interpolated in the per-GPU batch for a measured
placement and, for an unmeasured one, linearly over (nodes, replicas, per-GPU batch) across all
measurements. With a fixed batch size the iteration count does not depend on the placement, so a job's
work is its iteration count and a placement's speed is the inverse of its iteration time: exactly the
simulator's duration and speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import numpy as np

from cluster_sim.gpu_profiles import MAX_LOCAL_BSZ as TYPE_MAX_LOCAL_BSZ
from cluster_sim.gpu_profiles import PROFILE_SUFFIX, profile_files
from cluster_sim.perf_fit import Measurements, load_pollux_app

# Epochs each application trains for, and per-GPU batch limits that differ from the measured range.
EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}
GPUS_PER_NODE = 4  # the testbed's nodes
MAX_NODES = 16


def _read_validation(path: Path) -> dict[str, np.ndarray]:
    """Columns of one ``validation-<B>.csv`` (progress, iteration, metric, grad_sqr, grad_var)."""
    header = [h.strip() for h in path.read_text().splitlines()[0].split(",")]
    missing = [c for c in ("progress", "iteration", "grad_sqr", "grad_var") if c not in header]
    if missing:
        raise ValueError(
            f"{path}: line 1: missing column(s) {', '.join(missing)}; Pollux's validation files have "
            "progress,iteration,metric,grad_sqr,grad_var"
        )
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2, dtype=np.float64)
    return {h: data[:, i] for i, h in enumerate(header)}


def canonical_placement(placement: tuple[int, ...]) -> tuple[int, ...]:
    """GPUs per node without empty nodes, rotated to the lexicographically smallest form (how Pollux
    keys its measurements: ``(1, 3)`` and ``(3, 1)`` are one placement)."""
    p = tuple(int(x) for x in placement if x)
    return min(p[i:] + p[:i] for i in range(len(p))) if p else p


def consolidated(replicas: int, per_node: int = GPUS_PER_NODE) -> tuple[int, ...]:
    """The tightest placement of ``replicas`` GPUs on nodes of ``per_node`` GPUs (the testbed's 4)."""
    full, rest = divmod(int(replicas), int(per_node))
    return (int(per_node),) * full + ((rest,) if rest else ())


@dataclass(eq=False)
class PolluxApplication:
    """One application's measurements and the job model above."""

    name: str
    epochs: int
    validation: dict[int, dict[str, np.ndarray]]  # batch size -> progress, iteration, grad_sqr, grad_var
    steps: Measurements  # placements.csv and scalability.csv
    min_local_bsz: int
    max_local_bsz: int
    # per-GPU-type step times (Sia's profiles), empty when only Pollux's T4 measurements exist
    steps_by_type: dict[str, Measurements] = field(default_factory=dict, repr=False)
    gpu_type: str | None = None  # the GPU type these step times are for (None: as measured, T4)
    estimated: bool = False  # step times estimated from another type's (no profile of this type)
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def per_type(self) -> bool:
        """Whether the application was profiled per GPU type (else its T4 step times serve every type)."""
        return bool(self.steps_by_type)

    def on(self, gpu_type: str, compute_speedup: float | None = None) -> PolluxApplication:
        """The application as it runs on ``gpu_type``: that type's measured step times and per-GPU batch
        limit (its memory); without per-type profiles its step times are Pollux's, measured on T4. A type it
        was not profiled on: its T4 step times with the compute part divided by ``compute_speedup`` (the
        model's speed on that type over a T4's), marked ``estimated``."""
        if gpu_type == self.gpu_type or (not self.steps_by_type and gpu_type == "T4"):
            return self
        memo = self._cache.setdefault("on", {})
        key = (gpu_type, compute_speedup)
        hit = memo.get(key)
        if hit is not None:
            return hit
        steps = self.steps_by_type.get(gpu_type)
        estimated = steps is None
        if estimated:
            if compute_speedup is None or not compute_speedup > 0:
                raise ValueError(
                    f"{self.name}: no step times measured on {gpu_type} (profiled on "
                    f"{', '.join(self.steps_by_type)}) and no compute speed to estimate them from"
                )
            base = self.steps_by_type.get("T4", self.steps)
            compute = (base.step_time - base.sync_time) / compute_speedup
            steps = replace(base, step_time=base.sync_time + compute)
        measured = steps.local_bsz[steps.from_placements]
        top = TYPE_MAX_LOCAL_BSZ.get((self.name, gpu_type), MAX_LOCAL_BSZ.get(self.name) if gpu_type == "T4" else None)
        typed = replace(
            self,
            steps=steps,
            min_local_bsz=int(measured.min()),
            max_local_bsz=int(top if top is not None else measured.max()),
            gpu_type=gpu_type,
            estimated=estimated,
            _cache={},
        )
        memo[key] = typed
        return typed

    @property
    def init_batch_size(self) -> int:
        return min(self.validation)

    @property
    def max_batch_size(self) -> int:
        return max(self.validation)

    # -- statistical efficiency -------------------------------------------------------------------------
    def _bracket(self, batch_size: float) -> tuple[int, int, float]:
        sizes = sorted(self.validation)
        if not sizes[0] <= batch_size <= sizes[-1]:
            raise ValueError(f"{self.name}: batch size {batch_size} outside the measured range {sizes[0]}..{sizes[-1]}")
        hi = next(b for b in sizes if b >= batch_size)
        lo = max(b for b in sizes if b <= batch_size)
        return lo, hi, 0.0 if hi == lo else (batch_size - lo) / (hi - lo)

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """Gradient squared norm and variance in ``epoch`` at ``batch_size`` (linear between measured sizes)."""
        lo, hi, w = self._bracket(batch_size)
        a, b = self.validation[lo], self.validation[hi]
        sqr = (1 - w) * a["grad_sqr"][epoch] + w * b["grad_sqr"][epoch]
        var = (1 - w) * a["grad_var"][epoch] + w * b["grad_var"][epoch]
        return float(sqr), float(var)

    def gain(self, batch_size: float, epoch: int) -> float:
        """Statistical efficiency: progress per iteration at ``batch_size`` relative to the smallest batch."""
        sqr, var = self.grad_stats(batch_size, epoch)
        scale = batch_size / self.init_batch_size
        return (var + sqr) / (var / scale + sqr)

    def progress_at(self, epoch: int) -> float:
        """Statistical progress that completes ``epoch`` epochs (the least any measured run needed)."""
        return 0.0 if epoch == 0 else float(min(v["progress"][epoch - 1] for v in self.validation.values()))

    @property
    def total_progress(self) -> float:
        """Statistical progress at which a job of this application has trained all its epochs."""
        return self.progress_at(self.epochs)

    def batch_range(self, replicas: int) -> tuple[int, int]:
        """Global batch sizes a job may use on ``replicas`` GPUs: at least the smallest measured batch and
        the smallest per-GPU batch on every GPU, at most the largest measured batch."""
        return max(self.init_batch_size, self.min_local_bsz * int(replicas)), self.max_batch_size

    def effective_batch(self, batch_size: int, replicas: int) -> int:
        """The global batch a job asking for ``batch_size`` really runs on ``replicas`` GPUs (per-GPU batch
        x accumulation steps x GPUs, as :meth:`batch_plan` rounds it), which its efficiency follows."""
        atomic, accum = self.batch_plan(batch_size, replicas)
        return int(replicas) * atomic * (accum + 1)

    def rate(self, placement: tuple[int, ...], batch_size: int, epoch: int) -> float:
        """Statistical progress per second in ``epoch`` on ``placement`` at global ``batch_size``."""
        gain = self.gain(self.effective_batch(batch_size, sum(placement)), epoch)
        return gain / self.iteration_time(placement, batch_size)

    def seconds_left(self, placement: tuple[int, ...], batch_size: int, epoch: int, progress: float) -> float:
        """Seconds to finish from ``progress`` (inside ``epoch``) on ``placement`` at ``batch_size``."""
        if epoch >= self.epochs:
            return 0.0
        key = ("tail", canonical_placement(placement), int(batch_size))
        tail = self._cache.get(key)
        if tail is None:
            per_epoch = [
                (self.progress_at(e + 1) - self.progress_at(e)) / self.rate(placement, batch_size, e)
                for e in range(self.epochs)
            ]
            tail = self._cache[key] = np.concatenate([np.cumsum(per_epoch[::-1])[::-1], [0.0]])
        inside = max(0.0, self.progress_at(epoch + 1) - progress) / self.rate(placement, batch_size, epoch)
        return float(inside + tail[epoch + 1])

    def iterations(self, batch_size: float, replicas: int = 1) -> float:
        """Iterations a job at ``batch_size`` on ``replicas`` GPUs runs to finish its epochs."""
        key = ("it", batch_size, replicas)
        if key not in self._cache:
            eff = self.effective_batch(int(batch_size), replicas)
            total = 0.0
            for e in range(self.epochs):
                total += (self.progress_at(e + 1) - self.progress_at(e)) / self.gain(eff, e)
            self._cache[key] = total
        return self._cache[key]

    # -- throughput ---------------------------------------------------------------------------------------
    def batch_plan(self, batch_size: int, replicas: int) -> tuple[int, int]:
        """Per-GPU (atomic) batch and gradient-accumulation steps for a fixed global batch, Pollux's rule."""
        local = math.ceil(batch_size / replicas - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        if replicas == 1 and batch_size > self.init_batch_size:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(self.max_batch_size / (replicas * (accum + 1))))
        return max(atomic, 1), accum

    def step_time(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """Measured (step, sync) seconds for ``placement`` at per-GPU batch ``local_bsz``."""
        p = canonical_placement(placement)
        key = ("st", p, float(local_bsz))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        measured = self._measured_rows(p)
        if measured is not None:
            x, steps, syncs = measured
            step = float(np.interp(local_bsz, x, steps))
            sync = float(np.interp(local_bsz, x, syncs))
        else:
            step, sync = self._nd_interpolator()([[min(len(p), MAX_NODES), sum(p), local_bsz]])[0]
            if not (np.isfinite(step) and np.isfinite(sync)):  # outside the measured shapes (e.g. 8 GPUs a node)
                step, sync = self._extrapolate(p, local_bsz)
        self._cache[key] = (float(step), float(sync))
        return self._cache[key]

    def _measured_rows(self, placement: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The measurements of exactly ``placement`` (canonical), by per-GPU batch: (batch, step, sync); None
        where it was not measured. Found once per placement: Sia asks for thousands of batches a run."""
        key = ("rows", placement)
        if key not in self._cache:
            m = self.steps
            rows = m.from_placements & (m.placement == "".join(map(str, placement)))
            found = None
            if rows.any():
                order = np.argsort(m.local_bsz[rows], kind="stable")
                found = (m.local_bsz[rows][order], m.step_time[rows][order], m.sync_time[rows][order])
            self._cache[key] = found
        return self._cache[key]

    def _extrapolate(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """(step, sync) on a placement no measurement brackets (more GPUs a node than the testbed's 4): the
        same nodes with 4 GPUs each, measured, times the ratio of Pollux's step-time model (fitted to all of
        the application's measurements) between the two shapes, never below 1 (more GPUs, no faster step)."""
        from cluster_sim.goodput import fit_perf_params, step_time

        nodes, replicas = min(len(placement), MAX_NODES), sum(placement)
        anchor = nodes * min(GPUS_PER_NODE, max(placement))
        anchor_bsz = local_bsz
        base_step, base_sync = self._nd_interpolator()([[nodes, anchor, local_bsz]])[0]
        if not (np.isfinite(base_step) and np.isfinite(base_sync)):
            # beyond every measured shape of this GPU type (e.g. 4 nodes of 8 where 3 were measured): the
            # largest measured shape within the placement, at its measured batch nearest this one
            nodes, anchor, anchor_bsz, base_step, base_sync = self._nearest_measured(nodes, replicas, local_bsz)
        params = self._cache.get("params")
        if params is None:
            m = self.steps
            params = self._cache["params"] = fit_perf_params(
                m.nodes, m.replicas, m.local_bsz, m.step_time - m.sync_time, m.step_time
            )
        shape = step_time(params, nodes, replicas, anchor_bsz, 0) / step_time(params, nodes, anchor, anchor_bsz, 0)
        batch = step_time(params, nodes, replicas, local_bsz, 0) / step_time(params, nodes, replicas, anchor_bsz, 0)
        ratio = max(float(shape), 1.0) * float(batch)
        compute = base_step - base_sync
        step = base_step * ratio
        return float(step), float(max(step - compute, 0.0))

    def _nearest_measured(self, nodes: int, replicas: int, local_bsz: float) -> tuple[int, int, float, float, float]:
        """(nodes, replicas, per-GPU batch, step, sync) of the largest measured placement shape with at most
        ``nodes`` nodes and ``replicas`` GPUs (the smallest measured one if none), at its measured per-GPU
        batch nearest ``local_bsz``."""
        m = self.steps
        pl = m.from_placements if m.from_placements.any() else np.ones(len(m.nodes), dtype=bool)
        fits = pl & (m.nodes <= nodes) & (m.replicas <= replicas)
        rows = np.flatnonzero(fits if fits.any() else pl)
        key = m.replicas[rows] * 1000 + m.nodes[rows]
        rows = rows[key == (key.max() if fits.any() else key.min())]
        b = m.local_bsz[rows]
        near = rows[np.abs(b - local_bsz) == np.abs(b - local_bsz).min()]
        i = int(near[0])
        return (
            int(m.nodes[i]),
            int(m.replicas[i]),
            float(m.local_bsz[i]),
            float(np.mean(m.step_time[near])),
            float(np.mean(m.sync_time[near])),
        )

    def _nd_interpolator(self):
        fn = self._cache.get("nd")
        if fn is None:
            from scipy.interpolate import LinearNDInterpolator

            m, pl = self.steps, self.steps.from_placements
            keys = np.stack([m.nodes[pl], m.replicas[pl], m.local_bsz[pl]], axis=1).astype(np.float64)
            uniq, inv = np.unique(keys, axis=0, return_inverse=True)  # placements averaged per shape
            inv = inv.reshape(-1)
            counts = np.bincount(inv)
            step = np.bincount(inv, weights=m.step_time[pl]) / counts
            sync = np.bincount(inv, weights=m.sync_time[pl]) / counts
            sc = ~pl
            xs = np.concatenate([uniq, np.stack([m.nodes[sc], m.replicas[sc], m.local_bsz[sc]], axis=1)])
            ys = np.concatenate([np.stack([step, sync], axis=1), np.stack([m.step_time[sc], m.sync_time[sc]], axis=1)])
            fn = self._cache["nd"] = LinearNDInterpolator(xs, ys)
        return fn

    def iteration_time(self, placement: tuple[int, ...], batch_size: int) -> float:
        """Seconds per iteration at global ``batch_size`` on ``placement``, accumulation steps included."""
        atomic, accum = self.batch_plan(batch_size, sum(placement))
        step, sync = self.step_time(placement, atomic)
        return step + accum * (step - sync)

    def ideal_duration(self, batch_size: int, replicas: int, per_node: int = GPUS_PER_NODE) -> float:
        """Seconds to train at ``batch_size`` on ``replicas`` GPUs placed as tightly as possible on nodes
        of ``per_node`` GPUs."""
        return self.seconds_left(consolidated(replicas, per_node), batch_size, 0, 0.0)


def load_application(traces_dir: str | Path, name: str) -> PolluxApplication:
    """The measurements of application ``name`` under ``traces_dir`` (``pollux-osdi21/traces``)."""
    return _load(str(Path(traces_dir).resolve()), name)


@cache
def _load(traces_dir: str, name: str) -> PolluxApplication:
    if name not in EPOCHS:
        raise ValueError(f"unknown Pollux application {name!r}; known: {', '.join(EPOCHS)}")
    d = Path(traces_dir) / name
    files = {int(f.stem.split("-")[-1]): f for f in d.glob("validation-*.csv") if f.stem.split("-")[-1].isdigit()}
    validation = {b: _read_validation(files[b]) for b in sorted(files)}
    if not validation:
        raise FileNotFoundError(f"{d}: no validation-<batch>.csv files (Pollux measurements)")
    by_type = {}
    for gpu, suffix in PROFILE_SUFFIX.items():
        if (d / f"placements-{suffix}.csv").is_file():
            by_type[gpu] = load_pollux_app(d, profile_files(d, gpu))
    steps = load_pollux_app(d) if (d / "placements.csv").is_file() or "T4" not in by_type else by_type["T4"]
    measured = steps.local_bsz[steps.from_placements]
    epochs = min(EPOCHS[name], min(len(v["progress"]) for v in validation.values()))
    return PolluxApplication(
        name=name,
        epochs=epochs,
        validation=validation,
        steps=steps,
        min_local_bsz=int(measured.min()),
        max_local_bsz=int(MAX_LOCAL_BSZ.get(name, measured.max())),
        steps_by_type=by_type,
    )


class PolluxPerformance:
    """Placement speeds of Pollux's applications from their measured step times; other models from ``base``.

    A job of an application runs at ``iteration_time(tightest placement) / iteration_time(its placement)``
    at its batch size: its duration was computed for the tightest placement of its GPUs. Everything else
    (other models, ``iteration_time``, GPU speeds) is ``base``'s, a
    :class:`~cluster_sim.perf_model.PerformanceModel`.
    """

    def __init__(self, base, traces_dir: str | Path, view) -> None:
        from cluster_sim.model_zoo import ZOO, model_index

        self.base = base
        self.view = view
        self.per_node = int(view.server_num_gpus.max())  # a duration is for the tightest placement here
        self.traces_dir = traces_dir
        # zoo model index -> application name; each application is read when a job of it is first seen, so
        # a profile folder needs only the applications its workload runs
        self._names = {model_index(s.name): s.pollux_name for s in ZOO.values() if s.pollux_name}
        self.apps: dict[int, PolluxApplication] = {}

    def __getattr__(self, name: str):
        return getattr(self.base, name)

    def application(self, model: int) -> PolluxApplication | None:
        """The measured application behind ``model`` (the simulator counts its jobs' work in statistical
        progress), or None for a model Pollux did not measure."""
        model = int(model)
        if model not in self.apps and model in self._names:
            self.apps[model] = load_application(self.traces_dir, self._names[model])
        return self.apps.get(model)

    def estimated_apps_by_type(self, models: np.ndarray, model_names: tuple[str, ...]) -> dict[str, int]:
        """Per GPU type of a cluster of several types, how many jobs of a workload (``models``: indices into
        ``model_names``) train an application never profiled on it: their step times there are estimated
        (:meth:`on`). Empty on one type, where the application's own step times serve."""
        from cluster_sim.model_zoo import model_index

        if len(self.view.gpu_types) < 2 or not len(models):
            return {}
        counts = np.bincount(np.asarray(models, dtype=np.int64), minlength=len(model_names))
        apps = [  # read only those the jobs train (a profile folder needs no others)
            self.application(model_index(name)) if c and model_index(name) in self._names else None
            for name, c in zip(model_names, counts.tolist(), strict=True)
        ]
        out = {}
        for t in self.view.gpu_types:
            n = sum(
                int(c)
                for a, c in zip(apps, counts, strict=True)
                if a is not None and t not in (set(a.steps_by_type) or {"T4"})
            )
            if n:
                out[t] = n
        return out

    def on(self, model: int, gpu_type: str) -> PolluxApplication:
        """``model``'s application as it runs on ``gpu_type`` (:meth:`PolluxApplication.on`); a type it was
        not profiled on is estimated from its T4 times by the model's compute speed there over a T4's."""
        app = self.application(model)
        if app is None:
            raise ValueError(f"model {int(model)} is not one of the measured applications")
        if gpu_type in app.steps_by_type or (not app.per_type and gpu_type == "T4"):
            return app.on(gpu_type)
        ratio = self.base.model_gpu_speed(int(model), gpu_type) / self.base.model_gpu_speed(int(model), "T4")
        return app.on(gpu_type, ratio)

    def speed(self, model: int, global_batch: int, gpus: np.ndarray, uplink_sharers: int = 1) -> float:
        app = self.application(model)
        if app is None:
            return self.base.speed(model, global_batch, gpus, uplink_sharers)
        per_server = np.bincount(self.view.gpu_server[np.asarray(gpus)])
        placement = tuple(int(c) for c in per_server if c)
        ideal = app.iteration_time(consolidated(len(gpus), self.per_node), int(global_batch))
        return ideal / app.iteration_time(placement, int(global_batch))
