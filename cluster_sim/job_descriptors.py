"""Interference descriptors of the simulated jobs, built from the model zoo and the performance model.

Descriptors depend only on (model, per-GPU batch, GPU type), so they are cached by that key: a 64k-job
trace has a few dozen distinct descriptors.
"""

from __future__ import annotations

import math

import numpy as np

from cluster_sim.model_zoo import ZOO, model_index
from cluster_sim.workload import Workload
from interference.base import JobDescriptor
from topology.view import ClusterView

# Without a performance model, solo speed is estimated from training FLOPs at this sustained rate
# (about a third of a V100's 125 TFLOP/s tensor-core peak, a typical achieved fraction for training).
_ASSUMED_TFLOPS = 40.0


class DescriptorCache:
    def __init__(self, workload: Workload, view: ClusterView, perf=None) -> None:
        self._jobs = workload
        self._view = view
        self._perf = perf
        self._by_key: dict[tuple[int, int, int], JobDescriptor] = {}
        self._by_job: dict[tuple[int, int], JobDescriptor] = {}  # (job, GPU type): the hot path
        self._gpu_type = view.server_gpu_type[view.gpu_server].tolist()

    def get(self, job: int, gpu: int | None = None) -> JobDescriptor:
        """Descriptor of ``job`` on the GPU type of ``gpu`` (default: the cluster's first GPU type)."""
        gtype = 0 if gpu is None else self._gpu_type[gpu]
        desc = self._by_job.get((job, gtype))
        if desc is not None:
            return desc
        w = self._jobs
        model = int(w.model[job])
        local = max(1, math.ceil(int(w.batch_size[job]) / int(w.num_gpus[job])))
        key = (model, local, gtype)
        desc = self._by_key.get(key)
        if desc is None:
            desc = self._build(model, local, gtype)
            self._by_key[key] = desc
        self._by_job[(job, gtype)] = desc
        return desc

    def _build(self, model: int, local_batch: int, gtype: int) -> JobDescriptor:
        spec = ZOO[self._jobs.models[model]]
        gpu_type = self._view.gpu_types[gtype]
        if self._perf is not None:
            server = int(np.flatnonzero(self._view.server_gpu_type == gtype)[0])
            one_gpu = self._view.server_gpus(server)[:1]
            solo = local_batch / self._perf.iteration_time(model_index(spec.name), local_batch, one_gpu)
        else:
            solo = _ASSUMED_TFLOPS * 1e3 / max(spec.gflops, 1e-6)
        return JobDescriptor(
            params_m=spec.params_m,
            gflops=spec.gflops,
            batch=local_batch,
            solo_sps=float(solo),
            amp=spec.amp,
            gpu_type=gpu_type,
            name=spec.name,
        )
