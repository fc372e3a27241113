"""Train the priority agents with RLlib PPO on trace windows, and export the result.

Warm start: the network's scores are QSSF's rank key plus a residual whose last layer starts at zero
(:mod:`marl.models.priority_net`), so iteration 0 *is* QSSF, the strongest non-oracle heuristic; PPO then learns
where to deviate. The reward is relative to QSSF's schedule of the same window
(:mod:`marl.env.priority_env`), an input-dependent baseline. Progress goes to ``progress.csv`` and a
learning-curve PNG; the network is exported to ``OUT/policy`` (:mod:`marl.deploy.priority_export`), and every
``snapshot_every`` iterations to ``OUT/snapshots/iter-NNN``, so that a policy can be selected on held-out
windows (``experiments/benchmarks/heuristic_spread.py --policies marl:OUT/snapshots/iter-NNN``). A
``select:`` section then makes the best of the warm start, the snapshots and the last iterate on the select
period's windows the exported policy (:mod:`marl.training.priority_select`), and a ``tune:`` section selects its
preemption margin on the training period (:mod:`marl.training.priority_tune`), so the one command ends with the
policy as deployed.

Every ``checkpoint_every`` iterations the algorithm (network, optimizer, connectors) and the progress so far
are saved to ``OUT/checkpoint``; ``resume=True`` (``--resume``; ``marlsched run`` always) continues a killed
training from there. The episodes in flight at the kill are not saved: a resumed training draws new ones (its
seeds moved on by the iterations done, :func:`resumed_seeds`), so it is seeded but not bit-identical to one that
ran through.

    marlsched train-priority --config experiments/configs/marl_philly.yaml --out results/marl_philly
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cluster_sim.plugins import loaded_plugins
from cluster_sim.results import write_dict_rows
from cluster_sim.traces.periods import trace_date, trace_seconds
from marl.deploy.local_ray import QUIET_LEVEL, init_ray, stop_algorithm, without_known_noise
from marl.deploy.policy_files import code_version
from marl.env.priority_env import EnvConfigError, PriorityEnv, PriorityEnvConfig
from marl.models.inference import intra_op_threads, subnormals_flushed
from marl.training.config import ConfigChecker, TrainConfigError, read_yaml_config
from marl.training.learning_curve import Series, plot_learning_curve
from marl.training.ppo_iteration import train_iteration
from marl.training.result_log import ResultLog

CHECKPOINT_DIR = "checkpoint"  # OUT/checkpoint: the algorithm and progress after the last saved iteration

POLICY_ID = "shared"
Log = Callable[[str], None]
PPO_DEFAULTS: dict[str, Any] = {
    "time_budget_min": 30.0,
    "iterations": 200,
    "num_env_runners": 2,
    "num_cpus_per_env_runner": 0.5,
    "num_envs_per_env_runner": 1,  # environments stepped together per runner, scored in one pass
    "train_batch_size": 4000,  # environment steps (each holds one step of every agent)
    "minibatch_size": 1000,  # agent steps: rows of the shared module's batch (RLlib's unit for a minibatch)
    "num_epochs": 4,
    "lr": 3e-4,
    "gamma": 1.0,
    "lambda": 0.95,
    "clip_param": 0.2,
    "vf_loss_coeff": 0.5,
    "vf_clip_param": 1e4,
    "entropy_coeff": 0.0,
    "grad_clip": 1.0,
    "sample_timeout_s": 1800,
    "snapshot_every": 10,  # export OUT/snapshots/iter-NNN every so many iterations (0: never), for selection
    "checkpoint_every": 1,  # save OUT/checkpoint every so many iterations (0: never), to resume a killed run
    "runner_restart_delay_s": 2.0,  # a failed EnvRunner is restarted (Ray Core) after this pause (RLlib: 60 s)
    "max_runner_restarts": 100,  # restarts allowed over the run before RLlib gives a runner up
    "runner_wait_s": 180.0,  # how long an iteration whose every runner failed waits for restarted ones
    "runner_probe_timeout_s": 5.0,  # each iteration's wait for a failed runner to answer (RLlib: 30 s)
    "learner_threads": 1,  # the learner's intra-op threads: more update faster, but not bit for bit
    # imitation inside the learner (marl.training.imitation): coef x DAgger's regression of the order scores
    # on the privileged ln remaining time, added to PPO's loss for the first imitation_iterations (0: all)
    "imitation_coef": 0.0,
    "imitation_iterations": 0,
    "imitation_rank_weight": 3.0,
}
# init_policy: a priority policy folder to start from (e.g. the DAgger-trained one) instead of QSSF's scores
# init_type_log_std: the placing agents' type-score noise (None: init_log_std); a move needs only ln 1.2
MODEL_DEFAULTS: dict[str, Any] = {"hidden": 64, "init_log_std": -1.0, "init_policy": None, "init_type_log_std": None}
CONFIG_SECTIONS = frozenset({"name", "seed", "env", "model", "ppo", "ray", "select", "tune"})
WARM_START_DIR = "warm_start"  # OUT/warm_start: the network before any update (the paired reference)


# env settings that the ppo section decides, and what to set instead
SET_BY_TRAINING = {
    "envs_per_runner": "ppo.num_envs_per_env_runner",
    "imitation_label": "ppo.imitation_coef",
    "plugins": "marlsched --plugin FILE (or a run config's plugins:)",
}
IMITATION_ZERO = {"imitation_coef": "no imitation", "imitation_iterations": "every iteration",
                  "imitation_rank_weight": "the squared error alone"}  # fmt: skip
RAY_KEYS = ("num_cpus", "object_store_mb", "address")  # address: a Ray cluster (None: Ray starts in-process)


def load_config(path: str | Path) -> dict[str, Any]:
    """The YAML config with defaults filled in; an unknown section or key is named with its line."""
    data, lines = read_yaml_config(path, "training config", TrainConfigError)
    data = dict(data or {})
    if data.get("agent", "priority") != "priority":
        raise ConfigChecker(str(path), lines).fail(("agent",), f"{data['agent']!r}: use `marlsched train --config`")
    data.pop("agent", None)
    algo = data.pop("algo", "ppo")
    if algo not in ("ppo", "appo"):
        raise ConfigChecker(str(path), lines).fail(("algo",), "this trainer is RLlib's; use `marlsched train --config`")
    return (parse_checked_appo if algo == "appo" else parse_checked)(data, str(path), lines)


def parse_checked(
    data: Any, source: str, lines: dict[tuple[str, ...], int], chk: ConfigChecker | None = None
) -> dict[str, Any]:
    """:func:`parse_config` of a file's data, its errors naming the lines of ``source`` (``chk``: a checker
    already made, e.g. for a section of a larger file)."""
    return parse_config(data, source, default_name=Path(source).stem, chk=chk or ConfigChecker(source, lines))


def parse_checked_appo(
    data: Any, source: str, lines: dict[tuple[str, ...], int], chk: ConfigChecker | None = None
) -> dict[str, Any]:
    """:func:`parse_checked` for ``algo: appo``: the same sections, trained with RLlib's APPO."""
    chk = chk or ConfigChecker(source, lines)
    cfg = parse_checked(data, source, lines, chk)
    if cfg["ppo"]["imitation_coef"] > 0:
        raise chk.fail(("ppo", "imitation_coef"), "imitation in the learner is PPO's and APPO has none: set algo: "
                       "ppo, or remove ppo.imitation_coef")  # fmt: skip
    return {**cfg, "algo": "appo"}


def check_keys(data: Mapping[str, Any], chk: ConfigChecker) -> None:
    """Every section and key known, else its path, line and the allowed keys (the values: :func:`parse_config`)."""
    from dataclasses import fields as dc_fields

    from marl.training.priority_select import SELECT_DEFAULTS, SELECT_SPAN
    from marl.training.priority_tune import TUNE_DEFAULTS

    allowed = {
        "env": [f.name for f in dc_fields(PriorityEnvConfig) if f.name not in SET_BY_TRAINING],
        "model": list(MODEL_DEFAULTS), "ppo": list(PPO_DEFAULTS), "tune": list(TUNE_DEFAULTS), "ray": list(RAY_KEYS),
        "select": [*SELECT_DEFAULTS, *SELECT_SPAN],
    }  # fmt: skip
    if not isinstance(data, Mapping):
        raise chk.fail((), f"expected a mapping with the sections {', '.join(sorted(CONFIG_SECTIONS))}")
    for key, value in data.items():
        if key not in CONFIG_SECTIONS:
            if home := [section for section, keys in allowed.items() if key in keys]:  # a section's key at the top
                raise chk.fail((str(key),), f"is a key of the section {home[0]}: write {home[0]}.{key} (--set "
                               f"{home[0]}.{key}=...) or put it under `{home[0]}:`")  # fmt: skip
            raise chk.unknown((str(key),), sorted(CONFIG_SECTIONS))
        if key in allowed and value is not None:
            if not isinstance(value, Mapping):
                raise chk.fail((key,), f"expected a mapping with keys {', '.join(allowed[key])}, got {value!r}")
            for sub in value:
                if key == "env" and sub in SET_BY_TRAINING:
                    raise chk.fail((key, str(sub)), f"set by training from {SET_BY_TRAINING[sub]}; remove it and set "
                                   f"{SET_BY_TRAINING[sub]} instead")  # fmt: skip
                if sub not in allowed[key]:
                    raise chk.unknown((key, str(sub)), list(allowed[key]))


# the types of the ppo and model keys (env: PriorityEnvConfig's annotations)
PPO_TYPES: dict[str, Any] = {k: float if isinstance(v, float) else int for k, v in PPO_DEFAULTS.items()} | {
    "sample_timeout_s": float
}
MODEL_TYPES: dict[str, Any] = {"hidden": int, "init_log_std": float, "init_policy": str | None,
                               "init_type_log_std": float | None}  # fmt: skip
SEED_TYPES: dict[str, Any] = {"seed": int, "name": str}


def check_value_types(raw: Mapping[str, Any], chk: ConfigChecker) -> None:
    """Every value of the known keys of the wrong type is named by its path and line, with the type it takes
    (``window_days: half`` is refused here, not met later as a Python error)."""
    import typing

    checked_apart = ("load", "train_start", "train_end")  # a pair, and dates: read by parse_config itself
    env_types = {k: v for k, v in typing.get_type_hints(PriorityEnvConfig).items() if k not in checked_apart}
    for key, hint in SEED_TYPES.items():
        if key in raw:
            chk.check_type((key,), raw[key], hint)
    for section, types in (("env", env_types), ("ppo", PPO_TYPES), ("model", MODEL_TYPES)):
        for key, value in (raw.get(section) or {}).items():
            if key in types:
                chk.check_type((section, str(key)), value, types[key])


def parse_config(
    raw: Mapping[str, Any], path: str, default_name: str = "priority", chk: ConfigChecker | None = None
) -> dict[str, Any]:
    """Plain data (a YAML file's, or an experiment's ``train:`` section) into a training config with defaults
    filled in; ``path`` names where it came from in the errors (``chk``: with the lines of its keys)."""
    chk = chk or ConfigChecker(path, {})
    check_keys(raw, chk)
    from marl.training.priority_select import SELECT_DEFAULTS
    from marl.training.priority_tune import TUNE_DEFAULTS

    check_value_types(raw, chk)
    envs = (raw.get("ppo") or {}).get("num_envs_per_env_runner", 1)
    if envs < 1:
        raise chk.fail(("ppo", "num_envs_per_env_runner"), f"must be an integer >= 1, got {envs!r}")
    ppo = {**PPO_DEFAULTS, **(raw.get("ppo") or {})}
    for key in ("imitation_coef", "imitation_iterations", "imitation_rank_weight"):
        if ppo[key] < 0:
            raise chk.fail(("ppo", key), f"must be >= 0 (0: {IMITATION_ZERO[key]}), got {ppo[key]!r}")
    env = dict(raw.get("env") or {})
    env.setdefault("seed", int(raw.get("seed", 0)))
    # the cluster recorded even where it is the default: a policy folder says what it was trained on
    env.setdefault("cluster", PriorityEnvConfig.__dataclass_fields__["cluster"].default)
    given = {key: env[key] for key in ("train_start", "train_end") if key in env}  # as written, for messages
    for key in ("train_start", "train_end"):  # dates as seconds: the config is recorded as JSON
        if key in env:
            try:
                env[key] = trace_seconds(env[key], env.get("trace", PriorityEnvConfig.trace))
            except ValueError as err:
                raise chk.fail(("env", key), str(err)) from None
    if "load" in env:  # a number or a [low, high] range: anything else is named here, with its key
        load = env["load"]
        pair = isinstance(load, list) and len(load) == 2
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (load if pair else [load])):
            raise chk.fail(("env", "load"), f"expected a number or [low, high] (e.g. [0.8, 1.1]), got {load!r}")
    _check_span(env, given, chk)
    model = {**MODEL_DEFAULTS, **(raw.get("model") or {})}
    if model["init_policy"]:
        _start_from_policy(path, model, env, "hidden" in (raw.get("model") or {}))
    try:
        env_cfg = PriorityEnvConfig.from_dict(env)  # validates, names the bad key
    except EnvConfigError as e:
        raise chk.fail(("env", e.key), str(e)) from None
    except (TypeError, ValueError) as e:
        raise chk.fail(("env",), str(e)) from None
    _check_partitions(env_cfg, chk)
    select = {**SELECT_DEFAULTS, **raw["select"]} if raw.get("select") is not None else None
    if select is not None:  # its windows, before training rather than after it
        from marl.training.priority_select import select_windows

        for key in ("start", "end"):  # dates as seconds: the config is recorded as JSON
            try:
                if select.get(key) is not None:
                    select[key] = trace_seconds(select[key], env_cfg.trace)
            except ValueError as err:
                raise chk.fail(("select", key), str(err)) from None
        start, end = select.get("start"), env.get("train_end")
        if env_cfg.workload is None and start is not None and end is not None and float(start) < float(end):
            raise chk.fail(
                ("select", "start"),
                f"{trace_date(float(start), env_cfg.trace)} lies inside the training span (train_end "
                f"{trace_date(float(end), env_cfg.trace)}): the iterate shipped would be chosen on windows it trained "
                "on; keep the periods apart in time order (train, select, report) and start select at train_end or "
                "later",
            )
        try:
            specs = select_windows(env_cfg.trace, select["days"], select["stride"], select["load"], select.get("start"),
                                   select.get("end"))  # fmt: skip
        except ValueError as err:
            raise chk.fail(("select",), str(err).removeprefix("select: ")) from None
        _check_windows(specs, env_cfg.cluster, ("select", "load"), chk)
    return {
        "name": raw.get("name", default_name),
        "seed": int(raw.get("seed", 0)),
        "env": env,
        "model": model,
        "ppo": ppo,
        "ray": {"num_cpus": 2, "object_store_mb": 100, "address": None, **(raw.get("ray") or {})},
        # None: the last iterate is exported (no selection on the select period's windows)
        "select": select,
        # None: no margin selection after training (``marlsched tune-priority`` can run it later)
        "tune": {**TUNE_DEFAULTS, **raw["tune"]} if raw.get("tune") is not None else None,
    }


def _check_windows(specs: list[str], cluster: str, key: tuple[str, ...], chk: ConfigChecker) -> None:
    """Each window offers its load on the cluster: said at ``key`` before training, not after it."""
    from cluster_sim.workload_spec import parse_workload_spec
    from topology import build_cluster

    gpus = build_cluster(cluster).view.num_gpus
    for spec in specs:
        try:
            parse_workload_spec(spec, cluster_gpus=gpus, seed=0)
        except ValueError as err:
            raise chk.fail(key, str(err)) from None


def _check_span(env: Mapping[str, Any], given: Mapping[str, Any], chk: ConfigChecker) -> None:
    """The training span of a trace (``train_start``, ``train_end``, in seconds; ``given``: as written) runs
    forward and holds jobs of it: said at its key, in the trace's dates, before any window is drawn."""
    from cluster_sim.workload_spec import parse_workload_spec

    trace, first, last = env.get("trace"), env.get("train_start"), env.get("train_end")
    if env.get("workload") is not None or not isinstance(trace, str) or first is None or last is None:
        return

    def said(key: str, seconds: float) -> str:
        return str(given[key]) if key in given else trace_date(seconds, trace)

    span = f"{said('train_start', float(first))}..{said('train_end', float(last))}"
    try:
        arrivals = parse_workload_spec(trace, cluster_gpus=1, seed=0).arrival
    except (ValueError, OSError):
        arrivals = None  # the trace's own error is said where it is read
    if arrivals is not None and len(arrivals) and (float(first) > arrivals[-1] or float(last) <= arrivals[0]):
        key = "train_start" if float(first) > arrivals[-1] else "train_end"
        raise chk.fail(
            ("env", key),
            f"the training span {span} holds no job of {trace}: its jobs arrive from "
            f"{trace_date(float(arrivals[0]), trace)} to {trace_date(float(arrivals[-1]), trace)}",
        )
    if float(last) <= float(first):
        raise chk.fail(("env", "train_end"), f"the training span {span} ends before it starts; train_end comes after "
                       "train_start")  # fmt: skip


def _check_partitions(env: PriorityEnvConfig, chk: ConfigChecker) -> None:
    """``env.num_agents`` splits the cluster's racks evenly: said at the key, before Ray starts, not by the
    first env built on a worker."""
    from topology import ClusterSpecError, build_cluster
    from topology.partition import partition

    try:
        view = build_cluster(env.cluster).view
    except (ClusterSpecError, OSError, ValueError) as err:
        raise chk.fail(("env", "cluster"), str(err)) from None
    try:
        partition(view, env.num_agents)
    except ValueError as err:
        raise chk.fail(("env", "num_agents"), str(err)) from None


def _start_from_policy(path: str, model: dict[str, Any], env: dict[str, Any], hidden_given: bool) -> None:
    """Check ``model.init_policy`` and take its network size and, unless the env sets one, the preemption
    margin it runs with (a policy trained at ln 8 fine-tuned at ln 31 would start from another schedule)."""
    from marl.deploy.priority_export import read_priority_metadata

    folder = Path(model["init_policy"])
    try:
        meta = read_priority_metadata(folder)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: model.init_policy: {e}") from None
    if hidden_given and int(model["hidden"]) != int(meta["hidden"]):
        raise ValueError(
            f"{path}: model.hidden {model['hidden']} differs from init_policy's {meta['hidden']} ({folder}); drop "
            "model.hidden to take the policy's"
        )
    model["hidden"] = int(meta["hidden"])
    if "hysteresis" in meta.get("agents", {}):
        env.setdefault("hysteresis", float(meta["agents"]["hysteresis"]))


def _callbacks() -> type:
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class EpisodeGain(RLlibCallback):
        """Logs each finished episode's average JCT and its gain over the reference schedule."""

        def on_episode_end(self, *, episode, metrics_logger=None, **kwargs) -> None:
            info = next((i for i in episode.get_infos(-1).values() if isinstance(i, Mapping) and "avg_jct" in i), None)
            if info is None or metrics_logger is None:
                return
            metrics_logger.log_value("avg_jct", float(info["avg_jct"]), reduce="mean")
            metrics_logger.log_value("gain", 1.0 - info["avg_jct"] / info["reference_jct"], reduce="mean")

    return EpisodeGain


def ppo_config(cfg: Mapping[str, Any]) -> Any:
    """RLlib's config of the training: PPO, or APPO where ``cfg["algo"]`` is ``appo`` (the same ``ppo:``
    section: batch, minibatch, learning rate, clip, GAE's lambda as V-trace's; asynchronous: the runners
    sample while the learner's thread updates, each update on a batch of ``train_batch_size`` steps)."""
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec

    from marl.deploy.policy_files import network_file
    from marl.models.priority_module import priority_module_spec
    from marl.training.env_runner import PartitionEnvRunner

    p = cfg["ppo"]
    layout = PriorityEnv(cfg["env"]).layout
    model = dict(cfg["model"])
    if model["init_policy"]:  # absolute: env runners may not share the driver's working directory
        model["init_policy"] = str(network_file(model["init_policy"]).resolve())
    spec = priority_module_spec(layout, **model)
    appo = cfg.get("algo", "ppo") == "appo"
    imitation = float(p["imitation_coef"]) > 0
    config = (
        (APPOConfig() if appo else PPOConfig())
        .environment(
            PriorityEnv,
            env_config={**cfg["env"], "envs_per_runner": p["num_envs_per_env_runner"], "imitation_label": imitation,
                        "plugins": tuple(loaded_plugins())},
            disable_env_checking=True,
            normalize_actions=False,
            clip_actions=False,
        )
        .env_runners(
            env_runner_cls=PartitionEnvRunner,
            num_env_runners=p["num_env_runners"],
            num_cpus_per_env_runner=p["num_cpus_per_env_runner"],
            num_envs_per_env_runner=p["num_envs_per_env_runner"],
            sample_timeout_s=p["sample_timeout_s"],
        )
        .fault_tolerance(
            restart_failed_env_runners=True,
            max_num_env_runner_restarts=int(p["max_runner_restarts"]),
            delay_between_env_runner_restarts_s=float(p["runner_restart_delay_s"]),
            env_runner_health_probe_timeout_s=float(p["runner_probe_timeout_s"]),
        )
        .learners(num_learners=0)
        .multi_agent(policies={POLICY_ID}, policy_mapping_fn=lambda agent_id, episode=None, **kw: POLICY_ID)
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={POLICY_ID: spec}))
        .training(
            train_batch_size_per_learner=p["train_batch_size"], lr=p["lr"], gamma=p["gamma"], lambda_=p["lambda"],
            clip_param=p["clip_param"], vf_loss_coeff=p["vf_loss_coeff"], entropy_coeff=p["entropy_coeff"],
            grad_clip=p["grad_clip"],
        )
        .callbacks(_callbacks())
        .debugging(seed=cfg["seed"], log_level=logging.getLevelName(QUIET_LEVEL))  # RLlib sets its logger's level
    )  # fmt: skip
    if appo:  # each batch used num_epochs times from a buffer of 4 batches; the target copy synced every 2 updates
        return config.training(
            vtrace=True, use_kl_loss=False, circular_buffer_num_batches=4,
            circular_buffer_iterations_per_batch=p["num_epochs"], target_network_update_freq=2,
        ).reporting(  # an iteration: a batch's worth of new steps, as PPO's (RLlib's APPO: 10 s)
            min_time_s_per_iteration=0, min_sample_timesteps_per_iteration=p["train_batch_size"]
        )  # fmt: skip
    config = config.training(
        minibatch_size=p["minibatch_size"], num_epochs=p["num_epochs"], vf_clip_param=p["vf_clip_param"]
    )
    if imitation:  # DAgger's regression in PPO's learner, on the labels the env adds to each agent's info
        from marl.training.imitation import ImitationPPOLearner, imitation_connector

        settings = {"coef": float(p["imitation_coef"]), "iterations": int(p["imitation_iterations"]),
                    "rank_weight": float(p["imitation_rank_weight"]), "batch": int(p["train_batch_size"])}  # fmt: skip
        config = config.training(learner_class=ImitationPPOLearner, learner_connector=imitation_connector).learners(
            learner_config_dict={"imitation": settings}
        )
    return config


def runner_faults(result: Mapping[str, Any], runners: int, envs_per_runner: int) -> dict[str, int]:
    """EnvRunner failures so far (restarted, or down at the iteration's end) and the episodes they dropped:
    a killed runner's unfinished episodes never reach a batch, and its restart begins new ones."""
    stats = result.get("fault_tolerance", {}) or {}
    restarts = int(stats.get("num_remote_worker_restarts", 0) or 0)
    down = max(0, runners - int(stats.get("num_healthy_workers", runners) or 0)) if runners else 0
    return {"runner_failures": restarts + down, "episodes_dropped": (restarts + down) * envs_per_runner}


def _untrained_scores(env: Mapping[str, Any]) -> str:
    """What the untrained network's outputs are: QSSF's scores, or the rounds' heuristic it leans."""
    decision = env.get("decision", "partitions")
    if ":" in decision:  # a decision layer of one's own, untrained: QSSF's scores in it
        return f"QSSF's scores in {decision}"
    return "QSSF's scores" if decision == "partitions" else decision


def reference_name(env: Mapping[str, Any]) -> str:
    """What the reward is relative to: the untrained agents' schedule of the same window. On partitions that is
    QSSF's order within each agent's racks, not the QSSF scheduler (one queue over the cluster), which on a
    small cluster cut in few partitions can be much better: the name says how many."""
    if env.get("decision", "partitions") != "partitions":
        return _untrained_scores(env)
    agents = int(env.get("num_agents", PriorityEnvConfig.num_agents))
    return "QSSF's scores" if agents == 1 else f"the untrained agents (QSSF's scores on {agents} partitions)"


def _reference_of(env: Mapping[str, Any]) -> str | None:
    """:func:`reference_name`, or None where the reward is absolute (``relative: false``: no reference runs)."""
    return reference_name(env) if env.get("relative", True) else None


def progress_line(row: Mapping[str, Any], reference: str | None = "QSSF's scores") -> str:
    """One iteration's line: its steps and speed, and the episodes that finished in it (on training windows, so
    a training figure, not a held-out one); says so where none finished instead of printing nan. ``reference``
    None: no reference schedule ran, the episodes' JCT alone."""
    head = (
        f"iter {row['iteration']:3d}  {row['minutes']:5.1f} min  steps {row['env_steps']:>8} "
        f"({row['env_steps_per_s']:,.0f}/s)  episodes {row['episodes']:>4}"
    )
    failed = int(row.get("runner_failures", 0))
    if failed:
        dropped = int(row["episodes_dropped"])
        head += f"  [{failed} EnvRunner failure(s) so far, {dropped} unfinished episode(s) dropped]"
    if math.isfinite(row.get("imitation_loss", math.nan)):
        head += f"  imitation loss {row['imitation_loss']:.3f}"
    if not math.isfinite(row["avg_jct"]):
        return f"{head}  no episode finished in this iteration (a window outlasts one iteration's batch)"
    if reference is None or not math.isfinite(row["gain"]):
        return f"{head}  training windows, exploring: avg JCT {row['avg_jct']:,.0f} s (not held out)"
    than = "shorter" if row["gain"] >= 0 else "longer"
    return (
        f"{head}  training windows, exploring: avg JCT {row['avg_jct']:,.0f} s, {abs(100 * row['gain']):.2f}% "
        f"{than} than {reference} on them (not held out)"
    )


MIN_CURVE_POINTS = 5  # fewer iterations with a finished episode draw no trend: the plot says so


def plot_curve(rows: list[dict[str, Any]], path: Path, reference: str | None = "QSSF's scores") -> None:
    """Training episodes' gain over the reference schedule of the same window (the untrained agents': QSSF's
    scores, or ``gavel-las`` on its rounds; not the start of a run from ``init_policy``), against training time;
    ``reference`` None (an absolute reward): their average JCT."""
    if reference is None:
        plot_learning_curve(
            rows, path, [Series("avg_jct", x="minutes")], xlabel="training time (min)",
            ylabel="training episodes' avg JCT (s)", min_points=MIN_CURVE_POINTS,
            title="training episodes (each on its own window: absolute reward, no reference)",
        )  # fmt: skip
        return
    plot_learning_curve(
        rows, path, [Series("gain", x="minutes", scale=100.0)], xlabel="training time (min)",
        ylabel="avg JCT below reference (%)", references={f"{reference} (reference)": 0.0},
        min_points=MIN_CURVE_POINTS, title=f"training episodes vs {reference} on the same window",
    )  # fmt: skip


def _as_json(cfg: Mapping[str, Any]) -> Any:
    """``cfg`` as it reads back from JSON (tuples as lists), to compare a checkpoint's config with this one."""
    return json.loads(json.dumps(cfg, default=str))


RESUME_SEED_STRIDE = 100_003  # seeds of a training resumed after k iterations: seed + k x this, apart from others


def resumed_seeds(cfg: Mapping[str, Any], done: int) -> Mapping[str, Any]:
    """``cfg`` with its seeds moved on for a training resumed after ``done`` iterations: fresh runners would
    otherwise draw the windows and exploration of iteration 1 again. The same ``done`` gives the same seeds,
    so a resumed training is seeded too."""
    if done <= 0:
        return cfg
    step = RESUME_SEED_STRIDE * done
    return {**cfg, "seed": int(cfg["seed"]) + step, "env": {**cfg["env"], "seed": int(cfg["env"]["seed"]) + step}}


def iterations_saved(ckpt: Path) -> int:
    """How many iterations the checkpoint in ``ckpt`` holds (0: none)."""
    from marl.deploy.policy_files import read_json

    return len(read_json(ckpt / "progress.json").get("rows", [])) if (ckpt / "progress.json").is_file() else 0


def _resume_point(algo: Any, cfg: Mapping[str, Any], ckpt: Path, log: Log) -> dict[str, Any] | None:
    """Restore ``algo`` from the checkpoint folder ``ckpt`` and return its saved progress; None where there is
    none. A checkpoint of another config is refused with the fix."""
    from marl.deploy.policy_files import read_json

    if not (ckpt / "progress.json").is_file():
        return None
    saved = read_json(ckpt / "progress.json")
    if saved.get("config") != _as_json(cfg):
        raise ValueError(
            f"{ckpt}: saved by a training with another config; train into another --out, or delete {ckpt} "
            "to start this one afresh"
        )
    algo.restore_from_path(str((ckpt / "algo").resolve()))
    log(f"resuming after iteration {len(saved['rows'])} from {ckpt}")
    return saved


def _save_checkpoint(algo: Any, cfg: Mapping[str, Any], ckpt: Path, progress: dict[str, Any]) -> None:
    """The algorithm and ``progress`` into ``ckpt``, replacing the previous checkpoint only once complete."""
    from marl.deploy.policy_files import atomic_folder

    with atomic_folder(ckpt) as tmp:
        algo.save_to_path(str((tmp / "algo").resolve()))
        (tmp / "progress.json").write_text(json.dumps({"config": _as_json(cfg), **progress}, indent=1) + "\n")


def _threads(value: Any) -> int | None:
    """``ppo.learner_threads``: a positive count, or None (torch's default: a thread per core)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"ppo.learner_threads: {value!r} is not a positive whole number (or null: one per core)")
    return value


def train_priority(
    config: str | Path | Mapping[str, Any],
    out_dir: str | Path,
    log: Log = print,
    command: str | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train, log progress, export ``OUT/warm_start`` (the network before any update) and ``OUT/policy`` and,
    with a ``tune`` section, select its margin. ``config``: a YAML path, or a config from :func:`parse_config`.
    ``resume``: continue from ``OUT/checkpoint`` where a killed training left one."""
    import shutil

    import ray

    t0 = time.perf_counter()  # the minutes logged include Ray's start-up
    code_version()  # the commit recorded in the policy's provenance is the one that starts training
    cfg = dict(config) if isinstance(config, Mapping) else load_config(config)
    # A first window drawn here: settings no window can meet fail now, with their message, not inside the
    # env runners (whose errors go to Ray's worker logs).
    first = PriorityEnv(cfg["env"])
    first.draw_simulator()
    first.refuse_mostly_quiet()
    learner_threads = _threads(cfg["ppo"]["learner_threads"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ray_cfg = cfg["ray"]
    started = init_ray(ray_cfg.get("address"), ray_cfg["num_cpus"], int(ray_cfg["object_store_mb"]) * 1024**2, log)
    p = cfg["ppo"]
    rows: list[dict[str, Any]] = []
    resumed: list[int] = []  # the iterations after which a killed training was resumed
    ckpt = out / CHECKPOINT_DIR
    with without_known_noise():  # the env runners start here
        algo = ppo_config(resumed_seeds(cfg, iterations_saved(ckpt) if resume else 0)).build_algo()
    command = command or f"marlsched train-priority --config {config} --out {out_dir}"
    export = _exporter(algo, cfg, rows, command, resumed)
    results = ResultLog(out)  # Ray's result.json and TensorBoard events: `tensorboard --logdir OUT`
    try:
        saved = _resume_point(algo, cfg, ckpt, log) if resume else None
        finished = False
        if saved is None:
            export(out / WARM_START_DIR)
        else:
            rows.extend(saved["rows"])
            resumed.extend([*saved["resumed"], len(rows)])
            finished = bool(saved["finished"])
            t0 -= 60.0 * rows[-1]["minutes"] if rows else 0.0  # the minutes continue the killed run's
        for it in range(len(rows) + 1, 0 if finished else int(p["iterations"]) + 1):
            # the learner's passes run here: a trained start reaches subnormals; a fixed thread count repeats
            with subnormals_flushed(), intra_op_threads(learner_threads):
                res = train_iteration(algo, it, wait_s=float(p["runner_wait_s"]), log=log)
            runners = res.get("env_runners", {})
            results.write(res, step=int(res.get("num_env_steps_sampled_lifetime", 0) or 0))
            row = {
                "iteration": it,
                "minutes": (time.perf_counter() - t0) / 60.0,
                "env_steps": int(res.get("num_env_steps_sampled_lifetime", 0) or 0),
                "episodes": int(runners.get("num_episodes_lifetime", 0) or 0),
                "gain": float(runners.get("gain", float("nan"))),
                "avg_jct": float(runners.get("avg_jct", float("nan"))),
                "return": float(runners.get("episode_return_mean", float("nan"))),
                **runner_faults(res, int(p["num_env_runners"]), int(p["num_envs_per_env_runner"])),
            }
            if float(p["imitation_coef"]) > 0:  # the learner's imitation loss (nan once it is off)
                from marl.training.imitation import mean_loss

                on = int(p["imitation_iterations"]) == 0 or it <= int(p["imitation_iterations"])
                row["imitation_loss"] = mean_loss(res.get("learners", {}).get(POLICY_ID, {})) if on else math.nan
            seconds = 60.0 * (row["minutes"] - (rows[-1]["minutes"] if rows else 0.0))
            row["env_steps_per_s"] = (row["env_steps"] - (rows[-1]["env_steps"] if rows else 0)) / max(seconds, 1e-9)
            rows.append(row)
            log(progress_line(row, _reference_of(cfg["env"])))
            write_dict_rows(rows, out / "progress.csv")
            plot_curve(rows, out / "learning_curve.png", _reference_of(cfg["env"]))
            last = row["minutes"] >= float(p["time_budget_min"]) or it == int(p["iterations"])
            every = int(p["snapshot_every"])
            if every and it % every == 0 and not last:
                export(out / "snapshots" / f"iter-{it:03d}")
            ckpt_every = int(p["checkpoint_every"])
            if ckpt_every and (it % ckpt_every == 0 or last):
                _save_checkpoint(algo, cfg, ckpt, {"rows": rows, "resumed": resumed, "finished": last})
            if last:
                if it < int(p["iterations"]):
                    log(
                        f"stopped by ppo.time_budget_min after {it} iterations; to make this policy again on any "
                        f"machine: {rebuild_command(command, it, int(p['iterations']))}"
                    )
                break
        policy = export(out / "policy")
        log(f"last iterate exported to {policy}" + (" (the select stage may replace it)" if cfg.get("select") else ""))
    finally:
        results.close()
        stop_algorithm(algo)
        if started:
            ray.shutdown()
    summary: dict[str, Any] = {
        "iterations": len(rows), "rows": rows, "policy": str(out / "policy"), "resumed_after": resumed,
    }  # fmt: skip
    if cfg.get("select") is not None:
        from marl.training.priority_select import select_iterate

        s = cfg["select"]
        summary["selected"] = select_iterate(
            out, cfg["env"], days=s["days"], stride=s["stride"], load=s["load"], workers=s["workers"],
            start=s.get("start"), end=s.get("end"), command=command, log=log,
        )  # fmt: skip
    if cfg["tune"] is not None:
        from marl.training.priority_tune import tune_hysteresis

        t = cfg["tune"]
        summary["tuned"] = tune_hysteresis(
            policy, cfg["env"], factors=t["factors"], days=t["days"], stride=t["stride"], load=t["load"],
            workers=t["workers"], command=command, log=log,
        )  # fmt: skip
    shutil.rmtree(ckpt, ignore_errors=True)  # the policy is complete: nothing left to resume
    summary["minutes"] = (time.perf_counter() - t0) / 60.0
    log(f"training to the exported policy: {summary['minutes']:.1f} min")
    return summary


def rebuild_command(command: str, done: int, iterations: int) -> str:
    """The command that makes this iterate again on any machine: ``command`` where training ran its
    ``iterations``; where the wall-clock budget (``ppo.time_budget_min``) ended it first, or for a snapshot,
    the same with ``--iterations`` set to the iterations done and the budget lifted, since a slower or faster
    machine would stop elsewhere."""
    if done >= iterations or not command.startswith("marlsched train "):
        return command
    return f"{command} --iterations {done} --set ppo.time_budget_min=1e9"


def _exporter(
    algo: Any, cfg: Mapping[str, Any], rows: list[dict[str, Any]], command: str, resumed: list[int]
) -> Callable[[Path], Path]:
    """``export(folder)``: the shared module's network as a policy folder, with how it was made."""
    from marl.deploy.priority_export import agents_as_trained, save_priority_policy
    from marl.models.priority_net import PlacingPriorityNet, PriorityNet

    def export(folder: Path) -> Path:
        module = algo.get_module(POLICY_ID)
        # the learner's weights: PPO copies them to this (driver's) runner every iteration, APPO only to the runners
        # that sample, so the driver's copy would still be the warm start
        module.set_state(algo.learner_group.get_weights([POLICY_ID])[POLICY_ID])
        env = cfg["env"]
        hidden = int(cfg["model"]["hidden"])
        inputs = bool(env.get("interference_inputs"))
        net = PlacingPriorityNet(hidden, inputs) if env.get("placing") else PriorityNet(hidden)
        net.load_state_dict(module.net.state_dict())
        # one per rack, on any cluster, unless trained otherwise (then as trained: agents_as_trained)
        counted = agents_as_trained(env["cluster"], int(env.get("num_agents", PriorityEnvConfig.num_agents)))
        agents = {"hysteresis": env.get("hysteresis", PriorityEnvConfig.hysteresis), **(counted or {"per": "rack"})}
        if env.get("placing"):  # an agent must hold several GPU types to choose: run as many as trained
            agents = {"hysteresis": agents["hysteresis"], "num_agents": env.get("num_agents", 4),
                      "migrate": env.get("migrate"), "interference_inputs": env.get("interference_inputs")}  # fmt: skip
        if env.get("decision", "partitions") != "partitions":  # the agents lean a cluster-wide round
            agents["decision"] = env["decision"]
        if env.get("interference_online"):  # they correct their predictor as they go, as in training
            agents["interference_online"] = True
        meta = {
            "agents": agents,
            "warm_start": cfg["model"]["init_policy"] or f"{_untrained_scores(env)} (the untrained network)",
            "trained": {
                "command": command,
                "config": cfg,
                "iterations": len(rows),
                "resumed_after": list(resumed),
                "minutes": rows[-1]["minutes"] if rows else 0.0,
                "rebuild_command": rebuild_command(command, len(rows), int(cfg["ppo"]["iterations"])),
                "log_std": float(module.log_std.detach()),
                "type_log_std": float(module.type_log_std.detach()),
                "python": sys.version.split()[0],
            },
        }
        return save_priority_policy(net, folder, meta)

    return export
