"""What placing agents know of co-location: an interference predictor's estimates where jobs share servers.

Jobs on different GPUs of one server slow each other (PCIe, host memory, CPU: :class:`interference.base.Sharing`
``SERVER``); the agents do not see the simulator's truth but ask a predictor, as a deployed scheduler would
(``marlsched interference train`` fits one on measured pairs). Two columns join the topology observation
(:mod:`marl.env.topology_obs`) when a predictor is given:

- GPU level, ``holder_factor``: the predicted throughput factor (1.0 = as fast as alone) of the job holding the
  GPU, next to the other jobs on its servers;
- candidate level, ``factor``: the predicted factor of a slot's job if it started on the type now, next to the
  jobs of the server the compact placement would give it (the fullest server of the type with room for it).
  A job that needs whole servers, or finds no server with room, reads 1.0.

Only descriptors enter (model facts, batch size, solo speed on the type), never a job's duration.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cluster_sim.job_descriptors import DescriptorCache
from cluster_sim.protocol import SchedulerView
from interference.base import Sharing
from interference.queries import KeyedFactors

GPU_INTERFERENCE_FEATURES: tuple[str, ...] = ("holder_factor",)
CAND_INTERFERENCE_FEATURES: tuple[str, ...] = ("factor",)
_SERVER = int(Sharing.SERVER)
MAX_SERVER_MEMO = 200_000  # servers' answers kept by occupancy (cleared when full)
PREDICTOR_FILE = "interference.json"  # a policy folder's own copy of the predictor its agents consult


def parse_inputs(spec: str) -> tuple[str, str | None]:
    """``MODE[:PATH]`` (``learned:MODEL.json``, ``oracle:gavel:PATH``) as (mode, path); errors name the fix."""
    mode, _, path = spec.partition(":")
    from interference.loader import interference_modes

    if mode not in interference_modes() or mode == "none":
        raise ValueError(
            f"interference_inputs {spec!r}: give MODE[:PATH] with MODE one of "
            f"{', '.join(m for m in interference_modes() if m != 'none')}, e.g. learned:results/interference.json "
            "(a model from `marlsched interference train`)"
        )
    return mode, path or None


def resolve_inputs(spec: str | None, folder: str | Path) -> str | None:
    """A policy folder's recorded ``interference_inputs``: a ``learned:`` model path relative to the folder."""
    if spec is None:
        return None
    mode, path = parse_inputs(spec)
    if mode == "learned" and path is not None and not Path(path).is_absolute():
        return f"{mode}:{Path(folder) / path}"
    return spec


class InterferenceInputs:
    """The predictor the agents consult (``spec``: ``MODE[:PATH]``, see :func:`parse_inputs`), memoised by
    co-location key (:class:`~interference.queries.KeyedFactors`)."""

    def __init__(self, spec: str) -> None:
        from interference.loader import load_interference_model

        mode, path = parse_inputs(spec)
        if mode == "learned" and (path is None or not Path(path).is_file()):
            raise FileNotFoundError(
                f"interference_inputs {spec!r}: no predictor file {path!r}; make one with `marlsched interference "
                "train --data gavel:../shared/traces/gavel/simulation_throughputs.json --seed 0 --out MODEL`"
            )
        self.spec = spec
        self.model = load_interference_model(mode, path)
        self._keyed = KeyedFactors(self.model)
        self._desc: DescriptorCache | None = None
        self._codes: dict[tuple[int, int], int] = {}
        self._by_server: dict[tuple[int, tuple[int, ...]], dict[int, float]] = {}

    def reset(self, view: SchedulerView) -> None:
        self._desc = DescriptorCache(view.jobs, view.topo, getattr(view, "perf", None))
        self._gpu_type = np.asarray(view.topo.server_gpu_type)[np.asarray(view.topo.gpu_server)].tolist()
        self._codes.clear()
        self._by_server.clear()

    def _code(self, job: int, gpu: int) -> int:
        key = (job, self._gpu_type[gpu])
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = self._keyed.code(self._desc.get(job, gpu))
        return code

    def holder_factors(self, view: SchedulerView, holder: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """The predicted factor of the job holding each GPU of the grid (``holder``: job id or -1; ``gpu``: the
        GPU's id or -1, both ``(..., G)`` with one server per row) next to the other jobs on its servers; 1.0
        where no job holds the GPU. A server's answers are kept by who holds it (they change only on events)."""
        rows_h = holder.reshape(-1, holder.shape[-1])
        rows_g = gpu.reshape(-1, gpu.shape[-1])
        out = np.ones(rows_h.shape)
        servers_of: dict[int, list[int]] = {}
        occupants: list[tuple[int, ...]] = []
        for r, row in enumerate(rows_h.tolist()):
            occ = tuple(dict.fromkeys(h for h in row if h >= 0))
            occupants.append(occ)
            for h in occ:
                servers_of.setdefault(h, []).append(r)
        for r, occ in enumerate(occupants):
            if not occ:
                continue
            first = int(rows_g[r, 0])
            sig = (self._gpu_type[first], occ)
            factors = self._by_server.get(sig)
            if factors is None:
                keys = []
                for h in occ:
                    if len(servers_of[h]) > 1:  # a job over several servers: its neighbours on all of them
                        nbrs = {x for q in servers_of[h] for x in occupants[q] if x != h}
                    else:
                        nbrs = {x for x in occ if x != h}
                    keys.append((self._code(h, first), *sorted(3 * self._code(x, first) + _SERVER for x in nbrs)))
                factors = dict(zip(occ, self._keyed(keys).tolist(), strict=True))
                if all(len(servers_of[h]) == 1 for h in occ):  # keep only what this server alone decides
                    if len(self._by_server) > MAX_SERVER_MEMO:
                        self._by_server.clear()
                    self._by_server[sig] = factors
            row = rows_h[r]
            held = row >= 0
            out[r, held] = [factors[h] for h in row[held].tolist()]
        return out.reshape(holder.shape)

    def candidate_factors(
        self,
        view: SchedulerView,
        server_gpus: np.ndarray,
        server_free: np.ndarray,
        server_type: np.ndarray,
        job_ids: np.ndarray,
    ) -> np.ndarray:
        """``(K, N, T)`` predicted factors of each slot's job on each type. ``server_gpus``/``server_free``/
        ``server_type``: each partition's servers on the grid ``(K, R, S)`` (global id or -1), their free GPUs
        and their type index."""
        topo, gpu_job = view.topo, np.asarray(view.gpu_job)
        need = view.jobs.num_gpus
        k_n, n_n = job_ids.shape
        t_n = len(topo.gpu_types)
        out = np.ones((k_n, n_n, t_n))
        keys: list[tuple[int, ...]] = []
        where: list[tuple[int, int, int]] = []
        for k in range(k_n):
            ids = job_ids[k]
            valid = np.flatnonzero(ids >= 0)
            if not len(valid):
                continue
            srv, free, typ = server_gpus[k].reshape(-1), server_free[k].reshape(-1), server_type[k].reshape(-1)
            real = srv >= 0
            srv, free, typ = srv[real], free[real], typ[real]
            size = topo.server_num_gpus[srv]
            for t in range(t_n):
                on_t = typ == t
                target: dict[int, tuple[int, list[tuple[int, int]]] | None] = {}  # GPUs -> (GPU, neighbours)
                for i in valid.tolist():
                    j = int(ids[i])
                    g = int(need[j])
                    if g not in target:
                        fits = np.flatnonzero(on_t & (free >= g) & (size > g))
                        if not len(fits):
                            target[g] = None
                        else:
                            s = int(srv[fits[np.lexsort((srv[fits], free[fits]))[0]]])
                            gpus = topo.server_gpus(s)
                            first: dict[int, int] = {}
                            for x, h in zip(gpus.tolist(), gpu_job[gpus].tolist(), strict=True):
                                if h >= 0:
                                    first.setdefault(int(h), int(x))
                            target[g] = (int(gpus[0]), [(h, 3 * self._code(h, x) + _SERVER) for h, x in first.items()])
                    tgt = target[g]
                    nbrs = sorted(c for h, c in tgt[1] if h != j) if tgt is not None else []
                    if not nbrs:
                        continue
                    keys.append((self._code(j, tgt[0]), *nbrs))
                    where.append((k, i, t))
        if keys:
            factors = self._keyed(keys)
            idx = np.array(where, dtype=np.int64)
            out[idx[:, 0], idx[:, 1], idx[:, 2]] = factors
        return out
