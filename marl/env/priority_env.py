"""RLlib environment of the priority agents on trace windows, with a reference schedule as baseline.

Every step is one scheduling point at which some agent has a waiting job: each agent ``p{k}`` observes its
partition (:mod:`marl.env.priority_features`) and acts with one score per job slot; the scores go through
:meth:`marl.env.priority_agents.PriorityAgents.apply`, and the simulator advances to the next such point.
With ``placing``, agents also see their partition's topology (:mod:`marl.env.topology_obs`) and score every
(job slot, GPU type) pair after the job scores: where a started job runs and, with ``migrate``, where a
running job moves.

Episodes replay a window of a trace, drawn per episode (seeded) between ``train_start`` and
``train_end`` (seconds from the trace's start) at a load drawn from ``load``; a window of the held-out
period is a fixed ``workload`` spec instead (evaluation). A drawn window too quiet to offer its load is
drawn again (counted in ``quiet_windows``), as an operator would pick another day to replay.

Reward, shared by all agents: minus the jobs in the system integrated over the time since the last step,
*relative to a reference schedule of the same window* (the untrained agents' decisions: QSSF's scores through
the same agents, each job on its fastest type and moved as ``migrate`` says; with ``decision: gavel-las``,
``gavel-las``'s rounds; simulated alongside), divided by ``reward_scale`` seconds.
Summed over an episode it is ``-(total JCT - total JCT of the reference) / reward_scale``: the workload's
own weight, which dominates returns in scheduling, cancels, and what is left is what the policy changed (an
input-dependent baseline in reward form; it does not depend on the actions, so the policy gradient stays
unbiased). Observations carry the reference's state beside the agents' own (``critic``, read by the value
function only).

The reference is simulated lazily, only as far as the episode has got (:class:`ReferenceSchedule`): a reset
builds the window's two simulators instead of simulating the reference's whole schedule first (a minute of
CPU for a window of ``marl_dc1k.yaml``), and that cost is spread over the steps. A finished reference is
kept per window (:data:`REFERENCE_MEMO`), so an evaluation environment replaying one window simulates it
once. The cluster, performance model and (pure) interference model are built once per environment, and a
window's jobs are read once for both simulators.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from cluster_sim.build import assemble_simulator, build_simulator
from cluster_sim.plugins import load_plugins
from cluster_sim.policies import get_policy
from cluster_sim.simulator import Simulator
from cluster_sim.traces.periods import HELD_OUT_START, refuse_report_period, trace_date, trace_seconds, window_spec
from cluster_sim.workload import Workload
from cluster_sim.workload_spec import QuietWorkloadSpecError, parse_workload_spec
from interference.base import InterferenceModel
from interference.loader import load_interference_model
from marl.env.priority_agents import PriorityAgents, qssf_scores
from marl.env.rounds_agents import DECISIONS, agents_class
from marl.env.seeding import copy_offset, reset_generator

MAX_DRAWS = 100  # quiet windows in a row before the settings themselves are blamed
MEMO_SIZE = 8  # finished reference schedules kept per process (by window and settings)


class EnvConfigError(ValueError):
    """A bad ``env_config``; ``key`` is the setting at fault (a config checker names its line)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


@dataclass(frozen=True)
class PriorityEnvConfig:
    """Settings of :class:`PriorityEnv` (``env_config`` keys)."""

    cluster: str = "small"
    trace: str = "philly:../shared/traces/pollux-osdi21/traces/philly.csv"
    train_start: float = 1_728_000.0  # day 20: the trace has a handful of jobs before (seconds, or a date)
    train_end: float = HELD_OUT_START  # 2017-11-01, where the report period starts
    window_days: float = 7.0
    load: tuple[float, float] = (0.9, 0.9)
    workload: str | None = None  # a fixed spec (evaluation) instead of random windows
    num_agents: int = 4
    slots: int | None = None
    hysteresis: float = float(np.log(31.0))
    interference: str = "oracle"
    interference_data: str | None = "gavel:../shared/traces/gavel/simulation_throughputs.json"
    restart_cost: float = 30.0
    reward_scale: float = 360_000.0  # one unit = 100 job-hours
    relative: bool = True  # reward relative to the reference schedule
    seed: int = 0
    envs_per_runner: int = 1  # set by training: with several, each runner's copies draw their own seeds
    placing: bool = False  # the agents also choose each started job's GPU type (type scores in the action)
    migrate: float | None = None  # move a running job to a type whose score beats its own by this (None: never)
    interference_inputs: str | None = None  # placing agents also read this predictor's estimates (MODE[:PATH])
    interference_online: bool = False  # ... corrected from the co-locations each episode observes
    decision: str = "partitions"  # or "gavel-las": the agents lean one cluster-wide gavel-las round (rounds_agents)
    imitation_label: bool = False  # set by training: each agent's info carries the privileged LABEL (slot_labels)
    plugins: tuple[str, ...] = ()  # set by training: the plugins its process imported, imported again by each runner

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> PriorityEnvConfig:
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise EnvConfigError(unknown[0], f"priority env_config: unknown keys {unknown}; allowed: {sorted(known)}")
        for key in ("train_start", "train_end"):  # seconds from the trace's start, or a date (2017-10-15)
            if key in data:
                data[key] = trace_seconds(data[key], data.get("trace", cls.trace))
        if "load" in data:
            load = data["load"]
            data["load"] = (float(load), float(load)) if np.isscalar(load) else tuple(float(x) for x in load)
            if len(data["load"]) != 2 or not 0 < data["load"][0] <= data["load"][1]:
                raise EnvConfigError("load", f"priority env_config.load must be a number or [low, high] with 0 < low "
                                     f"<= high, got {load!r}")  # fmt: skip
        cfg = cls(**data)
        for key in ("window_days", "num_agents", "reward_scale", "envs_per_runner"):  # a size: never 0 or below
            if not getattr(cfg, key) > 0:
                raise EnvConfigError(key, f"priority env_config.{key} must be > 0, got {getattr(cfg, key)!r}")
        try:
            agents_class(cfg.decision)
        except ValueError as err:
            raise EnvConfigError("decision", f"priority env_config.{err}") from None
        if cfg.workload is None:
            try:
                refuse_report_period("train_end", cfg.train_start, cfg.train_end, cfg.trace)
            except ValueError as err:
                raise EnvConfigError("train_end", f"priority env_config.{err}") from None
        if cfg.workload is None and cfg.train_end - cfg.train_start < cfg.window_days * 86400.0:
            raise EnvConfigError(
                "window_days",
                f"priority env_config: train_end - train_start ({cfg.train_end - cfg.train_start:.0f} s) is shorter "
                f"than one window of window_days={cfg.window_days}; widen the range or shorten the windows",
            )
        return cfg

    def window_spec(self, rng: np.random.Generator) -> str:
        """The workload of one episode: a fixed spec, or a random window of the training period."""
        if self.workload is not None:
            return self.workload
        length = self.window_days * 86400.0
        start = float(rng.uniform(self.train_start, self.train_end - length))
        load = float(rng.uniform(*self.load))
        return window_spec(self.trace, start, start + length, round(load, 3))


class InSystemIntegral:
    """``F(t)``: the integral of the number of jobs in the system from 0 to ``t`` for a finished schedule."""

    def __init__(self, arrival: np.ndarray, finish: np.ndarray) -> None:
        self.a = np.sort(arrival)
        self.c = np.sort(finish)
        self.sa = np.concatenate([[0.0], np.cumsum(self.a)])
        self.sc = np.concatenate([[0.0], np.cumsum(self.c)])
        self.total = float(self.sc[-1] - self.sa[-1])  # F(infinity): the total JCT

    def count(self, t: float) -> int:
        """Jobs in the system at ``t``."""
        return int(np.searchsorted(self.a, t, side="right") - np.searchsorted(self.c, t, side="right"))

    def __call__(self, t: float) -> float:
        na = int(np.searchsorted(self.a, t, side="right"))
        nc = int(np.searchsorted(self.c, t, side="right"))
        return (t * na - self.sa[na]) - (t * nc - self.sc[nc])


class ReferenceSchedule(InSystemIntegral):
    """:class:`InSystemIntegral` of a schedule simulated lazily: ``F(t)`` and the count at ``t`` need only the
    completions up to ``t``, so ``scheduler`` is run on ``sim`` until its clock passes ``t`` and no further.

    Completions come in time order, so the known finish times are a sorted prefix of all of them, and their
    running sums are the prefix of :class:`InSystemIntegral`'s cumulative sums: every answer is the one the
    whole schedule gives, bit for bit. ``total`` and ``avg_jct`` finish the simulation first."""

    def __init__(self, sim: Simulator, scheduler: Any) -> None:
        sim.start(scheduler)
        self.sim, self.scheduler = sim, scheduler
        n = len(sim.jobs)
        self.a = np.sort(sim.jobs.arrival)
        self.sa = np.concatenate([[0.0], np.cumsum(self.a)])
        self._c = np.zeros(n)  # finish times known so far (nondecreasing), then unused
        self._sc = np.zeros(n + 1)  # their running sums
        self._known = 0
        self._finished = n == 0
        self._jct = float("nan")
        self._last = (float("nan"), 0.0)  # (t, F(t)) of the last call

    @property
    def c(self) -> np.ndarray:
        return self._c[: self._known]

    @property
    def sc(self) -> np.ndarray:
        return self._sc[: self._known + 1]

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def total(self) -> float:  # type: ignore[override]
        self.finish()
        return float(self.sc[-1] - self.sa[-1])

    @property
    def avg_jct(self) -> float:
        """The reference's mean JCT."""
        self.finish()
        return self._jct

    def finish(self) -> None:
        self._simulate(np.inf)

    def count(self, t: float) -> int:
        self._simulate(t)
        return super().count(t)

    def __call__(self, t: float) -> float:
        if t != self._last[0]:  # each step asks for the time the last one ended at again
            self._simulate(t)
            self._last = (t, super().__call__(t))
        return self._last[1]

    def _simulate(self, t: float) -> None:
        """Step until every completion at or before ``t`` is known: once the clock is past ``t`` (events come
        in time order, and new ones are never set before the clock)."""
        sim = self.sim
        while not self._finished and sim.now <= t:
            if not sim.step(self.scheduler):
                self._finished = True
                self._jct = float(sim.result(self.scheduler.name, 0.0).jct.mean())
                self.sim = self.scheduler = None  # a finished reference keeps only its arrays
                break
            new = sim.num_completed - self._known
            if new:  # all of them completed now: their sums continue the running sum one by one
                k = self._known
                self._c[k : k + new] = sim.now
                self._sc[k : k + new + 1] = np.cumsum(np.concatenate([[self._sc[k]], np.full(new, sim.now)]))
                self._known += new


LABEL = "imitation_label"  # the info key of the label that PPO's imitation term fits (marl.training.imitation)


def slot_labels(sim: Any, job_ids: np.ndarray) -> np.ndarray:
    """Privileged, training only: ln(max(true remaining s, 1)) of the job in each slot of ``job_ids``, 0 on
    padding (-1). The label DAgger records and PPO's imitation term fits; no observation holds it."""
    out = np.zeros(job_ids.shape, dtype=np.float32)
    ok = job_ids >= 0
    if ok.any():
        out[ok] = np.log(np.maximum(sim.remaining_times(job_ids[ok]), 1.0))
    return out


REFERENCE_MEMO: OrderedDict[Hashable, ReferenceSchedule] = OrderedDict()


class PriorityEnv(MultiAgentEnv):
    """Agents ``p0 .. p{K-1}``; one step per scheduling point at which some agent has a waiting job."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        load_plugins(tuple((config or {}).get("plugins", ())))  # first: they may name the trace's kind
        self.config = cfg = PriorityEnvConfig.from_dict(config)
        self.agents_policy = agents_class(cfg.decision)(
            None,
            num_agents=cfg.num_agents,
            slots=cfg.slots,
            hysteresis=cfg.hysteresis,
            placing=cfg.placing,
            migrate=cfg.migrate,
            interference_inputs=cfg.interference_inputs,
            interference_online=cfg.interference_online,
        )
        self.possible_agents = [f"p{k}" for k in range(cfg.num_agents)]
        self.agents = list(self.possible_agents)
        # The layout's N depends on the partition size: build one simulator-free probe of the cluster. Its
        # cluster and performance model serve every episode (as build_simulator would make them again).
        probe = build_simulator(cfg.cluster, self._probe_workload(), seed=0, warn_estimated=False)
        self.agents_policy.reset(probe)
        self._view, self._perf = probe.topo, probe.perf
        self._interference: InterferenceModel | None = None  # loaded at the first window (kept if pure)
        self.workload: Workload | None = None
        if cfg.decision not in DECISIONS:  # a decision layer of one's own: its untrained form, on QSSF's scores
            self._reference_policy = agents_class(cfg.decision)(qssf_scores, num_agents=cfg.num_agents, slots=cfg.slots,
                                                                migrate=cfg.migrate)  # fmt: skip
        elif cfg.decision == "partitions":  # QSSF's scores through the same agents
            self._reference_policy = PriorityAgents(qssf_scores, num_agents=cfg.num_agents, slots=cfg.slots,
                                                    migrate=cfg.migrate, order_only=True)  # fmt: skip
        else:  # the untrained agents' decisions: the rounds stage alone
            self._reference_policy = get_policy(cfg.decision)
        self.layout = self.agents_policy.layout
        self.observation_spaces = {a: self.layout.space(critic=True) for a in self.agents}
        self.action_spaces = {a: self.layout.action_space() for a in self.agents}
        self._env_context = config
        self._rng = np.random.Generator(np.random.PCG64(cfg.seed + copy_offset(config)))
        self.sim = None
        self.spec = ""
        self.quiet_windows = 0
        self.reference_jct = float("nan")

    @staticmethod
    def _probe_workload() -> str:
        return "synthetic:1,load=0.5"

    # ------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._rng = reset_generator(seed, self._env_context, self.config.envs_per_runner)
        cfg = self.config
        self.sim = self.draw_simulator()
        self.reference = None
        self.reference_jct = float("nan")
        if cfg.relative:
            self.reference = self._reference()
        self.sim.start(self.agents_policy)  # its declared traits set the simulation's modes (rounds: elastic)
        self._reward = 0.0
        self._obs = None
        self._done = self._advance()
        return self._observations(), self._labels({})

    def step(self, action_dict: Mapping[str, np.ndarray]):
        if self.sim is None:
            raise RuntimeError("call reset() before step()")
        if not self._done:
            n = self.layout.N * (1 + self.layout.T)
            scores = np.stack([np.asarray(action_dict.get(a, np.zeros(n)), dtype=np.float64) for a in self.agents])
            decisions = self.agents_policy.apply(self.sim, scores)
            if decisions:
                self.sim.apply(decisions)
            self._done = self._advance()
        reward, self._reward = self._reward, 0.0
        rewards = dict.fromkeys(self.agents, reward)
        infos: dict[str, dict] = {}
        if self._done:
            jct = self.sim.result("marl-priority", 0.0).jct
            if self.reference is not None:
                self.reference_jct = self.reference.avg_jct
                self._keep_reference()
            summary = {"avg_jct": float(jct.mean()), "reference_jct": self.reference_jct, "jobs": len(jct)}
            infos = {a: dict(summary) for a in self.agents}
        return self._observations(), rewards, {"__all__": self._done}, {"__all__": False}, self._labels(infos)

    # ------------------------------------------------------------ internals
    def draw_simulator(self):
        """The simulator of this episode's window: drawn again while the window cannot offer its load."""
        cfg = self.config
        for _ in range(MAX_DRAWS):
            self.spec = cfg.window_spec(self._rng)
            self.workload_seed = int(self._rng.integers(2**31 - 1)) if cfg.workload is None else cfg.seed
            try:
                gpus = self._view.num_gpus
                self.workload = parse_workload_spec(self.spec, cluster_gpus=gpus, seed=self.workload_seed)
                return self._simulator()
            except QuietWorkloadSpecError as e:
                if cfg.workload is not None:
                    raise
                self.quiet_windows += 1
                last = e
        raise ValueError(
            f"priority env_config: {MAX_DRAWS} windows in a row of window_days={cfg.window_days} between train_start="
            f"{trace_date(cfg.train_start, cfg.trace)} and train_end={trace_date(cfg.train_end, cfg.trace)} could not "
            f"offer load={list(cfg.load)}; lower "
            f"the load or lengthen the windows (last: {last})"
        )

    def refuse_mostly_quiet(self, draws: int = 64, share: float = 0.95) -> None:
        """Draw ``draws`` windows as episodes do (without simulating them) and refuse settings that almost no window
        can meet: one draw that succeeds says little where nearly every other is quiet, and training would then
        stop later, inside an env runner, after ``MAX_DRAWS`` quiet windows in a row."""
        cfg = self.config
        if cfg.workload is not None:
            return
        rng, quiet, last = np.random.default_rng(cfg.seed), 0, None
        for _ in range(draws):
            try:
                parse_workload_spec(cfg.window_spec(rng), cluster_gpus=self._view.num_gpus, seed=0)
            except QuietWorkloadSpecError as e:
                quiet, last = quiet + 1, e
        if quiet >= share * draws:
            raise ValueError(
                f"priority env_config: {quiet} of {draws} windows of window_days={cfg.window_days} between train_start="
                f"{trace_date(cfg.train_start, cfg.trace)} and train_end={trace_date(cfg.train_end, cfg.trace)} "
                f"cannot offer load={list(cfg.load)}; lower "
                f"the load or lengthen the windows (one of them: {last})"
            )

    def _reference(self) -> ReferenceSchedule:
        """The reference schedule of this episode's window: a finished one of the same window and settings,
        or a new one simulated as the episode goes (kept once finished)."""
        cfg = self.config
        key = (self.spec, self.workload_seed, cfg.cluster, cfg.interference, cfg.interference_data,
               cfg.restart_cost, cfg.num_agents, cfg.slots, cfg.migrate, cfg.decision)  # fmt: skip
        self._reference_key = key
        ref = REFERENCE_MEMO.get(key)
        if ref is not None:
            REFERENCE_MEMO.move_to_end(key)
            return ref
        return ReferenceSchedule(self._simulator(), self._reference_policy)

    def _keep_reference(self) -> None:
        """Keep the finished reference of this window for the next episode that replays it."""
        ref, key = self.reference, getattr(self, "_reference_key", None)
        if ref is None or key is None or not ref.finished:
            return
        REFERENCE_MEMO[key] = ref
        REFERENCE_MEMO.move_to_end(key)
        while len(REFERENCE_MEMO) > MEMO_SIZE:
            REFERENCE_MEMO.popitem(last=False)

    def _simulator(self) -> Simulator:
        """A simulator of this episode's workload: what :func:`~cluster_sim.build.build_simulator` builds from
        the spec, from the parts this environment keeps (the agents' and the reference's share the jobs)."""
        cfg = self.config
        model = self._interference
        if model is None and cfg.interference != "none":
            model = load_interference_model(cfg.interference, cfg.interference_data)
            if getattr(model, "pure", False):  # its answers depend on the query alone: one serves every simulator
                self._interference = model
        return assemble_simulator(self._view, self.workload, perf=self._perf, interference=model,
                                  restart_cost=cfg.restart_cost)  # fmt: skip

    def _observations(self) -> dict[str, dict[str, np.ndarray]]:
        critic = self._critic()
        if self._obs is None:
            zeros = {k: np.zeros(s, dtype=np.float32) for k, s in self.layout.shapes().items()}
            return {a: {**zeros, "critic": critic} for a in self.agents}
        arrays = self._obs.arrays
        return {a: {**{key: arrays[key][k] for key in arrays}, "critic": critic} for k, a in enumerate(self.agents)}

    def _labels(self, infos: dict[str, dict]) -> dict[str, dict]:
        """``infos`` with each agent's :func:`slot_labels` where training asks for them (``imitation_label``)."""
        if not self.config.imitation_label:
            return infos
        if self._obs is None:
            labels = np.zeros((len(self.agents), self.layout.N), dtype=np.float32)
        else:
            labels = slot_labels(self.sim, self._obs.job_ids)
        return {a: {**infos.get(a, {}), LABEL: labels[k]} for k, a in enumerate(self.agents)}

    def _critic(self) -> np.ndarray:
        """:data:`~marl.env.priority_features.CRITIC_FEATURES` now (no deficit without a reference)."""
        sim = self.sim
        n = sim.num_arrived - sim.num_completed
        ref = self.reference.count(sim.now) if self.reference is not None else n
        return np.array([n / 100.0, ref / 100.0, (n - ref) / 10.0], dtype=np.float32)

    def _advance(self) -> bool:
        """Advance to the next point where some agent has a waiting job; True when the run is over."""
        sim, scale = self.sim, self.config.reward_scale
        while True:
            in_system = sim.num_arrived - sim.num_completed
            t0 = sim.now
            if not sim.advance():
                self._obs = None
                if self.reference is not None:  # the reference may finish later: its tail counts too
                    self._reward += (self.reference.total - self.reference(sim.now)) / scale
                return True
            ref = self.reference(sim.now) - self.reference(t0) if self.reference is not None else 0.0
            self._reward -= (in_system * (sim.now - t0) - ref) / scale
            self._obs = self.agents_policy.observe(sim)
            if self._obs is not None:
                return False
            decisions = self.agents_policy.apply(sim, np.zeros(0))  # jobs larger than a partition only
            if decisions:
                sim.apply(decisions)
