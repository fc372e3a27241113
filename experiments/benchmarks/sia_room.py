"""Where Sia's average JCT goes on its own workloads, and how much any scheduler in its frame could win back.

Sia (``cluster_sim.policies.sia``) chooses every job's GPU type, GPU count and batch size from converged
goodput models. Before training an elastic agent to beat it, this measures the room, paired on Sia's eight
Philly workloads (the ``sia-hetero`` regime, its cluster and settings):

- **Breakdown**: average JCT, time queued (JCT less the time holding GPUs), restarts per job, jobs per GPU
  (queued or running, over the run) and GPUs held per running job.
- **Bounds that change the cluster, not the scheduler**: restarts free (restart cost 0, first starts still
  cost 30 s), every start free, and the same jobs on 4 times the GPUs (``sia-hetero`` scaled 4x).
- **Privileged variants of Sia** (they read true remaining work; references, not schedulers):
  ``sia-oracle`` weighs each job's terms by (median remaining / its remaining) ** 0.5, so jobs near their
  end get GPUs first (:meth:`Sia.job_weights`); ``oracle-restarts`` discounts a move by what the restart
  costs against the job's true remaining time, ``max(1 − r / remaining, 0)``, in place of Pollux's
  age-based factor (:meth:`Sia.restart_factors`).
- **The same weights on what a deployed scheduler knows**: ``las-weights`` (attained service) and
  ``history-weights`` (QSSF's history estimate of remaining time), :class:`EstimateWeightedSia`.

A trained policy folder is a variant too (``marl:DIR``, e.g. ``marl:experiments/policies/sia-philly``, Sia with
learned job weights). Each variant is paired with Sia per workload: mean ± std of the change, the number of
workloads where it is below Sia, every workload's change and, with ``--plot PATH``, a PNG of them.

``--philly N`` replaces Sia's workloads by N windows of Philly's report weeks (a window a day from
2017-11-01 + ``--first`` days, default 2017-11-02; ``--hours`` long at ``--load``; windows too quiet for the
load are left out), each job training one of Sia's applications for its trace length
(``apps=``): long, heavy-tailed jobs where Sia's eight workloads have short ones. There the restart variants
(``restarts-free``, ``oracle-restarts``) can run for a long time: on the window of 2017-11-02 both were still
running after 20 minutes, where ``sia`` and ``sia-oracle`` took 90 s.

    python experiments/benchmarks/sia_room.py                          # all variants, 8 workloads (~6 min)
    python experiments/benchmarks/sia_room.py --variants sia sia-oracle --workloads 1 2 3
    python experiments/benchmarks/sia_room.py --philly 4 --hours 6 --variants sia sia-oracle oracle-restarts
    python experiments/benchmarks/sia_room.py --philly 14 --first 0 --variants sia sia-oracle \
        marl:experiments/policies/sia-philly --plot results/sia_philly/report.png     # all report windows
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.gpu_profiles import RESTART_COST
from cluster_sim.policies import get_policy
from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.policies.sia import Sia
from cluster_sim.policy_folders import split_folder_name
from cluster_sim.protocol import SchedulerView
from cluster_sim.traces.periods import window_spec

VARIANTS = (
    "sia", "restarts-free", "starts-free", "4x-gpus", "sia-oracle", "oracle-restarts", "las-weights",
    "history-weights",
)  # fmt: skip


class EstimateWeightedSia(Sia):
    """Sia with ``sia-oracle``'s weights (median / own) ** 0.5 on an estimate a deployed scheduler has, not on
    true remaining work: ``las`` (attained GPU-seconds plus an hour, least attained first, as Tiresias) or
    ``history`` (QSSF's expected remaining time from the finished jobs of the tenant and GPU count)."""

    def __init__(self, estimate: str, **kw: Any) -> None:
        super().__init__(name=f"{estimate}-weights", **kw)
        self.estimate = estimate
        self.history = TenantHistory()

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self.history.reset(view)

    def job_weights(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        if self.estimate == "las":
            size = view.attained_services(jobs) + 3600.0
        else:
            self.history.learn(view)
            size = np.maximum(self.history.expected_remaining(view, jobs), 60.0)
        return np.sqrt(np.median(size) / size)


class OracleRestartSia(Sia):
    """Sia whose discount on moving a job is its restart cost against its true remaining time (privileged)."""

    def restart_factors(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        apps = [view.application(int(j)) for j in jobs.tolist()]
        cost = np.array([RESTART_COST.get(a.name, 30.0) if a is not None else 30.0 for a in apps])
        return np.maximum(1.0 - cost / np.maximum(view.remaining_times(jobs), 1.0), 0.0)


def philly_window(k: int, hours: float, load: float) -> str:
    """The ``k``-th (1-based) Philly window of the report weeks, with Sia's applications."""
    from experiments.regimes import DAY, DEV_START, PHILLY, SIA

    start = DEV_START + k * DAY
    return window_spec(f"philly:{PHILLY}", start, start + hours * 3600.0, load, [f"apps={SIA}/traces"])


def measure(workload: int | str, variant: str) -> dict[str, float]:
    """One workload (Sia's 1-8, or a spec) under one variant: the breakdown of its finished jobs."""
    from cluster_sim.build import build_simulator
    from experiments.benchmarks.policy_runtime import scaled_cluster
    from experiments.regimes import REGIMES

    reg = REGIMES["sia-hetero"]
    spec = reg.specs[workload - 1] if isinstance(workload, int) else workload
    options: dict[str, Any] = dict(reg.sim_options)
    cluster: Any = reg.cluster
    policy: Sia = Sia()
    if variant == "restarts-free":
        options.update(restart_cost=0.0, app_restart_costs=False)
    elif variant == "starts-free":
        options.update(restart_cost=0.0, start_cost=0.0, app_restart_costs=False)
    elif variant == "4x-gpus":
        cluster = scaled_cluster(4)
    elif variant == "sia-oracle":
        policy = Sia(oracle=0.5, name="sia-oracle")
    elif variant == "oracle-restarts":
        policy = OracleRestartSia(name="oracle-restarts")
    elif variant in ("las-weights", "history-weights"):
        policy = EstimateWeightedSia(variant.split("-")[0])
    elif split_folder_name(variant):
        policy = get_policy(variant)
    elif variant != "sia":
        raise ValueError(f"unknown variant {variant!r}; choose from {VARIANTS} or marl:DIR")
    sim = build_simulator(cluster, spec, seed=0, interference=reg.interference, **options)
    result = sim.run(policy)
    m = result.metrics()
    done = ~np.isnan(result.end)
    return {
        "avg_jct": float(m["avg_jct"]),
        "queued": float(m["avg_queue_delay"]),
        "restarts": float(m["restarts_per_job"]),
        "jobs_per_gpu": float(m["jobs_per_gpu"]),
        "gpus_held": float(m["avg_gpus_held"]),
        "unfinished": float((~done).sum()),
    }


def _measure(args: tuple[int, str, int | str]) -> tuple[int, str, dict[str, float] | None]:
    """One measurement; None for a Philly window too quiet for its load."""
    from cluster_sim.workload_spec import QuietWorkloadSpecError

    label, variant, workload = args
    try:
        return label, variant, measure(workload, variant)
    except QuietWorkloadSpecError:
        return label, variant, None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), help=f"of {VARIANTS}, or marl:DIR (a policy)")
    ap.add_argument("--workloads", nargs="+", type=int, default=list(range(1, 9)), help="Sia's Philly workloads")
    ap.add_argument("--philly", type=int, default=0, metavar="N", help="N Philly windows instead (see above)")
    ap.add_argument("--first", type=int, default=1, help="the first Philly window: 0 starts 2017-11-01")
    ap.add_argument("--hours", type=float, default=6.0, help="length of each Philly window")
    ap.add_argument("--load", type=float, default=0.9, help="load of each Philly window")
    ap.add_argument("--plot", default="", help="write a PNG of each variant's paired change to this path")
    ap.add_argument("--procs", type=int, default=min(2, os.cpu_count() or 1), help="simulations run at once")
    args = ap.parse_args(argv)
    if bad := [v for v in args.variants if v not in VARIANTS and not v.startswith("marl:")]:
        ap.error(f"--variants: unknown {bad}; choose from {', '.join(VARIANTS)} or marl:DIR")
    if args.philly and not 0 <= args.first <= args.first + args.philly - 1 <= 13:
        ap.error("--first/--philly: report windows are 0..13 (2017-11-01..14); nothing after 2017-11-14 is used")
    if bad := [w for w in args.workloads if not 1 <= w <= 8]:
        ap.error(f"--workloads: Sia has Philly workloads 1..8, got {bad}")
    variants = list(dict.fromkeys(["sia", *args.variants]))  # Sia itself is every pairing's reference
    specs: dict[int, int | str] = {w: w for w in args.workloads}
    if args.philly:
        specs = {k: philly_window(k, args.hours, args.load) for k in range(args.first, args.first + args.philly)}
        args.workloads = list(specs)
        print(f"Philly windows, e.g. {specs[1]}")
    tasks = [(w, v, specs[w]) for w in args.workloads for v in variants]
    rows: dict[tuple[int, str], dict[str, float]] = {}
    with ProcessPoolExecutor(max(1, args.procs)) as pool:
        for w, v, row in pool.map(_measure, tasks):
            if row is None:
                if w in args.workloads:
                    print(f"window {w} too quiet for load {args.load}, left out", flush=True)
                    args.workloads.remove(w)
                continue
            rows[w, v] = row
            print(f"workload {w} {v:>16}: avg JCT {row['avg_jct']:>7.0f} s, restarts/job {row['restarts']:.2f}",
                  flush=True)  # fmt: skip
    if not args.workloads:
        raise SystemExit("every window was too quiet for the load; lower --load or widen --hours")
    report(variants, rows, args.workloads, args.plot)


def report(variants: list[str], rows: dict, workloads: list[int], plot: str = "") -> None:
    """The table, each variant paired with Sia per workload, and with ``plot`` a PNG of the paired changes."""
    width = max(16, *(len(v) for v in variants))
    print(f"\n{'variant':>{width}} {'avg JCT s':>10} {'vs sia (paired)':>16} {'below sia':>9} {'queued s':>9} "
          f"{'restarts':>9} {'jobs/GPU':>9} {'GPUs held':>9}")  # fmt: skip
    changes = {}
    for v in variants:
        mean = {k: float(np.mean([rows[w, v][k] for w in workloads])) for k in rows[workloads[0], v]}
        paired = [rows[w, v]["avg_jct"] / rows[w, "sia"]["avg_jct"] - 1 for w in workloads]
        changes[v] = paired
        below = f"{sum(p < 0 for p in paired)}/{len(paired)}"
        print(f"{v:>{width}} {mean['avg_jct']:>10.0f} {f'{np.mean(paired):+.1%} ± {np.std(paired):.1%}':>16} "
              f"{below:>9} {mean['queued']:>9.0f} {mean['restarts']:>9.2f} {mean['jobs_per_gpu']:>9.3f} "
              f"{mean['gpus_held']:>9.2f}")  # fmt: skip
        if mean["unfinished"]:
            print(f"{'':>{width}} ({mean['unfinished']:.1f} jobs per workload did not finish)")
    print("\nper workload, vs sia: " + ", ".join(str(w) for w in workloads))
    for v in variants[1:]:
        print(f"{v:>{width}}: " + " ".join(f"{p:+.1%}" for p in changes[v]))
    if plot:
        plot_changes(changes, workloads, plot)


def plot_changes(changes: dict[str, list[float]], workloads: list[int], path: str, reference: str = "sia") -> None:
    """Grouped bars: each variant's avg JCT against the ``reference``'s on every workload, and their mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cluster_sim.results import save_figure

    shown = [v for v in changes if v != reference]
    labels = [str(w) for w in workloads] + ["mean"]
    x = np.arange(len(labels))
    bar = 0.8 / max(len(shown), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.3 * len(labels) * max(len(shown), 1) + 2), 3.8))
    for i, v in enumerate(shown):
        vals = 100 * np.array([*changes[v], np.mean(changes[v])])
        label = Path(v[len("marl:") :]).name if v.startswith("marl:") else v
        ax.bar(x + (i - (len(shown) - 1) / 2) * bar, vals, bar, label=label)
    ax.axhline(0.0, color="grey", lw=1)
    ax.set_xticks(x, labels)
    ax.set_xlabel("workload / window")
    ax.set_ylabel(f"avg JCT vs {reference}, same workload (%)")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, Path(path))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
