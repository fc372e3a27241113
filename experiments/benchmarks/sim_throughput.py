"""Simulator throughput: jobs, events, wall seconds, events/s and peak memory per policy and cluster size.

Each run happens in a fresh process so that its peak resident memory is its own. Scenarios:
  heavy    the Philly report period (jobs submitted 2017-11-01..11-14, 11,634 jobs) replayed at load 0.9 on
           small, where the queue reaches thousands, beside the same jobs at their own pace on dc-1k, where
           nothing queues: per-event cost with and without a long queue, in one run
  philly   the Philly trace (pollux-osdi21/traces/philly.csv) on dc-1k, every policy
  dc10k    100,000 synthetic jobs on dc-10k where they queue (window_load=0.9, gpu_scale=8: Philly's jobs at
           8 GPUs per Philly GPU, arriving so that they offer 0.9 of the cluster while they arrive), beside
           20,000 jobs in the same regime on small: events/s, queue length and peak memory of both
  scaling  20,000 synthetic jobs at load 0.8 on small, dc-1k and dc-10k (load relative to each cluster):
           the same offered load, but jobs queue on small only (a bigger cluster at one load queues less,
           and 20,000 jobs of 1-8 GPUs fill dc-10k only briefly), so this is the per-event cost by cluster
           size without a queue's (the dc10k scenario has one: 100,000 jobs at gpu_scale=8)

Each run is repeated (``--repeat``, default 3, interleaved with the run it is compared with) and the
fastest kept: the simulation is deterministic, so repeats differ only in the machine's noise, which only
ever adds time (on a shared 2-core VM one run can take 1.5x another).

``--by-queue`` adds one run per heavy policy timed round by round, binned by queue length: whether a
round's cost grows with the queue.

``--interference oracle`` runs them with jobs slowing each other down (Gavel's measured pairs from
``../shared/traces/gavel`` when present), as the comparisons of schedulers do.

    python experiments/benchmarks/sim_throughput.py [--scenario philly dc10k scaling] [--policies fifo tiresias]
        [--repeat 3] [--interference oracle] [--by-queue]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

import numpy as np

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
PHILLY = TRACES / "pollux-osdi21" / "traces" / "philly.csv"
GAVEL = TRACES / "gavel" / "simulation_throughputs.json"  # measured pairs for --interference oracle
DEFAULT_POLICIES = ("fifo", "sjf", "srtf", "tiresias", "gandiva", "drf", "optimus-oracle", "closest-gpus")
HEAVY_POLICIES = ("fifo", "tiresias", "srtf", "gandiva", "drf", "qssf")
DEV_WINDOW = "start=2017-11-01,end=2017-11-15"  # the report period
DC10K_WORKLOAD = "synthetic:100000,window_load=0.9,gpu_scale=8"
SMALL_QUEUED = "synthetic:20000,window_load=0.9"  # 2017-11-01 00:00 .. 2017-11-15 00:00, seconds from the trace start


def _run(cluster: str, workload: str, policy: str, interference: str, queue: mp.Queue, rounds: bool = False) -> None:
    from cluster_sim.build import build_simulator
    from cluster_sim.policies import get_policy

    t0 = time.perf_counter()
    data = f"gavel:{GAVEL}" if interference == "oracle" and GAVEL.is_file() else None
    sim = build_simulator(
        cluster, workload, seed=0, interference=interference, interference_data=data, restart_cost=30.0
    )
    setup = time.perf_counter() - t0
    scheduler = RoundTimer(get_policy(policy, seed=0)) if rounds else get_policy(policy, seed=0)
    result = sim.run(scheduler)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    max_queue = int(result.timeline_queue.max()) if len(result.timeline_queue) else 0
    queue.put(
        {
            **result.metrics(),
            "setup_seconds": setup,
            "peak_mib": peak_mib,
            "max_queue": max_queue,
            "scheduler_seconds": result.scheduler_seconds,
            **({"by_queue": by_queue(scheduler.rows)} if rounds else {}),
        }
    )


QUEUE_BINS = (0, 10, 100, 1000)  # lower edges of the queue-length bins of --by-queue


class RoundTimer:
    """A scheduler seen through its one call, timed per scheduling round: the queue length, the decisions,
    the scheduler's seconds and the whole cycle's (the simulator applying the last round's decisions and
    advancing to this point, then the scheduler)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.rows: list[tuple[int, int, float, float]] = []
        self._last: float | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def reset(self, view) -> None:
        self.inner.reset(view)
        self._last = None

    def schedule(self, view):
        queued = len(view.queue)
        t0 = time.perf_counter()
        decisions = self.inner.schedule(view)
        t1 = time.perf_counter()
        self.rows.append((queued, len(decisions), t1 - t0, t1 - (t0 if self._last is None else self._last)))
        self._last = t1
        return decisions


def by_queue(rows: list[tuple[int, int, float, float]]) -> list[dict]:
    """Rounds binned by queue length: count, decisions and microseconds per round."""
    arr = np.array(rows, dtype=np.float64).reshape(-1, 4)
    bins = np.searchsorted(np.array(QUEUE_BINS), arr[:, 0], side="right") - 1
    out = []
    for b, lo in enumerate(QUEUE_BINS):
        sel = arr[bins == b]
        if len(sel):
            hi = QUEUE_BINS[b + 1] if b + 1 < len(QUEUE_BINS) else None
            out.append({
                "queue": f"{lo}-{hi - 1}" if hi else f">={lo}", "rounds": len(sel),
                "decisions_per_round": sel[:, 1].mean(), "sched_us": 1e6 * sel[:, 2].mean(),
                "cycle_us": 1e6 * sel[:, 3].mean(),
            })  # fmt: skip
    return out


def sim_alone(row: dict) -> float:
    """Events/s of the simulator without the scheduler's own time: the ceiling that a free scheduler
    making the same decisions would reach."""
    return row["events"] / max(row["wall_seconds"] - row["scheduler_seconds"], 1e-9)


def measure(cluster: str, workload: str, policy: str, interference: str = "none", rounds: bool = False) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_run, args=(cluster, workload, policy, interference, q, rounds))
    p.start()
    out = q.get()
    p.join()
    return out


def fastest(runs: list[tuple[str, str, str, str]], repeat: int) -> list[dict]:
    """Each (cluster, workload, policy, interference) run ``repeat`` times, the runs interleaved; per run
    the repeat with the least wall time. Repeats must agree on every count (the simulation is deterministic)."""
    best: list[dict | None] = [None] * len(runs)
    for _ in range(max(1, repeat)):
        for i, run in enumerate(runs):
            row = measure(*run)
            old = best[i]
            if old is not None and (old["events"], old["decisions"]) != (row["events"], row["decisions"]):
                raise RuntimeError(f"repeats of {run} differ: {old['events']} vs {row['events']} events")
            if old is None or row["wall_seconds"] < old["wall_seconds"]:
                best[i] = row
    return [b for b in best if b is not None]


def report(rows: list[dict]) -> None:
    cols = ("cluster", "scheduler", "jobs_total", "events", "max_queue", "wall_seconds", "ev_per_s", "peak_mib")
    print("  ".join(f"{c:>14}" for c in cols))
    for r in rows:
        r["ev_per_s"] = r["events"] / r["wall_seconds"]
        vals = [r[c] for c in cols]
        print("  ".join(f"{v:>14.1f}" if isinstance(v, float) else f"{v!s:>14}" for v in vals))
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", nargs="+", default=["heavy", "philly", "dc10k", "scaling"])
    ap.add_argument("--policies", nargs="+", default=None, help="default: per scenario")
    ap.add_argument("--interference", default="none", help="none, oracle or learned (default none)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement; the fastest is kept (default 3)")
    ap.add_argument(
        "--by-queue", action="store_true", help="heavy: one more run per policy, timed per round by queue length"
    )
    args = ap.parse_args()
    if "heavy" in args.scenario:
        from cluster_sim.policies import POLICIES

        policies = [p for p in args.policies or HEAVY_POLICIES if p in POLICIES]
        print("== heavy: Philly report period, load 0.9 on small (queue in the thousands) vs its own pace on dc-1k")
        runs = [("small", f"philly:{PHILLY},{DEV_WINDOW},load=0.9", p, args.interference) for p in policies]
        runs += [("dc-1k", f"philly:{PHILLY},{DEV_WINDOW}", p, args.interference) for p in policies]
        rows = fastest(runs, args.repeat)
        heavy, calm = rows[: len(policies)], rows[len(policies) :]
        report(rows)
        # a preemptive policy under load makes more decisions per event (restarts): per decision is the
        # cost of one start or preemption with and without a long queue
        for h, c in zip(heavy, calm, strict=True):
            ratio = h["ev_per_s"] / c["ev_per_s"]
            per_dec = (h["decisions"] / h["wall_seconds"]) / (c["decisions"] / c["wall_seconds"])
            name, q, wall = h["scheduler"], h["max_queue"], h["wall_seconds"]
            print(
                f"{name:>10}: max queue {q:5d}, {wall:5.1f} s, events/s {ratio:.2f} x no-queue, decisions per "
                f"event {h['decisions'] / h['events']:.2f} vs {c['decisions'] / c['events']:.2f}, "
                f"decisions/s {per_dec:.2f} x no-queue; scheduler {h['scheduler_seconds'] / wall:.0%} of the wall "
                f"time, simulator alone {sim_alone(h) / c['ev_per_s']:.2f} x no-queue"
            )
        if args.by_queue:
            print("== heavy, per scheduling round by queue length (one timed run per policy on small)")
            print("  (decisions, microseconds of the scheduler and of the whole cycle: mean per round; sched us per")
            print("  decision: what one start or preemption costs the scheduler, the queue's length aside)")
            head = ("policy", "queue", "rounds", "decisions", "sched us", "cycle us", "us/decision")
            print(" ".join(f"{h:>11}" for h in head))
            for p in policies:
                row = measure("small", f"philly:{PHILLY},{DEV_WINDOW},load=0.9", p, args.interference, rounds=True)
                for b in row["by_queue"]:
                    per = b["sched_us"] / b["decisions_per_round"] if b["decisions_per_round"] else float("nan")
                    print(f"{p:>11} {b['queue']:>11} {b['rounds']:>11} {b['decisions_per_round']:>11.2f} "
                          f"{b['sched_us']:>11.1f} {b['cycle_us']:>11.1f} {per:>11.1f}")  # fmt: skip
    args.policies = args.policies or list(DEFAULT_POLICIES)
    if "philly" in args.scenario:
        print(f"== Philly trace on dc-1k ({PHILLY})")
        report(fastest([("dc-1k", f"philly:{PHILLY}", p, args.interference) for p in args.policies], args.repeat))
    if "dc10k" in args.scenario:
        print("== 100,000 synthetic jobs queueing on dc-10k vs 20,000 in the same regime on small")
        pols = args.policies[:2] if args.policies != list(DEFAULT_POLICIES) else ["fifo", "tiresias"]
        rows = fastest(
            [("dc-10k", DC10K_WORKLOAD, p, "none") for p in pols] + [("small", SMALL_QUEUED, p, "none") for p in pols],
            args.repeat,
        )
        big, small = rows[: len(pols)], rows[len(pols) :]
        report(rows)
        for b, s in zip(big, small, strict=True):
            print(f"{b['scheduler']:>10}: dc-10k max queue {b['max_queue']}, {b['peak_mib']:.0f} MiB peak, "
                  f"events/s {b['ev_per_s'] / s['ev_per_s']:.2f} x small's; scheduler "
                  f"{b['scheduler_seconds'] / b['wall_seconds']:.0%} of the wall time, simulator alone "
                  f"{sim_alone(b) / s['ev_per_s']:.2f} x small's")  # fmt: skip
    if "scaling" in args.scenario:
        print("== 20,000 synthetic jobs at load 0.8 per cluster size (per-event cost vs size)")
        rows = fastest(
            [(c, "synthetic:20000,load=0.8", "fifo", "none") for c in ("small", "dc-1k", "dc-10k")], args.repeat
        )
        report(rows)
        base = rows[0]["events"] / rows[0]["wall_seconds"]
        for r in rows:
            print(f"{r['cluster']:>8}: events/s {r['ev_per_s']:.0f} = {r['ev_per_s'] / base:.2f} x small")


if __name__ == "__main__":
    main()
