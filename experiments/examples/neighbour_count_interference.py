"""An interference model of your own, registered as a mode: ``marlsched --plugin THIS_FILE``.

``per-neighbour``: every job sharing a server (or uplink, or GPU) with another costs it a fixed fraction
of its throughput (default 5%; ``--interference-model 0.1`` sets 10%), compounding per neighbour. A
crude model, but the shape every model has: queries in, throughput factors in (0, 1] out.

    marlsched --plugin experiments/examples/neighbour_count_interference.py simulate --cluster small \
        --workload synthetic:2000,window_load=1.0 --policy gandiva,fifo --interference per-neighbour
"""

from __future__ import annotations

from collections.abc import Sequence

from interference import CoLocation, register_interference_model


class PerNeighbour:
    def __init__(self, cost: float = 0.05) -> None:
        if not 0 <= cost < 1:
            raise ValueError(f"per-neighbour cost {cost} must be in [0, 1)")
        self.cost = cost

    def throughput_factors(self, queries: Sequence[CoLocation]) -> list[float]:
        return [(1.0 - self.cost) ** len(q.neighbours) for q in queries]


register_interference_model("per-neighbour", lambda path: PerNeighbour(0.05 if path is None else float(path)))
