"""Iteration time of a data-parallel training job on a placement (Pollux, OSDI'21, extended by topology).

For K replicas with local batch b = ceil(global batch / K)::

    T       = (T_grad^γ + T_sync^γ)^(1/γ)          γ in [1, 10]: how much compute and sync overlap
    T_grad  = (α_grad + β_grad·b) / speed(slowest GPU of the placement)       (V100 seconds)
    T_sync  = 0                                                               K = 1
            = (α_r + β_r·(K−2)) · B_pcie / B_local                            one server
            + (α_n − α_r + (β_n − β_r)·(K−2)) · B_nic / B_net                 several servers

Pollux fits α_r, β_r on replicas inside one node and α_n, β_n across nodes; all were measured on its
testbed (AWS g4dn.12xlarge: 4 T4 per node, each on PCIe 3.0 x16, B_pcie = 15.75 GB/s; 50 Gb/s network,
B_nic = 6.25 GB/s). Here each share of the synchronisation time is scaled by the link it crosses:

* the within-server share by B_local: the GPU↔GPU bandwidth inside one socket or NVSwitch domain
  (level SOCKET), or the slower cross-socket path (level SERVER, and any placement spanning servers,
  since a ring that leaves a two-socket server crosses the socket interconnect to reach the NIC);
* the cross-server excess by B_net = min over crossed links of bandwidth / sharers: the servers' NICs
  (level RACK), plus the racks' uplinks to the pod spine (POD), plus the pods' uplinks (DATACENTER),
  each uplink divided by ``uplink_sharers``, the number of jobs (this one included) on the busiest
  uplink the job crosses.

So an NVSwitch server synchronises ~10x faster than Pollux's PCIe T4s, a placement spread over servers
is never faster than the same replicas in one server, and contention on an oversubscribed uplink only
slows a job once its share falls below its NIC. The fitted cross-server excess is proportional to the
gradient size (0.007-0.011 s per million parameters at K = 2 for all six of Pollux's models), which
supports treating it as bandwidth-bound. It corresponds to ~0.8 GB/s of all-reduce bandwidth, well
below the nominal 50 Gb/s, so cross-server sync times are conservative for RDMA fabrics.

Constants come from ``data/perf_constants.json``, written by ``python -m cluster_sim.perf_fit`` (see
that module for the sources). Fit error of the step time, median / mean absolute percentage error:

=================  ===========  =========  =====  ==================================================
model              median APE   mean APE   rows   measured against
=================  ===========  =========  =====  ==================================================
resnet18-cifar10   6.2 %        7.6 %      1183   Pollux placements.csv (cifar10), T4
resnet50-imagenet  4.7 %        6.8 %      864    Pollux placements.csv (imagenet), T4
bert-squad         4.4 %        7.4 %      540    Pollux placements.csv (bert), T4
deepspeech2        7.4 %        8.7 %      754    Pollux placements.csv (deepspeech2), T4
yolov3             6.8 %        9.2 %      540    Pollux placements.csv (yolov3), T4
ncf                6.5 %        9.0 %      1661   Pollux placements.csv (ncf), T4
transformer        11.2 %       16.7 %     5      Gavel V100 isolated step time (compute only)
lstm-lm            2.5 %        3.5 %      5      Gavel V100 isolated step time (compute only)
recommendation     4.3 %        10.0 %     5      Gavel V100 isolated step time (compute only)
a3c, cyclegan      exact        exact      1      Gavel V100, one batch size (α = β·b = T/2)
=================  ===========  =========  =====  ==================================================

Models Pollux did not measure take their synchronisation constants from the Pollux model with the
nearest parameter count, scaled by the ratio of parameter counts (all of T_sync is bandwidth-bound in
this model). GPU speeds relative to V100: P100 0.943 and K80 0.297 (Gavel's isolated throughputs,
geometric mean over 26 job types); T4 0.621 (Gavel's V100 over Pollux's T4 times on ResNet-18/50,
which converts Pollux's compute constants); A100 2.56 (NVIDIA's ResNet-50 training benchmark); A10,
H100, H200 from datasheet ratios to the A100.

A trace gives a duration at the reference placement, so the simulator's unit of work is one second at
:meth:`PerformanceModel.speed` 1.0, which is exactly what the reference placement returns (both sides go
through the same arithmetic on the same floats). The reference placement is fixed, whatever the cluster:
V100s in DGX-class servers (``nvswitch-8``: one NVSwitch domain of 8, 4 x 100 Gb/s NICs), as few servers as
the job needs, on a fabric that does not slow it (:data:`REFERENCE_SERVER`). A job's work is therefore the
same on every cluster, and editing one rack's servers changes only the jobs that run on them; on a cluster
with slower links than the reference (PCIe V100 servers, oversubscribed uplinks) a job placed as well as
that cluster allows runs below speed 1.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cluster_sim.model_zoo import MODEL_NAMES
from cluster_sim.perf_fit import DERIVED_FROM, REFERENCE_GPU
from topology.servers import SERVER_PRESETS
from topology.view import ClusterView, Level

DEFAULT_CONSTANTS = Path(__file__).resolve().parent / "data" / "perf_constants.json"
_FIELDS = ("alpha_grad", "beta_grad", "alpha_r", "beta_r", "alpha_n", "beta_n", "gamma")
_REFIT = "regenerate it with `python -m cluster_sim.perf_fit`"


@dataclass(frozen=True)
class PerfParams:
    """Constants of one model; times in seconds on a V100 (compute) and on Pollux's links (sync)."""

    alpha_grad: float  # fixed compute time per step
    beta_grad: float  # compute time per sample of the local batch
    alpha_r: float  # sync, K = 2 inside one server, at 15.75 GB/s
    beta_r: float  # extra sync per replica beyond 2 inside one server
    alpha_n: float  # sync, K = 2 across servers (includes alpha_r), excess over alpha_r at 6.25 GB/s
    beta_n: float  # extra sync per replica beyond 2 across servers (includes beta_r)
    gamma: float  # overlap exponent, 1 = none, 10 ≈ full
    source: str = ""


@dataclass(frozen=True)
class _Shape:
    """The best place for a job on one GPU type (in a cluster, or the reference placement's): what the ideal
    placement sees."""

    server_gpus: int
    socket_gpus: int
    intra_bw: float
    local_bw: float
    nic_bw: float
    rack_servers: float  # servers of the type in one rack; inf for the reference placement
    pod_servers: float
    rack_uplink_bw: float
    pod_uplink_bw: float


#: The server of the reference placement, with the reference GPU in it.
REFERENCE_SERVER = "nvswitch-8"


def _reference_shape(gpu_type: str) -> _Shape:
    """The reference placement's shape: :data:`REFERENCE_SERVER` with ``gpu_type``, servers without limit in a
    rack and a pod, each uplink as fast as a server's NIC (the fabric never the bottleneck)."""
    server = SERVER_PRESETS[REFERENCE_SERVER]
    links = server.links(gpu_type)
    return _Shape(
        server_gpus=server.gpus,
        socket_gpus=server.gpus_per_socket,
        intra_bw=links.intra_bw,
        local_bw=min(links.intra_bw, links.cross_socket_bw),
        nic_bw=links.nic_bw,
        rack_servers=math.inf,
        pod_servers=math.inf,
        rack_uplink_bw=links.nic_bw,
        pod_uplink_bw=links.nic_bw,
    )


def load_constants(path: Path = DEFAULT_CONSTANTS) -> dict:
    """Read and check the constants file; every problem names the file, the entry and the fix."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: performance-model constants not found; {_REFIT}")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); {_REFIT}") from None
    for key in ("reference_gpu", "testbed", "gpu_speed", "models"):
        if key not in doc:
            raise ValueError(f"{path}: missing top-level key {key!r}; {_REFIT}")
    for key in ("intra_bw_GBps", "nic_bw_GBps"):
        if not _positive(doc["testbed"].get(key)):
            raise ValueError(f"{path}: testbed.{key} must be a positive number; {_REFIT}")
    for gpu, value in doc["gpu_speed"].items():
        if not _positive(value):
            raise ValueError(f"{path}: gpu_speed.{gpu}={value!r} must be a positive number")
    if doc["reference_gpu"] not in doc["gpu_speed"]:
        raise ValueError(f"{path}: reference_gpu {doc['reference_gpu']!r} has no entry in gpu_speed")
    models = doc["models"]
    missing = [m for m in MODEL_NAMES if m not in models]
    if missing:
        raise ValueError(f"{path}: no constants for model(s) {', '.join(missing)} of the model zoo; {_REFIT}")
    for name in MODEL_NAMES:
        entry = models[name]
        for f in _FIELDS:
            v = entry.get(f)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{path}: models.{name}.{f}={v!r} must be a finite number >= 0; {_REFIT}")
        if not 1.0 <= entry["gamma"] <= 10.0:
            raise ValueError(f"{path}: models.{name}.gamma={entry['gamma']} must lie in [1, 10]")
        if entry["alpha_grad"] + entry["beta_grad"] <= 0 or entry["alpha_r"] + entry["beta_r"] <= 0:
            raise ValueError(f"{path}: models.{name} has zero compute or zero sync time; {_REFIT}")
        if entry["alpha_n"] < entry["alpha_r"] or entry["beta_n"] < entry["beta_r"]:
            raise ValueError(
                f"{path}: models.{name}: alpha_n/beta_n must be >= alpha_r/beta_r (cross-server sync "
                f"includes the within-server share); {_REFIT}"
            )
    return doc


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _uniform(a: np.ndarray) -> float | None:
    """The single value of ``a`` if all entries are equal (lets the hot path skip a gather)."""
    return float(a[0]) if len(a) and bool((a == a[0]).all()) else None


class PerformanceModel:
    """Iteration time and speed of a job on a placement of a given :class:`ClusterView`."""

    def __init__(self, view: ClusterView, constants_path: Path | None = None, reference_gpu: str | None = None):
        self.view = view
        self.constants_path = Path(constants_path) if constants_path is not None else DEFAULT_CONSTANTS
        doc = load_constants(self.constants_path)
        self.gpu_speeds: dict[str, float] = {k: float(v) for k, v in doc["gpu_speed"].items()}
        self.reference_gpu = reference_gpu or doc["reference_gpu"]
        self._gpu_speed(self.reference_gpu)  # fail early on an unknown reference
        self.params: tuple[PerfParams, ...] = tuple(
            PerfParams(**{f: float(doc["models"][m][f]) for f in _FIELDS}, source=doc["models"][m].get("source", ""))
            for m in MODEL_NAMES
        )
        self._ref_intra = float(doc["testbed"]["intra_bw_GBps"])
        self._ref_nic = float(doc["testbed"]["nic_bw_GBps"])
        # Flat per-model tuples: (α_g, β_g, α_r, β_r, α_n − α_r, β_n − β_r, γ, 1/γ).
        self._c = [
            (
                p.alpha_grad,
                p.beta_grad,
                p.alpha_r,
                p.beta_r,
                p.alpha_n - p.alpha_r,
                p.beta_n - p.beta_r,
                p.gamma,
                1.0 / p.gamma,
            )
            for p in self.params
        ]

        # compute speed per (model, GPU type of this cluster): measured where someone measured the model on
        # that type (``model_gpu_speed``), else the type's single speed, noted in ``fallbacks``
        measured = doc.get("model_gpu_speed", {})
        self.model_gpu_speeds: dict[str, dict[str, float]] = {
            m: {g: float(e["speed"]) for g, e in t.items()} for m, t in measured.items()
        }
        self._type_speed = np.array(
            [[self.model_gpu_speed(i, t, view) for t in view.gpu_types] for i in range(len(MODEL_NAMES))],
            dtype=np.float64,
        ).reshape(len(MODEL_NAMES), len(view.gpu_types))
        self.fallbacks: frozenset[tuple[str, str]] = frozenset(
            (m, t) for m in MODEL_NAMES for t in view.gpu_types if t not in self.model_gpu_speeds.get(m, {})
        )
        self._gpu_type_arr = view.server_gpu_type[view.gpu_server].astype(np.int64)
        uniform_type = _uniform(view.server_gpu_type)
        self._uniform_type = None if uniform_type is None else int(uniform_type)
        self._speed_uniform = uniform_type  # one GPU type: a placement's speed does not depend on which
        bad = [
            name
            for name in (
                "server_intra_bw",
                "server_cross_socket_bw",
                "server_nic_bw",
                "rack_uplink_bw",
                "pod_uplink_bw",
            )
            if not np.all(getattr(view, name) > 0)
        ]
        if bad:
            raise ValueError(f"cluster view {view.name!r}: {', '.join(bad)} must be > 0 everywhere (GB/s)")
        self._intra = view.server_intra_bw
        self._local = np.minimum(view.server_intra_bw, view.server_cross_socket_bw)
        self._local_uniform = _uniform(self._local)
        self._nic_uniform = _uniform(view.server_nic_bw)
        self._rack_up_uniform = _uniform(view.rack_uplink_bw)
        self._pod_up_uniform = _uniform(view.pod_uplink_bw)
        # every GPU, server and uplink alike: a placement's speed depends only on its GPU count, its
        # span level and the uplink sharers, so callers may share one memo among such placements
        self.uniform = None not in (
            self._speed_uniform,
            _uniform(self._intra),
            self._local_uniform,
            self._nic_uniform,
            self._rack_up_uniform,
            self._pod_up_uniform,
        )
        self._shapes: dict[str, _Shape] = {}
        self._ideal: dict[tuple[int, int, int, str], float] = {}
        self._reference = _reference_shape(self.reference_gpu)
        self._reference_times: dict[tuple[int, int, int], float] = {}

    # ---------------------------------------------------------------- public API

    def iteration_time(self, model: int, global_batch: int, gpus: np.ndarray, uplink_sharers: int = 1) -> float:
        """Seconds per training step of ``model`` with ``global_batch`` split over ``gpus``.

        ``uplink_sharers``: jobs (this one included) on the busiest rack or pod uplink the placement
        crosses; it matters only for placements that span racks."""
        k = len(gpus)
        model, global_batch = int(model), int(global_batch)
        self._check(model, global_batch, k)
        if uplink_sharers < 1:
            raise ValueError(f"uplink_sharers={uplink_sharers}: count the jobs on the uplink, this one included (>= 1)")
        b = -(-global_batch // k)
        t = self._uniform_type
        if t is not None:
            speed = self._type_speed[model, t]
        else:
            speed = float(self._type_speed[model][self._gpu_type_arr[gpus]].min())
        if k == 1:
            return self._time(model, b, 1, speed, 0.0, 0.0)
        view = self.view
        level = view.span_level(gpus)
        if level <= Level.SERVER:
            server = int(view.gpu_server[gpus[0]])
            bw = self._intra[server] if level == Level.SOCKET else self._local[server]
            return self._time(model, b, k, speed, self._ref_intra / float(bw), 0.0)
        servers = view.gpu_server[gpus]
        local = self._local_uniform if self._local_uniform is not None else float(self._local[servers].min())
        net = self._nic_uniform if self._nic_uniform is not None else float(view.server_nic_bw[servers].min())
        if level >= Level.POD:
            racks = view.server_rack[servers]
            up = self._rack_up_uniform if self._rack_up_uniform is not None else float(view.rack_uplink_bw[racks].min())
            net = min(net, up / uplink_sharers)
            if level == Level.DATACENTER:
                pods = view.rack_pod[racks]
                up = self._pod_up_uniform if self._pod_up_uniform is not None else float(view.pod_uplink_bw[pods].min())
                net = min(net, up / uplink_sharers)
        return self._time(model, b, k, speed, self._ref_intra / local, self._ref_nic / net)

    def ideal_iteration_time(self, model: int, global_batch: int, num_gpus: int, gpu_type: str = "V100") -> float:
        """Iteration time at this cluster's best placement for ``gpu_type``: ``num_gpus`` GPUs of the type on as
        few servers and as low a topology level as this cluster's servers of that type allow (the cluster's
        largest server if it has none of that type), no uplink contention."""
        model, global_batch, num_gpus = int(model), int(global_batch), int(num_gpus)
        key = (model, global_batch, num_gpus, gpu_type)
        t = self._ideal.get(key)
        if t is None:
            self._check(model, global_batch, num_gpus)
            t = self._ideal[key] = self._shaped_time(model, global_batch, num_gpus, gpu_type, self._shape(gpu_type))
        return t

    def reference_iteration_time(self, model: int, global_batch: int, num_gpus: int) -> float:
        """Iteration time at the reference placement (:data:`REFERENCE_SERVER` with the reference GPU, the same on
        every cluster), at which a trace's duration is read."""
        model, global_batch, num_gpus = int(model), int(global_batch), int(num_gpus)
        key = (model, global_batch, num_gpus)
        t = self._reference_times.get(key)
        if t is None:
            self._check(model, global_batch, num_gpus)
            shaped = self._shaped_time(model, global_batch, num_gpus, self.reference_gpu, self._reference)
            t = self._reference_times[key] = shaped
        return t

    def _shaped_time(self, model: int, global_batch: int, num_gpus: int, gpu_type: str, s: _Shape) -> float:
        speed = self.model_gpu_speed(model, gpu_type)
        n = num_gpus
        b = -(-global_batch // n)
        if n == 1:
            t = self._time(model, b, 1, speed, 0.0, 0.0)
        elif n <= s.socket_gpus:
            t = self._time(model, b, n, speed, self._ref_intra / s.intra_bw, 0.0)
        elif n <= s.server_gpus:
            t = self._time(model, b, n, speed, self._ref_intra / s.local_bw, 0.0)
        else:
            servers = -(-n // s.server_gpus)
            net = s.nic_bw  # uplinks below are unshared: this job is their only user
            if servers > s.rack_servers:
                net = min(net, s.rack_uplink_bw)
                if servers > s.pod_servers:
                    net = min(net, s.pod_uplink_bw)
            t = self._time(model, b, n, speed, self._ref_intra / s.local_bw, self._ref_nic / net)
        return t

    def speed(self, model: int, global_batch: int, gpus: np.ndarray, uplink_sharers: int = 1) -> float:
        """Progress per second relative to the reference placement: exactly 1.0 there (and on a cluster of its
        servers placed as well as they allow), below 1 when spread, contended or on slower links, above 1 on a
        faster GPU generation."""
        ideal = self.reference_iteration_time(model, global_batch, len(gpus))
        return ideal / self.iteration_time(model, global_batch, gpus, uplink_sharers)

    def gpu_speed(self, gpu_type: str) -> float:
        """Compute speed of ``gpu_type`` relative to the reference GPU (one figure for all models: the
        fallback where a model was not measured on the type)."""
        return self._gpu_speed(gpu_type)

    def model_gpu_speed(self, model: int, gpu_type: str, view: ClusterView | None = None) -> float:
        """Compute speed of ``model`` (index in MODEL_NAMES) on ``gpu_type`` relative to the reference GPU:
        measured (Gavel's or Sia's tables, see :func:`cluster_sim.perf_fit.model_gpu_speeds`) where it was; on
        a type rated by its datasheet ratio to a measured one (:data:`~cluster_sim.perf_fit.DERIVED_FROM`), the
        model's speed there times that ratio; else :meth:`gpu_speed`."""
        measured = self.model_gpu_speeds.get(MODEL_NAMES[int(model)], {})
        speed = measured.get(gpu_type)
        if speed is not None:
            return speed
        base = DERIVED_FROM.get(gpu_type)
        if base is not None and base in measured:
            return measured[base] * self._gpu_speed(gpu_type, view) / self._gpu_speed(base, view)
        return self._gpu_speed(gpu_type, view)

    def estimated_jobs_by_type(self, models: np.ndarray, model_names: tuple[str, ...]) -> dict[str, int]:
        """Per GPU type of this cluster, how many jobs of a workload (``models``: indices into ``model_names``)
        would run there at the type's single speed, because nobody measured their model on it (V100, the
        reference of every duration, is exact by definition). Empty where every pair was measured."""
        if not self.fallbacks or not len(models):
            return {}
        models = np.asarray(models, dtype=np.int64)
        out = {}
        for t in self.view.gpu_types:
            if t == REFERENCE_GPU:
                continue
            bad = np.array([(m, t) in self.fallbacks for m in model_names], dtype=bool)
            if n := int(bad[models].sum()):
                out[t] = n
        return out

    # ---------------------------------------------------------------- internals

    def _time(self, model: int, b: int, k: int, speed: float, local_factor: float, net_factor: float) -> float:
        ag, bg, ar, br, dan, dbn, gamma, inv_gamma = self._c[model]
        t_grad = (ag + bg * b) / speed
        if k == 1:
            return t_grad
        k2 = k - 2
        t_sync = (ar + br * k2) * local_factor + (dan + dbn * k2) * net_factor
        return (t_grad**gamma + t_sync**gamma) ** inv_gamma

    def _check(self, model: int, global_batch: int, k: int) -> None:
        if not 0 <= model < len(self._c):
            raise ValueError(f"model index {model} out of range; MODEL_NAMES has {len(self._c)} models")
        if k < 1:
            raise ValueError("a job needs at least one GPU; got an empty placement")
        if global_batch < 1:
            raise ValueError(f"global_batch={global_batch} must be >= 1")

    def _gpu_speed(self, gpu_type: str, view: ClusterView | None = None) -> float:
        speed = self.gpu_speeds.get(gpu_type)
        if speed is None:
            speed = self.gpu_speeds.get(gpu_type.upper())
        if speed is None:
            where = f" (cluster view {view.name!r})" if view is not None else ""
            raise ValueError(
                f"no compute speed for GPU type {gpu_type!r}{where}; known: {', '.join(self.gpu_speeds)}. "
                f"Add it to gpu_speed in {self.constants_path} (or to PUBLIC_SPEEDS in "
                "cluster_sim/perf_fit.py and re-run the fit)"
            )
        return speed

    def _shape(self, gpu_type: str) -> _Shape:
        shape = self._shapes.get(gpu_type)
        if shape is not None:
            return shape
        v = self.view
        type_names = [t.upper() for t in v.gpu_types]
        mask = np.zeros(v.num_servers, dtype=bool)
        if gpu_type.upper() in type_names:
            mask = v.server_gpu_type == type_names.index(gpu_type.upper())
        if not mask.any():
            mask[:] = True
        cand = np.flatnonzero(mask)
        # Most GPUs first, then NVSwitch, then the fastest links.
        order = np.lexsort(
            (
                -v.server_nic_bw[cand],
                -v.server_intra_bw[cand],
                -self._local[cand],
                -v.server_nvswitch[cand].astype(np.int8),
                -v.server_num_gpus[cand],
            )
        )
        best = int(cand[order[0]])
        _, per_socket = np.unique(v.gpu_socket[v.server_gpus(best)], return_counts=True)
        of_type = mask.astype(np.int64)
        per_rack = np.bincount(v.server_rack, weights=of_type, minlength=v.num_racks)
        per_pod = np.bincount(v.rack_pod, weights=per_rack, minlength=v.num_pods)
        shape = _Shape(
            server_gpus=int(v.server_num_gpus[best]),
            socket_gpus=int(per_socket.max()),
            intra_bw=float(self._intra[best]),
            local_bw=float(self._local[best]),
            nic_bw=float(v.server_nic_bw[best]),
            rack_servers=int(per_rack.max()),
            pod_servers=int(per_pod.max()),
            rack_uplink_bw=float(v.rack_uplink_bw.max()),
            pod_uplink_bw=float(v.pod_uplink_bw.max()),
        )
        self._shapes[gpu_type] = shape
        return shape


def durations_on_reference(workload, gpu_type: str, constants_path: Path = DEFAULT_CONSTANTS):
    """``workload`` (a :class:`~cluster_sim.workload.Workload`) with its durations, measured on ``gpu_type``, as the
    reference GPU's (V100) run times, which is what the simulator reads: each job's scaled by its model's compute
    speed on that type (measured where someone measured the model there, else the type's single speed). The
    scale is of compute: a multi-GPU job's communication, which a faster GPU does not speed up, is an estimate."""
    from dataclasses import replace

    doc = load_constants(constants_path)
    speeds = {k.upper(): float(v) for k, v in doc["gpu_speed"].items()}
    if gpu_type.upper() not in speeds:
        raise ValueError(f"measured_on={gpu_type}: no speed for that GPU type; known: {', '.join(doc['gpu_speed'])}")
    key = next(k for k in doc["gpu_speed"] if k.upper() == gpu_type.upper())
    measured = doc.get("model_gpu_speed", {})
    per_model = np.array(
        [float(measured.get(m, {}).get(key, {}).get("speed", speeds[key.upper()])) for m in workload.models]
    )
    reference = float(doc["gpu_speed"][doc["reference_gpu"]])
    duration = workload.duration * per_model[workload.model] / reference
    return replace(workload, duration=duration, meta={**workload.meta, "measured_on": key})
