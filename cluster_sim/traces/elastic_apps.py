"""Duration traces made elastic: each job trains one of Pollux's measured applications for its trace length.

A trace such as Philly's gives each job a GPU count and a run time, but no training target, so an elastic
scheduler has nothing to resize. :func:`with_applications` gives every job an application whose
measurements (step times per placement and per-GPU batch, gradient statistics per epoch) say how it
scales and how its statistical efficiency moves with the batch size. The job keeps its trace length: it
trains its application on a dataset scaled so that its requested GPUs, placed tightly at its batch size,
take exactly its trace duration (the simulator's per-job scale, :mod:`cluster_sim.simulator`). A rigid
scheduler therefore sees the same workload as before; an elastic one may run it faster or slower.

The application is drawn by a seeded rule that never looks at the duration or GPU-time (among the
applications that can run on the job's GPU count, uniformly), so no estimator learns a job's size from
its application, unlike Pollux's own assignment by GPU-time bucket. The batch size is the application's
smallest, raised to its smallest per-GPU batch on every requested GPU. A job asking for more GPUs than
any application can use keeps its model and stays rigid.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from cluster_sim.model_zoo import MODEL_NAMES
from cluster_sim.pollux_apps import load_application
from cluster_sim.traces.pollux import APPLICATION_MODELS
from cluster_sim.workload import Workload


def with_applications(workload: Workload, traces_dir: str | Path, *, seed: int) -> Workload:
    """``workload`` with each job's model and batch size replaced by a Pollux application's (see above)."""
    tdir = Path(traces_dir)
    if not tdir.is_dir():
        raise FileNotFoundError(
            f"apps={traces_dir}: no such folder; give the folder of Pollux's application measurements "
            "(pollux-osdi21/traces, one sub-folder per application)"
        )
    names = sorted(APPLICATION_MODELS)
    apps = [load_application(tdir, a) for a in names]
    limit = np.array([a.max_batch_size // a.min_local_bsz for a in apps])
    # the workload's own model names, then the applications' (as the zoo names them)
    models = tuple(dict.fromkeys([*workload.models, *MODEL_NAMES]))
    code = {m: i for i, m in enumerate(models)}
    remap = np.array([code[m] for m in workload.models], dtype=np.int16)
    model = remap[workload.model].astype(np.int16)
    batch = workload.batch_size.astype(np.int32).copy()
    rng = np.random.default_rng([int(seed), 0xE1A5])
    draws = rng.random(len(workload))
    for j, n in enumerate(workload.num_gpus.tolist()):
        fits = np.flatnonzero(limit >= n)
        if not len(fits):
            continue
        a = int(fits[min(int(draws[j] * len(fits)), len(fits) - 1)])
        app = apps[a]
        model[j] = code[APPLICATION_MODELS[names[a]]]
        batch[j] = min(max(app.init_batch_size, app.min_local_bsz * int(n)), app.max_batch_size)
    meta = {**workload.meta, "pollux_traces": str(tdir.resolve()), "apps_seed": int(seed), "app_lengths": "duration"}
    return replace(workload, model=model, batch_size=batch, models=models, meta=meta)
