"""Evolution strategies: the one update (antithetic directions, centred ranks, Adam) and the one loop
(:func:`evolve`) that every ES trainer runs.

Returns here are dominated by the workload, so each direction is judged against its own mirror image on the
same episodes (antithetic pairs), and only the ranks of the fitnesses count: one window that is twice as
long as another does not outvote it. What a run ships is chosen on validation tasks, the start included, so
a run that learns nothing ships its start and says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def centred_ranks(fitness: np.ndarray) -> np.ndarray:
    """Ranks of ``fitness`` scaled to [-0.5, 0.5] (higher fitness, higher rank)."""
    ranks = np.empty(len(fitness))
    ranks[np.argsort(fitness)] = np.arange(len(fitness))
    return ranks / max(len(fitness) - 1, 1) - 0.5


class AntitheticES:
    """``ask`` the 2 x ``pairs`` candidates θ ± σε, ``tell`` their fitnesses (higher is better) to take one
    Adam step along the rank-weighted directions. ``rng`` draws the directions, so a seeded ``rng`` gives
    the same run."""

    def __init__(self, theta: np.ndarray, *, sigma: float, lr: float, pairs: int, rng: np.random.Generator) -> None:
        if sigma <= 0 or lr <= 0 or pairs < 1:
            raise ValueError(f"ES needs sigma > 0, lr > 0 and pairs >= 1 (got {sigma}, {lr}, {pairs})")
        self.theta = np.asarray(theta, dtype=np.float64).copy()
        self.sigma, self.lr, self.pairs, self.rng = float(sigma), float(lr), int(pairs), rng
        self.m, self.v = np.zeros_like(self.theta), np.zeros_like(self.theta)
        self.steps = 0
        self._eps: np.ndarray | None = None

    def ask(self) -> list[np.ndarray]:
        """The candidates: θ + σε for each direction, then θ - σε in the same order."""
        self._eps = self.rng.standard_normal((self.pairs, len(self.theta)))
        return [self.theta + self.sigma * e for e in self._eps] + [self.theta - self.sigma * e for e in self._eps]

    def tell(self, fitness: np.ndarray) -> np.ndarray:
        """One Adam step from the candidates' ``fitness`` (in :meth:`ask`'s order); returns the new θ."""
        if self._eps is None or len(fitness) != 2 * self.pairs:
            raise ValueError(f"tell needs the {2 * self.pairs} fitnesses of the last ask")
        util = centred_ranks(np.asarray(fitness, dtype=np.float64))
        grad = (util[: self.pairs] - util[self.pairs :]) @ self._eps / (2 * self.pairs * self.sigma)
        self.steps += 1
        self.m = 0.9 * self.m + 0.1 * grad
        self.v = 0.999 * self.v + 0.001 * grad**2
        m_hat, v_hat = self.m / (1 - 0.9**self.steps), self.v / (1 - 0.999**self.steps)
        self.theta = self.theta + self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)
        self._eps = None
        return self.theta


@dataclass
class Step:
    """One iteration of :func:`evolve` as its ``progress`` callback sees it (iteration 0: the start)."""

    iteration: int
    about: dict[str, Any] = field(default_factory=dict)  # what ``draw`` said of the iteration's training task
    jct: np.ndarray | None = None  # each candidate's average JCT on the task (mean over its episodes)
    validation: np.ndarray | None = None  # log average JCTs of θ on the validation tasks, where evaluated
    gain: float | None = None  # their mean log ratio to the start's (< 0: better than the start)


def evolve(
    theta: np.ndarray,
    play: Callable[[list[np.ndarray], list[Any]], np.ndarray],
    draw: Callable[[np.random.Generator], tuple[Any, dict[str, Any]]],
    validation: Sequence[Any],
    *,
    sigma: float,
    lr: float,
    pairs: int,
    rng: np.random.Generator,
    iterations: int,
    eval_every: int,
    minutes: float | None,
    started: float,
    progress: Callable[[Step], None],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """ES from ``theta``. Each iteration ``draw(rng)`` gives a training task (and what a progress row says of
    it) and every candidate plays it; every ``eval_every`` iterations, at the last and when ``minutes`` have
    passed since ``started`` (then the run stops), θ plays the ``validation`` tasks. ``play(thetas, tasks)``
    is the average JCT of each θ on each task, ``len(thetas)`` first, then ``len(tasks)``, then any episodes
    of a task: a candidate's fitness is minus the sum of its episodes' log JCTs. Returns the θ that did best
    on validation (``theta``, ``iteration``, ``validation``: its mean log ratio to the start's), the start
    included: with no validation task that is the start."""
    es = AntitheticES(theta, sigma=sigma, lr=lr, pairs=pairs, rng=rng)
    base = np.log(play([theta], list(validation))[0]) if validation else None

    def validate(current: np.ndarray) -> tuple[np.ndarray | None, float]:
        if not validation:
            return None, 0.0
        got = np.log(play([current], list(validation))[0])
        return got, float(np.mean(got - base))

    best = {"theta": np.asarray(theta).copy(), "iteration": 0, "validation": 0.0}
    progress(Step(0, validation=base, gain=0.0))
    for it in range(1, iterations + 1):
        task, about = draw(rng)
        candidates = es.ask()
        jct = np.asarray(play(candidates, [task]), dtype=np.float64).reshape(len(candidates), -1)
        current = es.tell(-np.log(jct).sum(axis=1))
        step = Step(it, about, jct.mean(axis=1))
        out_of_time = minutes is not None and time.perf_counter() - started > 60 * minutes
        if it % eval_every == 0 or it == iterations or out_of_time:
            step.validation, step.gain = validate(current)
            if step.gain < best["validation"]:
                best = {"theta": current.copy(), "iteration": it, "validation": step.gain}
        progress(step)
        if out_of_time:
            log(f"time budget of {minutes} min reached after iteration {it}")
            break
    return best


__all__ = ["AntitheticES", "Step", "centred_ranks", "evolve"]
