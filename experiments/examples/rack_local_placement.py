"""A placement strategy of your own, registered under a name: ``marlsched --plugin THIS_FILE``.

``rack-local`` puts a job into the rack with the fewest free GPUs that still holds it whole (keeping
emptier racks for larger jobs), consolidated inside that rack; a job that fits no single rack falls back
to the built-in ``consolidate``. It then works wherever a built-in placement name does:

    marlsched --plugin experiments/examples/rack_local_placement.py simulate --cluster small-mixed \
        --workload synthetic:2000,window_load=1.0 --policy fifo+rack-local,fifo+consolidate
"""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool, consolidate, register_placement
from cluster_sim.protocol import SchedulerView


def rack_local(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    pool = free if free is not None else FreePool(view)
    if n > pool.num_free:
        return None
    topo = pool.topo
    fits = np.flatnonzero(pool.rack_free[: topo.num_racks] >= n)
    if not len(fits):
        return consolidate(view, job, n, pool)
    rack = int(fits[np.argmin(pool.rack_free[fits])])
    first = int(topo.rack_first_server[rack])
    servers = np.arange(first, first + int(topo.rack_num_servers[rack]))
    picked: list[np.ndarray] = []
    for s in servers[np.argsort(-pool.server_free[servers], kind="stable")].tolist():  # fullest-free first
        gpus = view.topo.server_gpus(s)
        gpus = gpus[pool.gpu_job[gpus] < 0][: n - sum(len(p) for p in picked)]
        picked.append(gpus)
        if sum(len(p) for p in picked) == n:
            break
    return np.sort(np.concatenate(picked)).astype(np.int32)


register_placement("rack-local", rack_local)
