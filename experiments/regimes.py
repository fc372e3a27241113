"""Named regimes where placement matters: a cluster, a series of workloads and the heuristics to compare.

Each regime is what a learned placing scheduler is trained and judged in, with the spread between its best
and worst placement heuristic measured before any training (``heuristic_spread.py --regime NAME``):

- ``hetero``: ``small-hetero`` (V100, P100, K80 servers; every Gavel job type measured on each) under the
  Philly jobs of 2017-11-01..14 in 2-day windows at load 0.9, models by Gavel's job types: which GPU type a
  job gets, and whether it moves;
- ``sharing``: ``small`` with GPU sharing and Gavel's measured co-location slowdowns as the truth, the same
  windows at load 1.1: whether a 1-GPU job waits or packs onto a busy GPU, and with whom (Gandiva, Lucid),
  beside the orderings that do not share (QSSF, Tiresias): what packing is worth against what order is;
- ``uplinks``: ``dc-1k`` (racks 2:1, pods 4:1 oversubscribed) with Philly-like jobs 8x their GPUs, so
  multi-server jobs cross uplinks: how close together a job's GPUs are;
- ``sia-hetero``: Sia's eight Philly workloads on the cluster of Sia's simulator (T4, RTX 2080 Ti, A100)
  with Sia's settings (restart and start costs, each application's restart cost and calibration): which
  GPU type a job gets, among rigid schedulers type-blind and type-aware, beside the elastic ones (Sia,
  Pollux) that also choose GPU counts and batch sizes.

Policies whose name ends in ``-oracle`` (and ``srtf``) read true durations: references, not contenders.
Windows are held out by time: these are the selection/report weeks; nothing after 2017-11-14 is used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cluster_sim.sim_presets import SIM_PRESETS
from cluster_sim.traces.periods import DAY, PERIODS, window_spec

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
PHILLY = TRACES / "pollux-osdi21" / "traces" / "philly.csv"
GAVEL = TRACES / "gavel" / "simulation_throughputs.json"
SIA = TRACES / "sia-sosp23"
# the report period (2017-11-01 .. 2017-11-15), seconds from the trace start: the regimes' windows lie in it
DEV_START, DEV_END = PERIODS["report"].start_s, PERIODS["report"].end_s


@dataclass(frozen=True)
class Regime:
    """A cluster, its workloads (one per window or seed) and the policies compared on each."""

    name: str
    cluster: str
    policies: tuple[str, ...]
    reference: str
    trace: str | None = None  # a trace spec without window options; None: ``synthetic`` seeds or ``specs``
    synthetic: str | None = None
    specs: tuple[str, ...] = ()  # whole workloads, one per row (when neither trace nor synthetic is given)
    load: float = 0.9
    days: float = 2.0
    windows: int = 7
    gpu_sharing: bool = False
    interference: str = "oracle"
    sim_options: dict = field(default_factory=dict)  # more build_simulator options (restart costs, Sia's settings)

    def workloads(self) -> list[tuple[str, int]]:
        """(workload spec, seed) per window: consecutive ``days`` windows of the trace, or synthetic seeds."""
        if self.specs:
            return [(spec, 0) for spec in self.specs]
        if self.trace is None:
            return [(str(self.synthetic), k) for k in range(self.windows)]
        length = self.days * DAY
        starts = [DEV_START + k * length for k in range(self.windows) if DEV_START + (k + 1) * length <= DEV_END + 1]
        return [(window_spec(self.trace, t0, t0 + length, self.load), 0) for t0 in starts]


def _aware(predictor: str) -> str:
    return f"cluster_sim.policies.gpu_packing:GpuPacking,mode=aware,predictor={predictor},predictor_data=gavel:{GAVEL}"


REGIMES: dict[str, Regime] = {
    "hetero": Regime(
        name="hetero",
        cluster="small-hetero",
        trace=f"philly:{PHILLY},model_rule=gavel",
        policies=(
            "qssf@slowest",
            "qssf@any",
            "qssf@fastest",
            "tiresias@fastest",
            "rounds-las",
            "gavel",
            "rounds-gavel",
            "gavel-las",
            "srtf@fastest",
            "rounds-oracle",
            "rounds-oracle-area",
            "gavel-oracle",
            "gavel-las-oracle",
            "lookahead-oracle",
        ),
        reference="gavel",
    ),
    "sharing": Regime(
        name="sharing",
        cluster="small",
        trace=f"philly:{PHILLY},model_rule=gavel",
        load=1.1,
        policies=(
            "pack-none",
            "pack-blind",
            _aware("oracle"),
            "qssf-np",
            "pack-blind-qssf",
            _aware("oracle") + ",order=qssf",
            "qssf",
            "tiresias",
            "pack-blind-tiresias",
            _aware("oracle") + ",under=tiresias",
            "srtf",
        ),
        reference="pack-none",
        gpu_sharing=True,
    ),
    "uplinks": Regime(
        name="uplinks",
        cluster="dc-1k",
        synthetic="synthetic:3000,window_load=0.9,gpu_scale=8",
        windows=5,
        policies=("fifo+spread", "fifo+random", "fifo+consolidate", "fifo+closest-gpus", "tiresias+consolidate"),
        reference="fifo+consolidate",
    ),
    "sia-hetero": Regime(
        name="sia-hetero",
        cluster="sia-hetero",
        specs=tuple(f"pollux:{SIA}/workloads/philly/workload-{k}.csv,profiles={SIA}/traces" for k in range(1, 9)),
        policies=(
            "rounds-blind",
            "rounds-las",
            "gavel",
            "rounds-gavel",
            "gavel-las",
            "rounds-oracle",
            "gavel-las-oracle",
            "pollux",
            "sia",
            "sia-oracle",
        ),
        reference="gavel",
        interference=SIM_PRESETS["sia"].interference,
        sim_options=dict(SIM_PRESETS["sia"].costs),
    ),
}


def regime(name: str) -> Regime:
    if name not in REGIMES:
        raise ValueError(f"unknown regime {name!r}; choose one of {sorted(REGIMES)}")
    return REGIMES[name]


__all__ = ["REGIMES", "Regime", "regime"]
