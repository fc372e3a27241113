"""Evolution strategies: the one update every ES trainer uses (antithetic directions, centred ranks, Adam).

Returns here are dominated by the workload, so each direction is judged against its own mirror image on the
same episodes (antithetic pairs), and only the ranks of the fitnesses count: one window that is twice as
long as another does not outvote it.
"""

from __future__ import annotations

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


__all__ = ["AntitheticES", "centred_ranks"]
