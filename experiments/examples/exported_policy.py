"""Call an exported priority policy with torch and NumPy alone, as a scheduler of your own would, and check its
scores and decisions against marlsched's on recorded rounds (docs/guide/deployment.md, "Outside marlsched").

    marlsched record-rounds experiments/policies/default-small --skip 300 --rounds 100 --out rounds.npz \
        --workload "philly:../shared/traces/pollux-osdi21/traces/philly.csv,start=2017-11-07,end=2017-11-09,load=0.9"
    python experiments/examples/exported_policy.py experiments/policies/default-small rounds.npz

Nothing here imports marlsched: the policy folder's ``metadata.json`` names every input column and the margin,
the network file holds the rest. What a round decides, per agent (one per partition):

1. score every slot; a waiting job's score is lowered by the margin (``agents.hysteresis``); padded slots
   (``valid`` 0) score 0, above most real jobs, so mask them;
2. in score order (ties: the lower job id first), admit each job whose GPUs fit what is left of the partition's
   budget; running jobs left out are preempted, admitted waiting jobs start (on the most compact GPUs);
3. hand-off: in score order over every agent, a waiting job left out that its own partition cannot hold starts
   on the other partition with the most free GPUs, where it fits.

Exits 1 if a round differs.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch


def load_network(folder: Path) -> torch.nn.Module:
    """The folder's ``torch.export`` program (``policy.pt2``), else its TorchScript (``policy.pt``): torch reads the
    programs of its own serialisation schema only (a program of torch 2.13 loads in 2.14, not in 2.3), TorchScript
    files across releases."""
    if (folder / "policy.pt2").is_file():
        try:
            return torch.export.load(str(folder / "policy.pt2")).module()
        except Exception as e:  # another torch release's program: its schema, or a file this torch cannot parse
            print(f"{folder / 'policy.pt2'}: not readable by torch {torch.__version__} ({e}); reading policy.pt",
                  file=sys.stderr)  # fmt: skip
    return torch.jit.load(str(folder / "policy.pt"), map_location="cpu").eval()


def job_scores(net: torch.nn.Module, inputs: list[np.ndarray]) -> np.ndarray:
    """Each agent's slot scores ``(K, N)``: one batched call, the agents on the leading axis (the network's first
    output; placing networks add each slot's GPU-type scores, then the value)."""
    with torch.no_grad():
        return net(*(torch.as_tensor(a) for a in inputs))[0].numpy()


def decide(
    scores: np.ndarray, valid: np.ndarray, running: np.ndarray, ids: np.ndarray, need: np.ndarray, budget: np.ndarray,
    margin: float,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Steps 1-3 above for one round of every agent (arrays ``(K, N)``, ``budget`` ``(K,)``): the slots whose jobs
    are preempted and started."""
    key = np.where(running, scores, scores - margin)
    admitted = np.zeros_like(valid)
    free = budget.astype(np.int64).copy()
    for k in range(len(scores)):
        slots = np.flatnonzero(valid[k])
        for s in slots[np.lexsort((ids[k, slots], -key[k, slots]))]:
            if need[k, s] <= free[k]:
                admitted[k, s] = True
                free[k] -= need[k, s]
    preempted, started = valid & running & ~admitted, valid & ~running & admitted
    left = np.argwhere(valid & ~running & ~admitted)
    for k, s in left[np.lexsort((ids[tuple(left.T)], -key[tuple(left.T)]))]:
        n, others = need[k, s], free >= need[k, s]
        others[k] = False
        if free[k] >= n or not others.any():
            continue
        to = int(np.flatnonzero(others)[np.argmax(free[others])])
        free[to] -= n
        started[k, s] = True
    return preempted, started


def main(folder: str, recorded: str) -> int:
    meta = json.loads((Path(folder) / "metadata.json").read_text())
    if (decision := meta.get("agents", {}).get("decision")) is not None:
        raise SystemExit(
            f"{folder}: its agents decide through the {decision} rounds (their network's scores enter that stage's "
            "choices), not the rule written here; record-rounds and this script check priority policies that decide "
            "by the rule above (default-small, philly-small-dagger)"
        )
    if not Path(recorded).is_file():
        raise SystemExit(f"{recorded}: no such file; write it first with `marlsched record-rounds {folder} --out "
                         f"{recorded} --workload ...` (see the module docstring)")  # fmt: skip
    rec = dict(np.load(recorded))  # read once: an .npz decompresses an array on every access
    if "policy_sha256" in rec:  # the recording names the policy that made it: another folder's is no reference
        digest = hashlib.sha256((Path(folder) / "policy.pt").read_bytes()).hexdigest()
        if str(rec["policy_sha256"]) != digest:
            raise SystemExit(f"{recorded}: recorded with the policy in {rec['folder']}, not {folder}'s network; "
                             f"record this folder's rounds (marlsched record-rounds {folder} ...)")  # fmt: skip
    names = [str(n) for n in rec["inputs"]]
    placing = len(names) > 2  # a placing network's call takes the topology's arrays too
    if placing != bool(meta.get("placing")):
        raise SystemExit(
            f"{recorded}: rounds of a {'placing' if placing else 'non-placing'} network ({', '.join(names)}), but "
            f"{folder} holds a {'placing' if meta.get('placing') else 'non-placing'} one; record its own rounds"
        )
    for name in names:  # the columns the network was trained on, in its order, are the ones recorded
        want = meta.get(f"{name.removesuffix('s')}_features")
        if want is not None and want != [str(c) for c in rec[f"{name}_features"]]:
            raise SystemExit(f"{recorded}: {name} columns {list(rec[f'{name}_features'])}, the policy's {want}")
    net, margin = load_network(Path(folder)), float(meta["agents"]["hysteresis"])
    worst, differ, rounds = 0.0, 0, len(rec["now"])
    for r in range(rounds):
        scores = job_scores(net, [rec[n][r] for n in names])
        valid = rec["job_ids"][r] >= 0
        worst = max(worst, float(np.abs(scores - rec["scores"][r][:, : scores.shape[1]])[valid].max()))
        preempted, started = decide(scores, valid, rec["running"][r], rec["job_ids"][r], rec["gpus_needed"][r],
                                    rec["budget"][r], margin)  # fmt: skip
        differ += not (np.array_equal(preempted, rec["preempted"][r]) and np.array_equal(started, rec["started"][r]))
    counts = f"{int(rec['preempted'].sum())} preemptions, {int(rec['started'].sum())} starts"
    print(f"{rounds} rounds: scores within {worst:.1e} of marlsched's; decisions equal in {rounds - differ} of "
          f"{rounds} ({counts})")  # fmt: skip
    return int(differ > 0)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
