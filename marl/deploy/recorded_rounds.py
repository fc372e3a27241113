"""Real inputs of a priority policy's network, and what marlsched decided from them, written to one ``.npz``.

An operator who calls an exported network (``policy.pt2`` or ``policy.pt``) from a scheduler of their own has
to build its inputs and turn its scores into decisions. This file is the reference to check both against:
every recorded round holds the arrays the network was given, its scores, and the jobs marlsched preempted and
started, slot by slot. ``experiments/examples/exported_policy.py`` reads it with torch and NumPy alone
(docs/guide/deployment.md, "Outside marlsched").

Keys of the file (``R`` rounds, ``K`` agents, ``N`` job slots per agent):

- every observation array of the network's inputs, stacked: ``jobs`` ``(R, K, N, Fj)``, ``parts``
  ``(R, K, K, Fp)``, and for placing agents ``gpus``, ``servers``, ``racks``, ``server_type``, ``cands``;
- ``inputs``: their names in the network's argument order; ``<name>_features``: each array's column names;
- ``scores`` ``(R, K, N)`` (placing agents: ``(R, K, N * (1 + T))``, then the type scores slot by slot);
- ``job_ids`` ``(R, K, N)`` (-1: a padded slot), ``running`` ``(R, K, N)``, ``gpus_needed`` ``(R, K, N)``;
- ``budget`` ``(R, K)``: GPUs of each partition the agents may hand out (its GPUs less those held by jobs
  larger than any partition, which the coordinator runs);
- ``preempted`` and ``started`` ``(R, K, N)``: the slot's job was preempted / started this round;
- ``hysteresis``: the margin a waiting job's score is lowered by; ``now`` ``(R,)``: each round's time (s).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.protocol import Preempt, Start

__all__ = ["record_rounds"]


class _Recorded(Exception):
    """Raised from the policy once the rounds asked for are written: the rest of the run is not needed."""


def policy_digest(folder: str | Path) -> str:
    """The SHA-256 of a folder's network file (``policy.pt``): which policy a recording was made with."""
    import hashlib

    return hashlib.sha256((Path(folder) / "policy.pt").read_bytes()).hexdigest()


def record_rounds(
    folder: str | Path,
    cluster: str,
    workload: str,
    out: str | Path,
    *,
    rounds: int = 50,
    skip: int = 0,
    seed: int = 0,
    **settings: Any,
) -> dict[str, int]:
    """Run the priority policy of ``folder`` on ``cluster`` and ``workload`` (``simulate``'s specs; ``settings``
    go to :func:`~cluster_sim.build.build_simulator`: ``interference=``, ``restart_cost=`` ...) and write to
    ``out`` (``.npz``, atomically) ``rounds`` rounds in which the agents had a choice, after the first ``skip``
    of them (a cluster filling up preempts nothing). Returns the counts written: rounds, preemptions, starts."""
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy
    from cluster_sim.results import write_atomic
    from marl.env.priority_agents import PriorityAgents
    from marl.env.priority_features import JOB_FEATURES, PART_FEATURES
    from marl.env.topology_obs import topology_features
    from marl.models.priority_net import PLACING_INPUTS

    if rounds < 1 or skip < 0:
        raise ValueError(f"rounds {rounds}, skip {skip}: record at least 1 round, skip none or more")
    sched = get_policy(f"marl:{folder}")
    if type(sched) is not PriorityAgents:
        raise ValueError(
            f"{folder}: its agents decide through {type(sched).__name__}, not the priority agents' rule; only "
            "priority policies (default-small, default-imitation, philly-small, philly-small-dagger) are recorded"
        )
    rows: list[dict[str, np.ndarray]] = []
    apply = sched.apply
    seen = 0

    def recording(view, scores):
        nonlocal seen
        obs = sched.last_obs
        decisions = apply(view, scores)
        seen += obs is not None
        if obs is not None and seen > skip:
            ids = obs.job_ids
            preempted = {d.job for d in decisions if isinstance(d, Preempt)}
            started = {d.job for d in decisions if isinstance(d, Start)}
            row = {k: np.array(v) for k, v in obs.arrays.items()}
            row.update(
                scores=np.asarray(scores, dtype=np.float32).reshape(len(ids), -1),
                job_ids=ids.copy(),
                running=obs.running.copy(),
                gpus_needed=np.where(ids >= 0, np.asarray(view.jobs.num_gpus)[np.maximum(ids, 0)], 0),
                budget=sched.part_gpus - obs.foreign_gpus,
                preempted=np.isin(ids, list(preempted)) & (ids >= 0),
                started=np.isin(ids, list(started)) & (ids >= 0),
                now=np.float64(view.now),
            )
            rows.append(row)
            if len(rows) == rounds:
                raise _Recorded
        return decisions

    sched.apply = recording
    with contextlib.suppress(_Recorded):
        build_simulator(cluster, workload, seed=seed, **settings).run(sched)
    if not rows:
        raise ValueError(
            f"{workload} on {cluster}: the agents had a choice in {seen} rounds, none after the {skip} skipped; "
            "skip fewer or use a busier workload"
        )
    names = PLACING_INPUTS if sched.grid is not None else ("jobs", "parts")
    arrays = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    arrays["inputs"] = np.array(names)
    columns = {"jobs": JOB_FEATURES, "parts": PART_FEATURES}
    topology = topology_features(sched.layout.interference)
    columns.update({f"{k.removesuffix('_features')}s": v for k, v in topology.items()})
    for name in names:
        arrays[f"{name}_features"] = np.array(columns.get(name, ()), dtype=str)  # server_type: one-hot over types
    arrays["hysteresis"] = np.float64(sched.hysteresis)
    arrays["folder"] = np.array(str(Path(folder).resolve()))  # which policy made them: a check of another is said
    arrays["policy_sha256"] = np.array(policy_digest(folder))
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_atomic(Path(out), buf.getvalue())
    return {
        "rounds": len(rows),
        "preemptions": int(arrays["preempted"].sum()),
        "starts": int(arrays["started"].sum()),
    }
