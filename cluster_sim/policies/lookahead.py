"""A look-ahead reference on Gavel's rounds: how much room is left above ``gavel-las`` for any round scorer.

``lookahead-oracle`` (privileged: it simulates the future, true durations and arrivals included) is
``gavel-las`` whose score settings are chosen every ``every`` rounds: each candidate setting (``VARIANTS``:
Gavel's priority with more, less or no leaning to least attained service, or its LP weighted by true
remaining time) is played on a copy of the simulator for those rounds and then ``gavel-las`` up to
``horizon`` seconds ahead; the setting with the fewest job-seconds in the system over the horizon, plus the
true remaining time of the jobs still there at its end (weighted by ``terminal``, see :func:`job_seconds`),
is kept.
Since the average JCT is the job-seconds in the system over the whole run divided by the jobs, this is a
one-step policy improvement over ``gavel-las`` with the other settings as its moves, the "clone the
simulator, try the top-k decisions, keep the best" teacher. No deployable scheduler can do it; it measures
what a scorer of (job, type) pairs in these rounds could still win.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from cluster_sim.policies.gavel import LAS_WEIGHT, GavelPriorityScore
from cluster_sim.policies.rigid_rounds import ScoredRounds
from cluster_sim.protocol import DONE, Decision, SchedulerView

# score settings tried at each decision; the first is the base policy (gavel-las) that every rollout ends on
VARIANTS: tuple[dict[str, float], ...] = (
    {"las": LAS_WEIGHT, "oracle": 0.0},
    {"las": 0.0, "oracle": 0.0},
    {"las": 2 * LAS_WEIGHT, "oracle": 0.0},
    {"las": LAS_WEIGHT, "oracle": 1.0},
)
# the settings a deployed scheduler could switch among (none reads a duration): what choosing *when* to lean
# to least attained service is worth, the ceiling of any controller of gavel-las' LAS weight
LAS_VARIANTS = VARIANTS[:3]


def job_seconds(sim, policy, until: float, terminal: float = 0.0) -> float:
    """Run ``policy`` on ``sim`` from its current point to ``until``: the integral of the number of jobs in the
    system (arrived, not finished) over that time, what the average JCT sums; plus ``terminal`` x the true
    remaining time (at speed 1) of the jobs still in the system then, a lower bound on what they will add,
    so that a setting cannot look good by leaving work beyond the horizon."""
    area, t = 0.0, float(sim.now)
    decisions = policy.schedule(sim)
    if decisions:
        sim.apply(decisions)
    while t < until:
        present = sim.num_arrived - sim.num_completed
        if not sim.advance():
            break
        area += present * (min(float(sim.now), until) - t)
        t = float(sim.now)
        if t >= until:
            break
        sim.consult(policy)
    if terminal:
        left = np.flatnonzero(np.asarray(sim.job_states)[: sim.num_arrived] != DONE)
        area += terminal * float(np.asarray(sim.remaining_times(left)).sum())
    return area


class LookaheadRounds(ScoredRounds):
    """``gavel-las`` with its score settings chosen by simulating each ahead (privileged; a reference)."""

    def __init__(
        self,
        *,
        every: int = 10,
        horizon: float = 4 * 3600.0,
        terminal: float = 1.0,
        variants: tuple[dict[str, float], ...] = VARIANTS,
        interval: float = 360.0,
        stay: float = 0.0,
        seed: int = 0,
        name: str = "lookahead-oracle",
        acting=None,
        **options,
    ) -> None:
        if every < 1 or horizon <= 0 or not variants:
            raise ValueError(f"lookahead: every >= 1, horizon > 0 and variants needed; got {every}, {horizon}")
        # the teacher's scores, whose settings the look-ahead chooses; ``acting``: another scorer that acts in
        # the real run (a student labelled by the teacher; it must keep ``self.gavel``'s rounds, as
        # :mod:`marl.training.rounds_imitation`'s does), while the rollouts always act by the teacher's
        self.gavel = GavelPriorityScore.gavel_las(interval)
        super().__init__(acting or self.gavel, interval=interval, stay=stay, seed=seed, name=name, **options)
        self.every, self.horizon, self.variants = int(every), float(horizon), tuple(variants)
        self.terminal = float(terminal)
        self._left, self._rollout = 0, False
        self.chosen: list[int] = []  # the setting chosen at each decision (an index into ``variants``)

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._left, self.chosen = 0, []
        self._use(0)

    def _use(self, k: int) -> None:
        for key, value in self.variants[k].items():
            setattr(self.gavel, key, float(value))

    def _is_tick(self, view: SchedulerView) -> bool:
        return self.interval <= 0 or math.ceil(view.now / self.interval - 1e-9) * self.interval <= view.now + 1e-9

    def schedule(self, view: SchedulerView) -> list[Decision]:
        if self._is_tick(view) and (len(view.running) or len(view.queue)):
            if self._left == 0:
                if self._rollout:
                    self._use(0)  # past the move being tried: the base policy
                else:  # nothing waits: every setting runs every job, so no look-ahead is needed
                    k = self._choose(view) if len(view.queue) else 0
                    self.chosen.append(k)
                    self._use(k)
                self._left = self.every
            self._left -= 1
        return super().schedule(view)

    def _choose(self, view: SchedulerView) -> int:
        """The setting whose rollout from here has the fewest job-seconds (ties: the first)."""
        costs = []
        for k in range(len(self.variants)):
            memo = {} if self.scorer is self.gavel else {id(self.scorer): None}  # an acting student is not copied
            sim, policy = copy.deepcopy((view, self), memo)
            policy.scorer, policy._rollout, policy._left = policy.gavel, True, self.every
            policy._use(k)
            costs.append(job_seconds(sim, policy, float(view.now) + self.horizon, self.terminal))
        return int(np.argmin(costs))


__all__ = ["LAS_VARIANTS", "VARIANTS", "LookaheadRounds", "job_seconds"]
