"""A workload format of your own, registered as a kind: ``marlsched --plugin THIS_FILE``.

``jobs:PATH`` reads a CSV with one job per line, ``arrival_s,gpus,duration_s[,tenant]``, the simplest
trace a cluster operator can export. Every common option (``max_jobs``, ``start``, ``end`` in seconds: it records
no dates, ``arrival_scale``, ``load``) works on it, and ``model=NAME`` sets the model of every job:

    marlsched --plugin experiments/examples/jobs_csv_workload.py simulate --cluster small \
        --workload jobs:my_jobs.csv,model=resnet50-imagenet --policy fifo,tiresias
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from cluster_sim.model_rules import default_batch_sizes
from cluster_sim.model_zoo import MODEL_NAMES
from cluster_sim.workload import Workload
from cluster_sim.workload_spec import register_workload_kind


def load_jobs_csv(arg: str, *, seed: int, cluster_gpus: int, model: str = "resnet50-imagenet") -> Workload:
    if model not in MODEL_NAMES:
        raise ValueError(f"model={model!r} is not in the model zoo; choose one of {', '.join(MODEL_NAMES)}")
    rows = []
    with open(Path(arg), newline="") as f:
        for line, row in enumerate(csv.reader(f), start=1):
            if not row or row[0].startswith("#") or row[0] == "arrival_s":
                continue
            try:
                rows.append((float(row[0]), int(row[1]), float(row[2]), row[3] if len(row) > 3 else "default"))
            except (ValueError, IndexError):
                raise ValueError(f"{arg}:{line}: expected arrival_s,gpus,duration_s[,tenant], got {row}") from None
            if rows[-1][1] < 1 or not rows[-1][2] > 0:  # a job cancelled before it ran: drop its line
                raise ValueError(f"{arg}:{line}: a job needs gpus >= 1 and duration_s > 0, got {row}; drop the line")
    rows.sort(key=lambda r: r[0])
    tenants = sorted({r[3] for r in rows})
    gpus = np.array([r[1] for r in rows], dtype=np.int32)
    models = np.full(len(rows), MODEL_NAMES.index(model), dtype=np.int16)
    return Workload(
        arrival=np.array([r[0] for r in rows]),
        num_gpus=gpus,
        duration=np.array([r[2] for r in rows]),
        model=models,
        batch_size=default_batch_sizes(models, gpus),
        tenant=np.array([tenants.index(r[3]) for r in rows], dtype=np.int16),
        models=MODEL_NAMES,
        tenants=tuple(tenants),
        source="jobs-csv",
    )


register_workload_kind("jobs", load_jobs_csv, syntax="jobs:PATH.csv[,model=NAME]", options={"model": str})
