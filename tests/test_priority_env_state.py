"""The priority agents' round kept cheap without changing a bit: observations built per job equal the per-slot
definition, every agent's slots and admissions equal the per-agent rules, the agents know where their jobs run,
and the reference schedule simulated lazily (and kept per window) answers as the whole schedule does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cluster_sim.build import build_simulator
from cluster_sim.policies.base import admitted_by_budget
from cluster_sim.traces.periods import DAY, HELD_OUT_START, window_spec
from marl.env.priority_agents import PriorityAgents, _admitted, qssf_scores
from marl.env.priority_env import REFERENCE_MEMO, InSystemIntegral, PriorityEnv, ReferenceSchedule
from marl.env.priority_features import _slots, slot_rows
from marl.env.topology_obs import cand_column, log_hours


@pytest.fixture(scope="module")
def window(traces_dir: Path) -> str:
    start = HELD_OUT_START + 6 * DAY
    return window_spec(
        f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv", start, start + DAY, 0.9, ["max_jobs=400"]
    )


def _sim(spec: str, cluster: str = "small"):
    return build_simulator(cluster, spec, seed=0, restart_cost=30.0)


def _dense(agents: PriorityAgents, view, obs) -> dict[str, np.ndarray]:
    """The ``jobs`` and ``parts`` arrays slot by slot, straight from their definitions (the way they were first
    written: every feature over the padded ``(K, N)`` slots)."""
    ids, valid = obs.job_ids, obs.job_ids >= 0
    k_n = ids.shape[0]
    j = np.where(valid, ids, 0)
    h = agents.history
    g = view.jobs.num_gpus[j].astype(np.float64)
    executed, attained = view.executed_times(j.ravel()).reshape(j.shape), view.attained_services(j.ravel())
    rem = h.expected_remaining(view, j.ravel()).reshape(j.shape)
    day = 2 * np.pi * (view.now % 86400.0) / 86400.0
    cols = [
        np.ones(j.shape), obs.running, np.log2(g) / 7.0, g / agents.part_gpus[:, None],
        log_hours(view.now - view.jobs.arrival[j] - executed), log_hours(executed),
        log_hours(attained.reshape(j.shape)), np.log(np.maximum(rem, 1.0)) / 10.0,
        log_hours(h.residual(j.ravel(), np.zeros(j.size)).reshape(j.shape)),
        np.log1p(h.group_size(j.ravel()).reshape(j.shape)) / 8.0,
        (executed > 0) & ~obs.running, np.full(j.shape, np.sin(day)), np.full(j.shape, np.cos(day)),
    ]  # fmt: skip
    jobs = np.stack(cols, axis=-1) * valid[..., None]
    # every job the agents own, whether in a slot or not: running on a partition, then queued at one
    need = view.jobs.num_gpus.astype(np.int64)
    running = np.asarray(view.running, dtype=np.int64)
    running = running[~agents.is_spill[running]]
    queue = np.asarray(view.queue, dtype=np.int64)
    queue = queue[agents.agent_of[queue] >= 0]
    run_part = agents.gpu_part[[int(view.placement(r)[0]) for r in running.tolist()]].astype(np.int64)
    owner = agents.agent_of[queue]
    everyone = np.concatenate([running, queue])
    work = np.zeros(k_n)
    np.add.at(work, np.concatenate([run_part, owner]), h.expected_remaining(view, everyone) * need[everyone])
    gk = agents.part_gpus.astype(np.float64)
    free = np.array([view.server_free[p.servers.start : p.servers.stop].sum() for p in agents.parts])
    part = np.stack([
        free / gk, np.log1p(np.bincount(owner, minlength=k_n)) / 8.0,
        np.log1p(np.bincount(owner, weights=need[queue], minlength=k_n) / gk),
        np.bincount(run_part, minlength=k_n) / gk, log_hours(work / gk), gk / gk.sum(),
    ], axis=-1)  # fmt: skip
    parts = np.stack([np.roll(part, -k, axis=0) for k in range(k_n)])
    return {"jobs": jobs.astype(np.float32), "parts": parts.astype(np.float32)}


def test_observations_equal_their_per_slot_definition_round_after_round(window: str) -> None:
    """The first 300 rounds of a window with preemptions: ``jobs`` and ``parts`` as computed slot by slot."""
    rng = np.random.default_rng(0)
    seen = []

    def noisy(arrays):
        view = agents.sim
        obs = agents.last_obs
        if len(seen) < 300:
            dense = _dense(agents, view, obs)
            for key in ("jobs", "parts"):
                np.testing.assert_array_equal(arrays[key], dense[key], err_msg=f"{key} at t={view.now}")
            seen.append(view.now)
        return qssf_scores(arrays) + rng.normal(0.0, 3.0, size=arrays["jobs"].shape[:2])

    agents = PriorityAgents(noisy, num_agents=4, hysteresis=0.0)
    agents.sim = _sim(window)
    res = agents.sim.run(agents)
    assert len(seen) == 300 and res.preemptions.sum() > 10


def test_every_agents_slots_and_admissions_are_the_per_agent_rules() -> None:
    rng = np.random.default_rng(1)
    for _ in range(300):
        k_n, n = int(rng.integers(1, 6)), int(rng.integers(2, 12))
        m = int(rng.integers(0, 4 * n))
        n_run = int(rng.integers(0, m + 1))
        part = np.concatenate([rng.integers(0, k_n, n_run), rng.integers(0, k_n, m - n_run)]).astype(np.int64)
        if (np.bincount(part[:n_run], minlength=k_n) >= n).any():  # slots hold every running job, and more
            continue
        is_run = np.arange(m) < n_run
        rem, since = rng.integers(0, 5, m).astype(float), rng.integers(0, 5, m).astype(float)  # many ties
        rows = slot_rows(part, is_run, rem, since, k_n, n)
        for k in range(k_n):
            r = np.flatnonzero(part == k)
            pick = _slots(r[is_run[r]], r[~is_run[r]], rem[r[~is_run[r]]], since[r[~is_run[r]]], n)
            np.testing.assert_array_equal(rows[k], np.concatenate([pick, np.full(n - len(pick), -1)]))
        need = rng.integers(1, 9, m).astype(np.int64)
        order = np.argsort(part, kind="stable")
        budget = rng.integers(-2, 40, k_n).astype(np.int64)
        got = _admitted(need[order], part[order], budget)
        for k in range(k_n):
            mine = part[order] == k
            np.testing.assert_array_equal(got[mine], admitted_by_budget(need[order][mine], int(budget[k])))


def test_placing_agents_know_where_their_jobs_run_and_keep_group_statistics_until_a_job_ends(
    traces_dir: Path,
) -> None:
    """Type scores that disagree with the speeds move running jobs between types; at every round the agents'
    own record of where each job runs is the simulator's, and the kept group statistics are the history's."""
    start = HELD_OUT_START + 2 * DAY
    philly = f"philly:{traces_dir}/pollux-osdi21/traces/philly.csv,model_rule=gavel"
    spec = window_spec(philly, start, start + DAY, 0.9, ["max_jobs=200"])
    rng = np.random.default_rng(2)
    rounds = []

    def scores(arrays):
        view, obs = agents.sim, agents.last_obs
        running = np.asarray(view.running)
        for j in running[~agents.is_spill[running]].tolist():
            assert agents.placed_on[j] in view.placement(j)
        ids = obs.job_ids[obs.job_ids >= 0]
        mean, size = agents.group_stats(ids)
        np.testing.assert_array_equal(mean, log_hours(agents.history.residual(ids, np.zeros(len(ids)))))
        np.testing.assert_array_equal(size, np.log1p(agents.history.group_size(ids)) / 8.0)
        rounds.append(view.now)
        speed = arrays["cands"][..., cand_column("log_speed")]
        k, n, t = speed.shape
        return np.concatenate([qssf_scores(arrays), rng.normal(0.0, 1.0, (k, n * t))], axis=1)

    agents = PriorityAgents(scores, num_agents=4, placing=True, migrate=0.1)
    agents.sim = build_simulator("small-hetero", spec, seed=0, restart_cost=30.0)
    res = agents.sim.run(agents)
    assert len(rounds) > 50 and res.restarts.sum() > res.preemptions.sum()  # jobs moved


def test_order_only_observations_schedule_as_the_full_ones(window: str) -> None:
    full = _sim(window).run(PriorityAgents(qssf_scores, num_agents=4))
    lean = _sim(window).run(PriorityAgents(qssf_scores, num_agents=4, order_only=True))
    for column in ("start", "end", "preemptions"):
        np.testing.assert_array_equal(getattr(lean, column), getattr(full, column))
    with pytest.raises(ValueError, match="order_only"):
        PriorityAgents(num_agents=4, placing=True, order_only=True)


def test_lazy_reference_answers_as_the_whole_schedule(window: str) -> None:
    full = _sim(window).run(PriorityAgents(qssf_scores, num_agents=4))
    whole = InSystemIntegral(full.workload.arrival, full.end)
    lazy = ReferenceSchedule(_sim(window), PriorityAgents(qssf_scores, num_agents=4, order_only=True))
    rng = np.random.default_rng(3)
    times = np.sort(np.concatenate([full.workload.arrival, full.end, rng.uniform(0, full.end.max() * 1.1, 300)]))
    for t in times[: len(times) // 2].tolist():
        assert lazy.count(t) == whole.count(t) and lazy(t) == whole(t) and lazy(t) == whole(t)
    assert not lazy.finished and lazy.sim.now < full.end.max()  # simulated only as far as asked
    for t in times[len(times) // 2 :].tolist():
        assert lazy.count(t) == whole.count(t) and lazy(t) == whole(t)
    assert lazy.total == whole.total and lazy.avg_jct == float(full.jct.mean()) and lazy.finished


def test_a_reset_simulates_no_schedule_and_a_replayed_window_reuses_its_reference(window: str) -> None:
    env = PriorityEnv({"workload": window, "interference": "none", "interference_data": None})
    returns = []
    for episode in range(2):
        obs, _ = env.reset()
        assert env.reference.finished == (episode == 1)  # the first reset simulated nothing of the reference
        total, done = 0.0, False
        while not done:
            obs, rew, term, _, info = env.step({a: -qssf_scores({"jobs": o["jobs"]}) for a, o in obs.items()})
            total += rew["p0"]
            done = term["__all__"]
        returns.append((total, info["p0"]))
        assert any(ref is env.reference for ref in REFERENCE_MEMO.values())
    assert returns[0] == returns[1] and returns[0][1]["avg_jct"] > returns[0][1]["reference_jct"]
    assert returns[0][0] == pytest.approx(
        -(returns[0][1]["avg_jct"] - returns[0][1]["reference_jct"]) * returns[0][1]["jobs"] / 360000
    )
