"""Loader for Gavel's Philly-derived per-VC traces (``gavel/traces/msr/seed=N/<vc>.trace``).

Seven tab-separated columns, no header: ``job_type, command, num_steps_arg, needs_data_dir, total_steps,
arrival_time, scale_factor``. A trace gives steps, not time: the duration is ``total_steps`` divided by
the job's isolated throughput (steps/s) on one worker type (V100 by default) from Gavel's measured
``simulation_throughputs.json``, whose keys are ``"('<job_type>', <scale_factor>)"`` and whose isolated
figure is the ``"null"`` entry.

Gavel measured multi-worker throughputs only for ResNet-18/50, Transformer and LM at 2, 4 and 8 workers,
but the traces also hold other types and scale factors (A3C on 8 GPUs, anything on 16 or 32). For those
the throughput is extrapolated linearly from the largest measured scale factor below: Gavel's figure is
aggregate steps/s over all workers, each with its own per-worker batch, so it grows with the number of
workers. ``meta["extrapolated_jobs"]`` counts the jobs that needed it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from cluster_sim.model_zoo import MODEL_NAMES, ZOO, model_index
from cluster_sim.traces.table import TraceFormatError, float_column, int_column, open_trace, require
from cluster_sim.traces.window import check_window_options, window
from cluster_sim.workload import Workload

GAVEL_COLUMNS: tuple[str, ...] = (
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_time",
    "scale_factor",
)
THROUGHPUTS_FILE = "simulation_throughputs.json"
_KEY = re.compile(r"^\('(.*)', (\d+)\)$")
_BATCH = re.compile(r"\(batch size (\d+)\)")


def find_throughputs(trace_path: Path) -> Path:
    """The ``simulation_throughputs.json`` in the nearest folder above ``trace_path`` that has one."""
    for folder in trace_path.resolve().parents:
        candidate = folder / THROUGHPUTS_FILE
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"no {THROUGHPUTS_FILE} in any folder above {trace_path}; pass throughputs_path= "
        "(Gavel's scheduler/simulation_throughputs.json) to load_gavel"
    )


def read_isolated_throughputs(path: Path, worker_type: str) -> dict[tuple[str, int], float]:
    """``{(job_type, scale_factor): isolated steps/s}`` for one worker type of a Gavel throughput file."""
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    if worker_type not in raw:
        raise TraceFormatError(path, None, f"no worker type {worker_type!r}; the file has: {', '.join(raw)}")
    out: dict[tuple[str, int], float] = {}
    for key, entry in raw[worker_type].items():
        m = _KEY.match(key)
        if m is None or not isinstance(entry, dict) or "null" not in entry:
            raise TraceFormatError(
                path, None, f"{worker_type} key {key!r} is not \"('<job type>', <scale factor>)\" with a null entry"
            )
        out[(m.group(1), int(m.group(2)))] = float(entry["null"])
    return out


def _zoo_model(job_type: str) -> str | None:
    for name, spec in ZOO.items():
        g = spec.gavel_name
        if g is not None and (job_type == g or job_type.startswith(g + " ")):
            return name
    return None


def _throughput(
    table: dict[tuple[str, int], float], job_type: str, sf: int, path: Path, line: int, tp_path: Path
) -> tuple[float, bool]:
    """Isolated steps/s of ``job_type`` on ``sf`` workers, and whether it was extrapolated."""
    if table.get((job_type, sf), 0.0) > 0:
        return table[(job_type, sf)], False
    measured = sorted(s for (jt, s), v in table.items() if jt == job_type and s <= sf and v > 0)
    if not measured:
        raise TraceFormatError(
            path, line, f"job_type {job_type!r} has no positive isolated throughput at any scale <= {sf} in {tp_path}"
        )
    s = measured[-1]
    return table[(job_type, s)] * sf / s, True


def _read_trace_file(path: Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    with open(path, encoding="utf-8") as f:
        raw = f.read().split("\n")
    lines = [i + 1 for i, r in enumerate(raw) if r.strip()]
    rows = [raw[i - 1].split("\t") for i in lines]
    for line, r in zip(lines, rows, strict=True):
        if len(r) != len(GAVEL_COLUMNS):
            raise TraceFormatError(
                path,
                line,
                f"expected {len(GAVEL_COLUMNS)} tab-separated fields ({', '.join(GAVEL_COLUMNS)}), found {len(r)}",
            )
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in GAVEL_COLUMNS]
    return {c: np.array(v, dtype=str) for c, v in zip(GAVEL_COLUMNS, columns, strict=True)}, np.array(lines)


def load_gavel(
    path: str | Path,
    *,
    time_range: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    arrival_scale: float = 1.0,
    seed: int = 0,
    throughputs_path: str | Path | None = None,
    worker_type: str = "v100",
) -> Workload:
    """Jobs of one ``.trace`` file (tenant = its stem) or of every ``*.trace`` in a folder, by arrival.

    Model = the zoo model whose ``gavel_name`` prefixes ``job_type``. Gavel's batch size is per worker, so
    the global batch = the batch in ``job_type`` x ``scale_factor`` (types without one, A3C and CycleGAN,
    use the zoo default x ``scale_factor``). Each VC file counts time from its own first job, so a merged
    folder lines all VCs up at time 0 rather than on Philly's global clock. Ties keep file order, files in
    name order. ``seed`` is unused (the trace names its models) and accepted for a uniform signature.
    ``throughputs_path`` defaults to the nearest ``simulation_throughputs.json`` above ``path``.
    """
    del seed
    check_window_options(time_range, max_jobs, arrival_scale)
    p = open_trace(path, "gavel")
    files = sorted(p.glob("*.trace")) if p.is_dir() else [p]
    if not files:
        raise FileNotFoundError(f"{p}: folder has no *.trace files")
    tp_path = Path(throughputs_path) if throughputs_path is not None else find_throughputs(p)
    table = read_isolated_throughputs(open_trace(tp_path, "gavel throughputs"), worker_type)

    parts = []
    for t, f in enumerate(files):
        cols, lines = _read_trace_file(f)
        steps = float_column(cols["total_steps"], "total_steps", lines, f)
        arrival = float_column(cols["arrival_time"], "arrival_time", lines, f)
        sf = int_column(cols["scale_factor"], "scale_factor", lines, f)
        require(steps > 0, "must be > 0", cols["total_steps"], "total_steps", lines, f)
        require(arrival >= 0, "must be >= 0", cols["arrival_time"], "arrival_time", lines, f)
        require(sf >= 1, "must be >= 1", cols["scale_factor"], "scale_factor", lines, f)
        types, first, inv = np.unique(cols["job_type"], return_index=True, return_inverse=True)
        model_of, batch_of = np.empty(len(types), np.int16), np.empty(len(types), np.int64)
        for k, jt in enumerate(types):
            name = _zoo_model(str(jt))
            if name is None:
                known = ", ".join(s.gavel_name for s in ZOO.values() if s.gavel_name)
                raise TraceFormatError(
                    f, int(lines[first[k]]), f"job_type {str(jt)!r} matches no model-zoo gavel_name ({known})"
                )
            m = _BATCH.search(str(jt))
            model_of[k] = model_index(name)
            batch_of[k] = int(m.group(1)) if m else ZOO[name].default_batch
        pairs, pair_first, pair_inv = np.unique(np.stack([inv, sf]), axis=1, return_index=True, return_inverse=True)
        thr = np.empty(pairs.shape[1])
        extrapolated = np.zeros(pairs.shape[1], dtype=bool)
        for k in range(pairs.shape[1]):
            thr[k], extrapolated[k] = _throughput(
                table, str(types[pairs[0, k]]), int(pairs[1, k]), f, int(lines[pair_first[k]]), tp_path
            )
        pair_inv = pair_inv.reshape(-1)
        parts.append(
            {
                "arrival": arrival,
                "num_gpus": sf,
                "duration": steps / thr[pair_inv],
                "model": model_of[inv],
                "batch_size": batch_of[inv] * sf,
                "tenant": np.full(len(sf), t, dtype=np.int16),
                "extrapolated": extrapolated[pair_inv],
            }
        )
    cat = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
    order = np.argsort(cat["arrival"], kind="stable")
    w = Workload(
        arrival=cat["arrival"][order],
        num_gpus=cat["num_gpus"][order].astype(np.int32),
        duration=cat["duration"][order],
        model=cat["model"][order].astype(np.int16),
        batch_size=cat["batch_size"][order].astype(np.int32),
        tenant=cat["tenant"][order],
        models=MODEL_NAMES,
        tenants=tuple(f.stem for f in files),
        source="gavel",
        meta={
            "path": str(p),
            "throughputs_path": str(tp_path),
            "worker_type": worker_type,
            "extrapolated_jobs": int(cat["extrapolated"].sum()),
        },
    )
    return window(w, time_range=time_range, max_jobs=max_jobs, arrival_scale=arrival_scale)
