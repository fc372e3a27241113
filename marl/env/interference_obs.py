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

``online``: the agents correct the predictor as they go (:class:`interference.online.OnlineCorrection` at the
server level), as a deployed scheduler can: every round, each pair of jobs that are alone together on a server
(each on that server only, no GPU shared) is observed once per pairing with the throughput factor each runs
at, and every later estimate of a job next to one other job on a server is the corrected one. Each episode
(each :meth:`InterferenceInputs.reset`) learns from its own observations only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cluster_sim.job_descriptors import DescriptorCache
from cluster_sim.protocol import SchedulerView
from interference.base import Sharing
from interference.online import OnlineCorrection
from interference.queries import KeyedFactors

GPU_INTERFERENCE_FEATURES: tuple[str, ...] = ("holder_factor",)
CAND_INTERFERENCE_FEATURES: tuple[str, ...] = ("factor",)
_SERVER = int(Sharing.SERVER)
MAX_SERVER_MEMO = 200_000  # servers' answers kept by occupancy (cleared when full)
PREDICTOR_FILE = "interference.json"  # a policy folder's own copy of the predictor its agents consult


def parse_inputs(spec: str) -> tuple[str, str | None]:
    """``MODE[:PATH]`` (``learned:MODEL.json``, ``oracle:gavel:PATH``; ``none``: the columns read 1.0 everywhere,
    the ablation of a trained policy's inputs) as (mode, path); errors name the fix."""
    mode, _, path = spec.partition(":")
    from interference.loader import interference_modes

    if mode not in interference_modes():
        raise ValueError(
            f"interference_inputs {spec!r}: give MODE[:PATH] with MODE one of {', '.join(interference_modes())}, "
            "e.g. learned:results/interference.json (a model from `marlsched interference train`; none: no "
            "co-location predicted to slow anyone)"
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
    co-location key (:class:`~interference.queries.KeyedFactors`); ``online``: corrected from what the agents
    observe (see the module docstring)."""

    def __init__(self, spec: str, online: bool = False) -> None:
        from interference.loader import load_interference_model

        mode, path = parse_inputs(spec)
        if mode == "learned" and (path is None or not Path(path).is_file()):
            raise FileNotFoundError(
                f"interference_inputs {spec!r}: no predictor file {path!r}; make one with `marlsched interference "
                "train --data gavel:../shared/traces/gavel/simulation_throughputs.json --seed 0 --out MODEL`"
            )
        self.spec = spec
        self.online = bool(online)
        self.base = self.model = load_interference_model(mode, path)
        self._keyed = KeyedFactors(self.model)
        self._observed: set[tuple[int, int]] = set()
        self._desc: DescriptorCache | None = None
        self._codes: dict[tuple[int, int], int] = {}
        self._by_server: dict[tuple[int, tuple[int, ...]], dict[int, float]] = {}
        self._last_holders: tuple[np.ndarray, np.ndarray] | None = None  # (holders, factors) of the last call

    def reset(self, view: SchedulerView) -> None:
        self._desc = DescriptorCache(view.jobs, view.topo, getattr(view, "perf", None))
        self._gpu_type = np.asarray(view.topo.server_gpu_type)[np.asarray(view.topo.gpu_server)].tolist()
        self._codes.clear()
        self._forget()
        if self.online:  # each episode learns from its own observations only
            self.model = OnlineCorrection(self.base, level=Sharing.SERVER)
            self._keyed = KeyedFactors(self.model, memoise=True)  # forgotten at every observation
            self._observed.clear()

    def _forget(self) -> None:
        """Drop every kept answer (the model's answers changed)."""
        self._keyed.forget()
        self._by_server.clear()
        self._last_holders = None

    def learn(self, view: SchedulerView) -> int:
        """Online: observe each pair of jobs alone together on a server (each on that server only, no GPU
        shared), once per pairing, with the factor each runs at; returns how many pairs were new."""
        if not self.online:
            return 0
        gpu_job = np.asarray(view.gpu_job)
        held = np.flatnonzero(gpu_job >= 0)
        if not len(held):
            return 0
        guest = getattr(view, "gpu_guest", None)
        server = np.asarray(view.topo.gpu_server)[held]
        n = len(view.jobs)
        pairs = np.unique(server * n + gpu_job[held])  # (server, job), by server
        srv, job = pairs // n, pairs % n
        alone = np.bincount(job, minlength=n)[job] == 1  # the job runs on this server only
        count = np.bincount(srv)[srv]
        if guest is not None and (np.asarray(guest) >= 0).any():  # a server with a shared GPU is no pair
            shared = np.asarray(view.topo.gpu_server)[np.flatnonzero(np.asarray(guest) >= 0)]
            alone &= ~np.isin(srv, shared)
        two = np.flatnonzero((count == 2) & alone)
        first = two[:-1][(srv[two[:-1]] == srv[two[1:]])]  # the first job of each server with a pair
        factor = view.job_factor
        new = 0
        for i in first.tolist():
            a, b, s = int(job[i]), int(job[i + 1]), int(srv[i])
            if (a, b) in self._observed:
                continue
            self._observed.add((a, b))
            gpu = int(view.topo.server_gpus(s)[0])
            da, db = self._desc.get(a, gpu), self._desc.get(b, gpu)
            self.model.observe(da, db, float(np.clip(factor[a], 1e-6, 1.0)))
            self.model.observe(db, da, float(np.clip(factor[b], 1e-6, 1.0)))
            new += 1
        if new:
            self._forget()
        return new

    def _code(self, job: int, gpu: int) -> int:
        key = (job, self._gpu_type[gpu])
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = self._keyed.code(self._desc.get(job, gpu))
        return code

    def holder_factors(self, view: SchedulerView, holder: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """The predicted factor of the job holding each GPU of the grid (``holder``: job id or -1; ``gpu``: the
        GPU's id or -1, both ``(..., G)`` with one server per row) next to the other jobs on its servers; 1.0
        where no job holds the GPU. A server's answers are kept by who holds it (they change only on events):
        a server whose holders are as at the last call, none of them on another server too, keeps its row."""
        rows_h = holder.reshape(-1, holder.shape[-1])
        rows_g = gpu.reshape(-1, gpu.shape[-1])
        held = rows_h >= 0
        # a job held on fewer GPUs of a server than it has runs on other servers too: its row is never kept
        same = (rows_h[:, :, None] == rows_h[:, None, :]).sum(axis=-1)
        spans = (held & (view.jobs.num_gpus[np.where(held, rows_h, 0)] > same)).any(axis=1)
        last = self._last_holders
        if last is not None and last[0].shape == rows_h.shape:
            todo = np.flatnonzero(spans | (rows_h != last[0]).any(axis=1))
            out = last[1].copy()
        else:
            todo = np.arange(len(rows_h))
            out = np.ones(rows_h.shape)
        servers_of: dict[int, list[int]] = {}
        occupants: dict[int, tuple[int, ...]] = {}
        for r in np.flatnonzero(spans).tolist():  # the servers of every job over several of them
            occ = occupants[r] = tuple(dict.fromkeys(h for h in rows_h[r].tolist() if h >= 0))
            for h in occ:
                servers_of.setdefault(h, []).append(r)
        for r in todo.tolist():
            row = rows_h[r]
            occ = occupants.get(r)
            if occ is None:
                occ = tuple(dict.fromkeys(h for h in row.tolist() if h >= 0))
            if not occ:
                out[r] = 1.0
                continue
            first = int(rows_g[r, 0])
            sig = (self._gpu_type[first], occ)
            factors = self._by_server.get(sig)
            if factors is None:
                keys = []
                for h in occ:
                    if len(servers_of.get(h, ())) > 1:  # a job over several servers: its neighbours on all of them
                        nbrs = {x for q in servers_of[h] for x in occupants[q] if x != h}
                    else:
                        nbrs = {x for x in occ if x != h}
                    keys.append((self._code(h, first), *sorted(3 * self._code(x, first) + _SERVER for x in nbrs)))
                factors = dict(zip(occ, self._keyed(keys).tolist(), strict=True))
                if not spans[r]:  # keep only what this server alone decides
                    if len(self._by_server) > MAX_SERVER_MEMO:
                        self._by_server.clear()
                    self._by_server[sig] = factors
            out[r] = 1.0
            out[r, held[r]] = [factors[h] for h in row[held[r]].tolist()]
        self._last_holders = (rows_h.copy(), out)
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
        code = self._code
        for k in range(k_n):
            ids = job_ids[k]
            valid = np.flatnonzero(ids >= 0)
            if not len(valid):
                continue
            srv, free, typ = server_gpus[k].reshape(-1), server_free[k].reshape(-1), server_type[k].reshape(-1)
            real = srv >= 0
            srv, free, typ = srv[real], free[real], typ[real]
            size = topo.server_num_gpus[srv]
            slots = list(zip(valid.tolist(), ids[valid].tolist(), need[ids[valid]].tolist(), strict=True))
            for t in range(t_n):
                on_t = typ == t
                # GPUs -> (first GPU, holders, their sorted neighbour codes) of the server a job of that size gets
                target: dict[int, tuple[int, dict[int, int], tuple[int, ...]] | None] = {}
                for i, j, g in slots:
                    tgt = target.get(g, False)
                    if tgt is False:
                        fits = np.flatnonzero(on_t & (free >= g) & (size > g))
                        tgt = None
                        if len(fits):
                            s_ = int(srv[fits[np.lexsort((srv[fits], free[fits]))[0]]])
                            gpus = topo.server_gpus(s_)
                            first: dict[int, int] = {}
                            for x, h in zip(gpus.tolist(), gpu_job[gpus].tolist(), strict=True):
                                if h >= 0:
                                    first.setdefault(int(h), int(x))
                            nbr = {h: 3 * code(h, x) + _SERVER for h, x in first.items()}
                            tgt = (int(gpus[0]), nbr, tuple(sorted(nbr.values())))
                        target[g] = tgt
                    if tgt is None:
                        continue
                    nbrs = tgt[2] if j not in tgt[1] else tuple(sorted(c for h, c in tgt[1].items() if h != j))
                    if not nbrs:
                        continue
                    keys.append((code(j, tgt[0]), *nbrs))
                    where.append((k, i, t))
        if keys:
            factors = self._keyed(keys)
            idx = np.array(where, dtype=np.int64)
            out[idx[:, 0], idx[:, 1], idx[:, 2]] = factors
        return out
