"""Online correction of an interference model from the co-locations a scheduler has observed.

A deployed scheduler need not guess for ever: once two jobs run on one GPU it sees the throughput each
gets (Gandiva and Lucid profile first, then trust what they measured). :class:`OnlineCorrection` wraps
any :class:`~interference.base.InterferenceModel` and learns, from every observed pair, a correction of
its slowdown ``s = 1/f − 1`` on a log scale:

    log s_corrected(a | b) = log s_model(a | b) + σ_a + π_b + ρ_ab

``σ_a`` is job type ``a``'s sensitivity offset, ``π_b`` partner type ``b``'s pressure offset and ``ρ_ab``
the pair's own term, each with a zero-mean Gaussian prior (standard deviations ``prior_type`` and
``prior_pair``), so that a type seen with one partner moves its predictions with every partner, and a
pair seen again is predicted from its own observations. Each observation ``y = log s_observed − log
s_model`` has noise ``noise``; the posterior (a ridge regression over the terms, solved exactly) shrinks
towards the model while evidence is scarce and towards the observations as it accumulates. A job type is
the descriptor itself (its facts, not its name). No randomness: the same observations in the same order
give the same corrections, bit for bit.

Only queries with a single neighbour at the corrector's sharing level are corrected (what a pair observation
measures): ``level`` GPU (the default) for jobs that share a GPU, SERVER for jobs on different GPUs of one
server (what the placing agents' inputs ask, :mod:`marl.env.interference_obs`); everything else is the wrapped
model's answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from interference.base import CoLocation, InterferenceModel, JobDescriptor, Sharing

MIN_SLOWDOWN = 1e-3  # log scale floor: a factor of 0.999 and one of 1.0 are the same observation


class OnlineCorrection:
    """``base`` corrected by observed pair throughputs (see the module docstring)."""

    pure = False  # answers change as observations arrive

    def __init__(
        self,
        base: InterferenceModel,
        *,
        prior_type: float = 0.3,
        prior_pair: float = 1.0,
        noise: float = 0.25,
        level: Sharing = Sharing.GPU,
    ) -> None:
        if min(prior_type, prior_pair, noise) <= 0:
            raise ValueError("prior_type, prior_pair and noise must be > 0 (standard deviations on a log scale)")
        self.base = base
        self.level = Sharing(level)
        self.name = f"{getattr(base, 'name', 'model')}+online"
        self.prior_type, self.prior_pair, self.noise = float(prior_type), float(prior_pair), float(noise)
        self._types: dict[JobDescriptor, int] = {}
        self._pairs: dict[tuple[int, int], int] = {}
        self._rows: list[tuple[tuple[int, ...], float]] = []  # (term indices, y) per observation
        self._solution: tuple[np.ndarray, np.ndarray] | None = None  # (mean, covariance) of the terms
        self.history: list[tuple[JobDescriptor, JobDescriptor, float]] = []  # every observation, in order

    # -- evidence --------------------------------------------------------------------------------------
    def _type(self, d: JobDescriptor) -> int:
        return self._types.setdefault(d, len(self._types))

    def _terms(self, a: JobDescriptor, b: JobDescriptor, create: bool) -> tuple[int, ...] | None:
        """Term indices (σ_a, π_b, ρ_ab) in the parameter vector [σ..., π..., ρ...]; None if unknown."""
        if not create and (a not in self._types or b not in self._types):
            return None
        ta, tb = (self._type(a), self._type(b)) if create else (self._types[a], self._types[b])
        pair = self._pairs.setdefault((ta, tb), len(self._pairs)) if create else self._pairs.get((ta, tb))
        return (ta, tb, pair) if pair is not None else (ta, tb)

    def observe(self, job: JobDescriptor, partner: JobDescriptor, factor: float) -> None:
        """``job`` ran at ``factor`` of its solo throughput next to ``partner`` alone (sharing its GPU, or its
        server at ``level`` SERVER)."""
        if not 0.0 < factor <= 1.0 + 1e-9:
            raise ValueError(f"an observed throughput factor lies in (0, 1], got {factor}")
        predicted = float(self.base.throughput_factors([CoLocation(job, ((partner, self.level),))])[0])
        y = np.log(_slowdown(min(factor, 1.0))) - np.log(_slowdown(predicted))
        self._rows.append((self._terms(job, partner, create=True), float(y)))
        self._solution = None
        self.history.append((job, partner, float(factor)))

    def _solve(self) -> tuple[np.ndarray, np.ndarray]:
        if self._solution is None:
            t, p = len(self._types), len(self._pairs)
            n = 2 * t + p
            prior = np.concatenate([np.full(2 * t, self.prior_type), np.full(p, self.prior_pair)]) ** -2.0
            a = np.diag(prior)
            rhs = np.zeros(n)
            for terms, y in self._rows:
                idx = _columns(terms, t)
                a[np.ix_(idx, idx)] += self.noise**-2.0
                rhs[idx] += y * self.noise**-2.0
            cov = np.linalg.inv(a)
            self._solution = (cov @ rhs, cov)
        return self._solution

    def correction(self, job: JobDescriptor, partner: JobDescriptor) -> tuple[float, float]:
        """(mean, standard deviation) of the log-slowdown correction for ``job`` next to ``partner``."""
        terms = self._terms(job, partner, create=False)
        if terms is None:
            # a type never observed keeps the prior on its own terms; an observed one carries its evidence
            known = [i for i, d in ((0, job), (1, partner)) if d in self._types]
            if not known:
                return 0.0, float(np.hypot(np.hypot(self.prior_type, self.prior_type), self.prior_pair))
            mean, cov = self._solve()
            t = len(self._types)
            idx = [self._types[job]] if job in self._types else [t + self._types[partner]]
            var = float(cov[idx[0], idx[0]]) + self.prior_type**2 + self.prior_pair**2
            return float(mean[idx[0]]), float(np.sqrt(var))
        mean, cov = self._solve()
        idx = _columns(terms, len(self._types))
        var = float(cov[np.ix_(idx, idx)].sum()) + (0.0 if len(terms) == 3 else self.prior_pair**2)
        return float(mean[idx].sum()), float(np.sqrt(var))

    # -- answers ---------------------------------------------------------------------------------------
    def predict(self, job: JobDescriptor, partner: JobDescriptor) -> tuple[float, float]:
        """(factor, standard deviation) of ``job`` next to ``partner`` at the corrector's level, corrected."""
        base = float(self.base.throughput_factors([CoLocation(job, ((partner, self.level),))])[0])
        mu, sd = self.correction(job, partner)
        slow = _slowdown(base, floor=0.0) * np.exp(mu)
        factor = 1.0 / (1.0 + slow)
        # delta method: d f / d log s = −s / (1 + s)²
        return float(factor), float(slow / (1.0 + slow) ** 2 * sd)

    def throughput_factors(self, queries: Sequence[CoLocation]) -> np.ndarray:
        out = np.asarray(self.base.throughput_factors(queries), dtype=np.float64).copy()
        if not self.history:
            return out
        for i, q in enumerate(queries):
            if len(q.neighbours) == 1 and q.neighbours[0][1] == self.level:
                mu, _ = self.correction(q.job, q.neighbours[0][0])
                out[i] = 1.0 / (1.0 + _slowdown(out[i], floor=0.0) * np.exp(mu))
        return out


def _slowdown(factor: float, floor: float = MIN_SLOWDOWN) -> float:
    """``1/f − 1``, at least ``floor``: the observations' log needs one; a corrected answer does not (with no
    evidence it is the model's own, however close to 1.0)."""
    return max(1.0 / max(factor, 1e-9) - 1.0, floor)


def _columns(terms: tuple[int, ...], types: int) -> list[int]:
    """Positions of (σ_a, π_b[, ρ_ab]) in the parameter vector [σ (types), π (types), ρ (pairs)]."""
    cols = [terms[0], types + terms[1]]
    return [*cols, 2 * types + terms[2]] if len(terms) == 3 else cols


__all__ = ["OnlineCorrection"]
