"""How much the priority agents' score can win, and how much a trained policy takes, paired per window.

The priority agents (:mod:`marl.env.priority_agents`) admit each partition's jobs in score order. Untrained,
the score is QSSF's ``-ln E[remaining]`` from the tenants' history (``untrained``); with the true remaining
time in its place (``oracle-key``, :class:`~marl.env.priority_agents.OracleKeyAgents`, privileged: a
reference, not a scheduler) and everything else unchanged, the difference is the room of the score, what a
network that estimates remaining time could win. A policy folder (``marl:DIR``) is a variant too, as are
the heuristics (``qssf``, ``srtf`` with oracle durations, ``tiresias``, ...).

Windows: ``--days``-long, ``--stride`` apart over the held-out weeks 2017-11-01..14 of Philly on ``small``
(``--period select``: 2017-10-15..31, where choices are made)
(4 agents), ground-truth interference, restart cost 30 s, as ``priority_report.py``; or a named regime's
cluster and windows (``--regime hetero``: ``small-hetero``, where the agents also choose GPU types: the
variants ``untrained@any`` and ``untrained@slowest`` put each job on the type with the most free GPUs or on
its slowest instead of its fastest, the room of that choice; ``untrained@moveF`` also moves a running job to
a type F times faster when it has room). Every variant is
paired with ``untrained`` and with ``qssf`` per window (mean ± std, windows below), with every window's
change and, with ``--plot``, a PNG of the changes against ``untrained``.

    python experiments/benchmarks/priority_room.py --variants oracle-key qssf srtf \
        marl:experiments/policies/philly-small marl:experiments/policies/philly-small-dagger --plot results/room.png
    python experiments/benchmarks/priority_room.py --regime hetero --factor 31 \
        --variants untrained@any untrained@slowest oracle-key gavel gavel-las
    python experiments/benchmarks/priority_room.py --regime hetero --reference gavel-las \
        --variants marl:experiments/policies/default-hetero              # also paired with gavel-las
    python experiments/benchmarks/priority_room.py --cluster dc-1k --trace-options gpu_scale=8 --agents 32 \
        --factor 31 --variants tiresias marl:results/marl_dc1k/policy    # dc-1k, Philly's jobs at 8x their GPUs
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from cluster_sim.results import write_atomic
from cluster_sim.traces.periods import PERIODS, window_label
from experiments.benchmarks.priority_report import window_specs
from experiments.benchmarks.sia_room import plot_changes
from experiments.regimes import GAVEL

AGENT_VARIANTS = ("untrained", "oracle-key")
REFERENCES = ("untrained", "qssf")
DEFAULT_AGENTS = 4  # one per 4 racks of small


def variant_scheduler(variant: str, factor: float, agents: int | None):
    """The scheduler of one variant: untrained or oracle-key agents (``agents``, default
    :data:`DEFAULT_AGENTS`), a policy folder (the agent count it records, unless ``agents`` or its own
    ``,num_agents=K`` says otherwise) or a named heuristic."""
    from cluster_sim.policies import get_policy
    from cluster_sim.policy_folders import split_folder_name
    from marl.env.priority_agents import OracleKeyAgents, PriorityAgents

    base, _, gpu_type = variant.partition("@")
    if base in AGENT_VARIANTS:
        cls = OracleKeyAgents if base == "oracle-key" else PriorityAgents
        move = gpu_type.startswith("move")  # untrained@move2: fastest type, moved up when one is 2x faster
        return cls(None, num_agents=agents or DEFAULT_AGENTS, hysteresis=float(np.log(factor)), name=variant,
                   gpu_type="fastest" if move or not gpu_type else gpu_type,
                   migrate=float(np.log(float(gpu_type[4:] or 2))) if move else None)  # fmt: skip
    if split_folder_name(variant):
        sched = get_policy(variant)
        if agents is not None and "num_agents=" not in variant:
            sched.agents_wanted = agents
        return sched
    return get_policy(variant, seed=0)


def run_one(task: tuple[int, str, str, float, int | None, str, str]) -> tuple[int, str, float, float]:
    """(window, variant, average JCT, seconds) of one simulation (``regime``: "" for ``cluster``'s windows)."""
    import torch

    from cluster_sim.build import build_simulator
    from experiments.regimes import REGIMES

    torch.set_num_threads(1)
    window, spec, variant, factor, agents, regime, cluster = task
    options = {"restart_cost": 30.0}
    if regime:
        reg = REGIMES[regime]
        cluster, options = reg.cluster, {"gpu_sharing": reg.gpu_sharing, **options, **reg.sim_options}
    sim = build_simulator(cluster, spec, seed=0, interference="oracle", interference_data=f"gavel:{GAVEL}", **options)
    sched = variant_scheduler(variant, factor, agents)
    t0 = time.perf_counter()
    jct = float(sim.run(sched).jct.mean())
    return window, variant, jct, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=["oracle-key", "srtf"],
                    help="untrained, oracle-key, a heuristic (qssf, srtf, tiresias, ...) or marl:DIR")  # fmt: skip
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--stride", type=float, default=1.75)
    ap.add_argument("--factor", type=float, default=8.0, help="preemption margin ln F of untrained and oracle-key")
    ap.add_argument("--agents", type=int, default=None,
                    help=f"agents of untrained and oracle-key (default {DEFAULT_AGENTS}); given, it also sets a "
                    "marl:DIR variant's count, which otherwise is the count its folder records")  # fmt: skip
    ap.add_argument(
        "--period",
        choices=["select", "report"],
        default="report",
        help="the named period the windows lie in (cluster_sim.traces.periods; default report)",
    )
    ap.add_argument("--regime", choices=["hetero"], default=None,
                    help="a named regime's cluster and windows (experiments/regimes.py), not small's")  # fmt: skip
    ap.add_argument("--cluster", default="small", help="the cluster of the trace windows (without --regime)")
    ap.add_argument("--trace-options", default="", help="more options of the Philly windows' spec (gpu_scale=8)")
    ap.add_argument("--reference", action="append", default=[],
                    help="one more scheduler every variant is paired with (e.g. gavel-las); repeatable")  # fmt: skip
    ap.add_argument("--json", default="", help="write the windows, every figure and the changes to this file")
    ap.add_argument("--plot", default="", help="write a PNG of each variant's change against untrained")
    ap.add_argument("--procs", type=int, default=min(2, os.cpu_count() or 1), help="simulations run at once")
    args = ap.parse_args(argv)
    from cluster_sim.policies import policy_names

    known = set(policy_names()) | set(AGENT_VARIANTS)
    bad = [v for v in args.variants if v not in known and "+" not in v and not v.startswith("marl:")
           and v.partition("@")[0] not in AGENT_VARIANTS]  # fmt: skip
    if bad:
        ap.error(f"--variants: unknown {bad}; choose from {', '.join(sorted(known))} or marl:DIR")
    if args.factor < 1.0 or (args.agents is not None and args.agents < 1):
        ap.error("--factor must be >= 1 and --agents >= 1")
    if args.regime:
        from experiments.regimes import REGIMES

        specs = [spec for spec, _ in REGIMES[args.regime].workloads()]
    else:
        chosen = PERIODS[args.period]
        specs = window_specs(args.days, args.stride, args.load, chosen.start_s, chosen.end_s, args.trace_options)
    if not specs:
        ap.error(f"--days {args.days}: no such window fits in the held-out weeks (14 days)")
    references = list(dict.fromkeys([*REFERENCES, *args.reference]))
    variants = list(dict.fromkeys([*references, *args.variants]))
    tasks = [(w, s, v, args.factor, args.agents, args.regime or "", args.cluster)
             for w, s in enumerate(specs) for v in variants]  # fmt: skip
    jct: dict[tuple[int, str], float] = {}
    with ProcessPoolExecutor(max(1, args.procs)) as pool:
        for w, v, value, seconds in pool.map(run_one, tasks):
            jct[w, v] = value
            print(f"window {w} {v:>24}: avg JCT {value:>8,.0f} s ({seconds:.0f} s)", flush=True)
    windows = list(range(len(specs)))
    width = max(24, *(len(v) for v in variants))
    where = f"regime {args.regime}" if args.regime else f"the {args.period} period"
    print(f"\n{len(windows)} windows of {where}: " + "; ".join(f"{w}: {window_label(s)}" for w, s in enumerate(specs)))
    print("± is the standard deviation over the windows (the population's: squared deviations averaged over them)")
    # the better heuristic of each window, where two or more are paired (not the untrained agents, nor an oracle
    # that reads true durations: srtf, sjf, *-oracle)
    heuristics = [
        v for v in variants
        if v in set(policy_names()) and v not in ("untrained", "srtf", "sjf") and not v.endswith("-oracle")
    ]  # fmt: skip
    best = f"best of {'/'.join(heuristics)}" if len(heuristics) > 1 else ""
    if best:
        for w in windows:
            jct[w, best] = min(jct[w, h] for h in heuristics)
        print(f"'{best}': per window, the lowest average JCT of {', '.join(heuristics)}")
    columns = [*references, best] if best else references
    colw = max(16, *(len("vs " + r) for r in columns))
    print(f"{'variant':>{width}} {'avg JCT s':>10} " + " ".join(f"{'vs ' + r:>{colw}} {'below':>6}" for r in columns))
    changes: dict[str, dict[str, list[float]]] = {ref: {} for ref in columns}
    for v in variants:
        cells = []
        for ref in columns:
            c = [jct[w, v] / jct[w, ref] - 1.0 for w in windows]
            changes[ref][v] = c
            cells.append(f"{f'{np.mean(c):+.1%} ± {np.std(c):.1%}':>{colw}} {f'{sum(x < 0 for x in c)}/{len(c)}':>6}")
        print(f"{v:>{width}} {np.mean([jct[w, v] for w in windows]):>10,.0f} " + " ".join(cells))
    print("\nper window, vs untrained: " + ", ".join(str(w) for w in windows))
    for v in variants[1:]:
        print(f"{v:>{width}}: " + " ".join(f"{c:+.1%}" for c in changes["untrained"][v]))
    if args.plot:
        plot_changes(changes["untrained"], windows, args.plot, reference="untrained")
    out = {"specs": specs, "avg_jct": {f"{w}/{v}": x for (w, v), x in jct.items()}, "changes": changes}
    if args.json:
        write_atomic(Path(args.json), json.dumps(out, indent=1) + "\n")
    return out


if __name__ == "__main__":
    main()
