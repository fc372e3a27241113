"""Experiment configs for `marlsched run`: one YAML file describes a whole experiment (cluster, workload,
schedulers to compare over seeds, optional MARL training, optional agent-count scaling, Ray settings).

Validation reuses marl.training.config's checker, so a wrong key or value fails at once with the file, the dotted
key path, its line and the allowed keys or values. The ``train`` section is a training config of
`marlsched train --config` (``agent``, ``algo`` and their settings; default the priority agents' PPO); the
cluster it leaves out is the experiment's, and so is the interference where the experiment has one;
``train.extends: PATH`` starts from such a YAML file and the other keys of the section override it (mappings
merge key by key).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from cluster_sim.policy_folders import load_folder_policy, split_folder_name
from interference.loader import interference_modes
from marl.training.config import (
    ConfigChecker,
    TrainConfigError,
    read_yaml_config,
    set_keys,
)
from topology.spec import did_you_mean

MARL = "marl"  # the scheduler name of the policy this experiment trains
MARL_WARM_START = "marl-warm-start"  # the same network before any update (a priority train section's)
PRIORITY_AGENT = "priority"  # ``train: {agent: priority, ...}``: the priority agents (marlsched train-priority)


class ExperimentConfigError(TrainConfigError):
    """An experiment config that cannot be used; the message names the file, key path, line and the fix."""


@dataclass(frozen=True)
class RayRunConfig:
    """``address`` null: Ray starts in-process with ``num_cpus`` (null: this machine's CPUs)."""

    address: str | None = None
    num_cpus: int | None = None
    object_store_mb: int = 100
    task_cpus: float = 1.0  # CPUs each evaluation task reserves


@dataclass(frozen=True)
class ScalingConfig:
    """Agent-count scaling: per K, rollout throughput, per-decision latency, one evaluation episode."""

    agents: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64])
    workload: str | None = None  # the evaluation episode's workload (default: the experiment's workload)
    seed: int = 0  # workload seed of the evaluation episode
    policy: str = "untrained"  # untrained: the network before any update; or a priority policy folder
    env_runners: int = 2  # parallel RLlib EnvRunners for the rollout throughput
    rollout_steps: int = 200  # env steps each EnvRunner samples (after a warm-up of the same size)
    rollout_workload: str = "synthetic:400,load=0.9"  # episodes the EnvRunners sample


@dataclass(frozen=True)
class PriorityTrainSection:
    """A ``train: {agent: priority, ...}`` section: the priority agents that order and, with ``env.placing``,
    place (the keys of `marlsched train-priority --config`, defaults filled in)."""

    config: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.config["name"])

    @property
    def env(self) -> dict[str, Any]:
        return self.config["env"]

    def to_dict(self) -> dict[str, Any]:
        return {"agent": PRIORITY_AGENT, **self.config}


@dataclass(frozen=True)
class TrainSection:
    """A ``train:`` section of any other agent or algorithm than the priority agents' PPO: trained as its own
    config says (its windows; the cluster and interference it leaves out are the experiment's), then evaluated as
    ``marl`` on the experiment's workloads."""

    agent: str
    algo: str
    data: dict[str, Any]  # the section's keys (extends merged), as `marlsched train --config` reads them
    settings: Any  # the checked settings (marl.training.recipes.check_settings)

    @property
    def name(self) -> str:
        return f"{self.agent}-{self.algo}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.data, "agent": self.agent, "algo": self.algo}


@dataclass(frozen=True)
class ExperimentConfig:
    name: str = "experiment"
    seed: int = 0
    plugins: list[str] = field(default_factory=list)  # modules imported first (they register extensions)
    cluster: str | dict[str, Any] = "small"
    workload: str = "synthetic:300,load=0.9"
    workloads: dict[str, str] | None = None  # label -> workload spec: every scheduler runs on each (replaces workload)
    # a paper's simulator settings (cluster_sim.sim_presets): they fill the keys below that the file leaves out
    preset: str | None = None
    interference: str = "oracle"  # ground truth of the evaluation simulator
    interference_data: str | None = None  # oracle: gavel:PATH of measured pairs; learned: model file
    restart_cost: float = 30.0
    start_cost: float = 0.0  # seconds every job's first start stalls too (Pollux charges 30 s)
    app_restart_costs: bool = False  # each application's own restart cost on every allocation (Sia's)
    calibration: bool = False  # Sia's per-application calibration slowdowns
    perf_model: bool = True
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    schedulers: list[str] = field(default_factory=lambda: ["fifo", "sjf", "tiresias"])
    baselines: list[str] = field(default_factory=lambda: ["fifo"])  # default: fifo, else the first scheduler
    # label in schedulers -> {policy: NAME, OPTION: VALUE...}: a named scheduler with its own settings
    scheduler_options: dict[str, Any] | None = None
    # published average JCTs to put beside ours: label -> {workload label: seconds}, and where they come from
    published: dict[str, Any] | None = None
    published_source: str = ""
    # the step the published figures are rounded to (s; 360 for figures given to 0.1 h): the report then says
    # whether ours lies within the interval each published figure stands for
    published_step: float | None = None
    # a paper's headline claim per scheduler label, shown in a column beside our paired improvements
    claims: dict[str, str] | None = None
    timeline_points: int = 400  # queue/utilisation samples kept per run for the plots
    train: dict[str, Any] | None = None  # validated into train_config
    scaling: dict[str, Any] | None = None  # validated into scaling_config
    ray: RayRunConfig = field(default_factory=RayRunConfig)
    source: str = field(default="<dict>", compare=False)

    @property
    def workload_specs(self) -> dict[str, str]:
        """Workload label -> spec: ``workloads``, or the single ``workload`` (label ``""``)."""
        return dict(self.workloads) if self.workloads else {"": self.workload}

    def policy_of(self, label: str) -> tuple[str, dict[str, Any]]:
        """The policy name and constructor options a scheduler label stands for."""
        opts = dict((self.scheduler_options or {}).get(label) or {})
        return str(opts.pop("policy", label)), opts

    @property
    def train_config(self) -> PriorityTrainSection | TrainSection | None:
        return self.__dict__.get("_train")

    @property
    def scaling_config(self) -> ScalingConfig | None:
        return self.__dict__.get("_scaling")

    def to_dict(self) -> dict[str, Any]:
        """Plain data; ``train`` resolved (extends merged) so that the copy in a results folder stands alone."""
        out = dataclasses.asdict(self)
        out.pop("source")
        if self.train_config is not None:
            out["train"] = self.train_config.to_dict()
        if self.scaling_config is not None:
            out["scaling"] = dataclasses.asdict(self.scaling_config)
        return out


class _PrefixedChecker(ConfigChecker):
    """marl.training.config's checker with every key path under a prefix (the embedded ``train`` section)."""

    def __init__(
        self,
        source: str,
        lines: dict[tuple[str, ...], int],
        prefix: tuple[str, ...],
        given: dict[tuple[str, ...], str] | None = None,
    ) -> None:
        super().__init__(source, lines, given)
        self.prefix = prefix

    def fail(self, path: tuple[str, ...], message: str) -> TrainConfigError:
        err = super().fail((*self.prefix, *path), message)
        return ExperimentConfigError(str(err))


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def parse_experiment_config(
    data: Any,
    source: str = "<dict>",
    lines: dict[tuple[str, ...], int] | None = None,
    given: dict[tuple[str, ...], str] | None = None,
) -> ExperimentConfig:
    """Validate plain data (as loaded from YAML) into an :class:`ExperimentConfig`; ``given``: the key paths a
    command line set (``--set``), named by that option in errors instead of a line."""
    lines = lines or {}
    chk = _PrefixedChecker(source, lines, (), given)
    if not isinstance(data, Mapping):
        raise chk.fail((), f"the file must hold a mapping with keys {chk.allowed(ExperimentConfig)}")
    if data.get("workload") is not None and data.get("workloads") is not None:
        raise chk.fail(("workload",), "give one workload (workload:) or labelled ones (workloads:), not both")
    data = _with_preset(data, chk)
    cfg: ExperimentConfig = chk.section(ExperimentConfig, data, ())
    cfg = dataclasses.replace(cfg, source=source)
    if "baselines" not in data and "fifo" not in cfg.schedulers and cfg.schedulers:
        cfg = dataclasses.replace(cfg, baselines=[cfg.schedulers[0]])  # the default, fifo, is not among them
    _load_plugins(cfg, chk)  # first: the train section and the workloads may name their kinds
    if cfg.train is not None:
        cfg.__dict__["_train"] = _parse_train(cfg.train, cfg, source, lines, given)
    if cfg.scaling is not None:
        cfg.__dict__["_scaling"] = chk.section(ScalingConfig, cfg.scaling, ("scaling",))
    _check_experiment(cfg, chk)
    cfg.__dict__["_checker"] = chk  # for what only a run finds (a window's load): named at its key and line
    return cfg


def workload_error(cfg: ExperimentConfig, label: str, err: Exception) -> ValueError:
    """A workload error met while running (a window without its load, dates outside the trace), named at the
    config's key and line as the checks before the run name theirs."""
    chk = cfg.__dict__.get("_checker") or _PrefixedChecker(cfg.source, {}, (), None)
    return chk.fail(("workloads", label) if cfg.workloads else ("workload",), str(err))


def _with_preset(data: Mapping[str, Any], chk: ConfigChecker) -> Mapping[str, Any]:
    """``data`` with the keys its ``preset`` sets and the file leaves out filled in (the file's own win)."""
    from cluster_sim.sim_presets import SIM_PRESETS

    name = data.get("preset")
    if name is None:
        return data
    if name not in SIM_PRESETS:
        choices = ", ".join(SIM_PRESETS)
        raise chk.fail(("preset",), f"unknown preset {name!r}; choose one of: {choices} (or drop the key)")
    return {**SIM_PRESETS[name].settings, **data}


def _parse_train(
    data: Any, cfg: ExperimentConfig, source: str, lines: dict, given: dict | None = None
) -> PriorityTrainSection | TrainSection:
    """The training section (``extends`` merged): any agent and algorithm of `marlsched train --config`; the
    cluster and interference it leaves out are the experiment's."""
    from marl.agents import resolve
    from marl.training.priority_train import check_keys, parse_config
    from marl.training.recipes import check_settings, recipe_of

    chk = _PrefixedChecker(source, lines, ("train",), given)
    if not isinstance(data, Mapping):
        raise chk.fail((), "expected a mapping with the keys of `marlsched train --config` (agent, algo and their "
                       "settings; optionally extends: PATH)")  # fmt: skip
    data = dict(data)
    base_path = data.pop("extends", None)
    if base_path is not None:
        path = Path(str(base_path))
        if not path.is_file():
            raise chk.fail(("extends",), f"training config {path} does not exist (paths are relative to the cwd)")
        base = yaml.safe_load(path.read_text()) or {}
        if not isinstance(base, Mapping):
            raise chk.fail(("extends",), f"{path} does not hold a training config mapping")
        data = _merge(base, data)
    spec, algorithm, data = recipe_of(data, chk)
    if (spec.name, algorithm.name) != (PRIORITY_AGENT, "ppo"):  # trained as its config says, then run here
        if algorithm.settings is not None:  # a flat config: what it leaves out, the experiment's
            fields = {f.name for f in dataclasses.fields(resolve(algorithm.settings))}
            data = _inherit(data, cfg, fields)
        return TrainSection(spec.name, algorithm.name, data, check_settings(algorithm, data, chk))
    if not isinstance(cfg.cluster, str):
        raise chk.fail((), "the priority agents train on a named cluster preset or file; name one in cluster")
    env = dict(data.get("env") or {})
    if "cluster" in env and env["cluster"] != cfg.cluster:
        raise chk.fail(("env", "cluster"), "must equal the experiment's cluster (or leave it out to inherit it)")
    data["env"] = _inherit(env, cfg, {"cluster", "interference", "interference_data"})
    check_keys(data, chk)
    try:
        parsed = parse_config(data, f"{source}: train", default_name=f"{cfg.name}-marl", chk=chk)
    except ExperimentConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise chk.fail((), str(err)) from None
    return PriorityTrainSection(parsed)


def _inherit(settings: dict[str, Any], cfg: ExperimentConfig, fields: set[str]) -> dict[str, Any]:
    """``settings`` of a train section with what it leaves out of ``fields`` taken from the experiment: its
    cluster (a preset or file) and, where it simulates one, its interference (with its data, unless the section
    names either), so that the policy is trained in the simulation it is then compared in. An experiment without
    interference leaves the section's default (the priority agents' DAgger trains only with one)."""
    out = dict(settings)
    if "cluster" in fields and isinstance(cfg.cluster, str):
        out.setdefault("cluster", cfg.cluster)
    given = {"interference", "interference_data"} & out.keys()
    if "interference" in fields and cfg.interference != "none" and not given:
        out["interference"] = cfg.interference
        if cfg.interference_data and "interference_data" in fields:
            out["interference_data"] = cfg.interference_data
    return out


def _load_plugins(cfg: ExperimentConfig, chk: ConfigChecker) -> None:
    """Import the config's plugins (and so the processes its training starts: ``loaded_plugins``), each failure
    named by its entry."""
    from cluster_sim.plugins import PluginError, load_plugins

    for i, target in enumerate(cfg.plugins):
        try:
            load_plugins([target])
        except PluginError as err:
            raise chk.fail(("plugins", str(i)), str(err)) from None


def _check_experiment(cfg: ExperimentConfig, chk: ConfigChecker) -> None:
    from cluster_sim.plugins import PluginError
    from cluster_sim.policies import combination_syntax, get_policy, policy_names
    from cluster_sim.protocol import check_fits
    from cluster_sim.scheduler_spec import is_custom_spec, load_custom_scheduler

    topo = _cluster_of(cfg, chk).view  # a bad cluster file is named before Ray starts or the run's folder is made
    if cfg.interference not in interference_modes():
        raise chk.fail(("interference",), f"{cfg.interference!r} is not one of {', '.join(interference_modes())}")
    if cfg.interference == "learned" and not cfg.interference_data:
        raise chk.fail(("interference_data",), "interference 'learned' needs a model file (marlsched interference)")
    if cfg.interference_data:
        path = Path(cfg.interference_data.removeprefix("gavel:"))
        if not path.exists():
            raise chk.fail(("interference_data",), f"{path} does not exist (paths are relative to the cwd)")
    if cfg.restart_cost < 0:
        raise chk.fail(("restart_cost",), f"must be >= 0 seconds, got {cfg.restart_cost}")
    if cfg.start_cost < 0:
        raise chk.fail(("start_cost",), f"must be >= 0 seconds, got {cfg.start_cost}")
    if cfg.workloads is not None:
        if not cfg.workloads:
            raise chk.fail(("workloads",), "give at least one `LABEL: WORKLOAD_SPEC`, or drop the key")
        for label, spec in cfg.workloads.items():
            if not isinstance(spec, str) or not str(label) or "," in str(label) or "/" in str(label):
                raise chk.fail(("workloads", str(label)), "expected `LABEL: WORKLOAD_SPEC` (a label without , or /)")
            _check_workload(chk, ("workloads", str(label)), spec, topo.num_gpus)
    else:
        _check_workload(chk, ("workload",), cfg.workload, topo.num_gpus)
    if not cfg.seeds:
        raise chk.fail(("seeds",), "give at least one workload seed")
    if len(set(cfg.seeds)) != len(cfg.seeds):
        raise chk.fail(("seeds",), f"seeds repeat: {cfg.seeds}")
    if min(cfg.seeds) < 0:
        raise chk.fail(("seeds",), f"a seed is an integer >= 0, got {min(cfg.seeds)}")
    if not cfg.schedulers:
        raise chk.fail(("schedulers",), "list at least one scheduler")
    allowed = (
        f"{', '.join(policy_names())}, {combination_syntax()}, {MARL} (trained by this run), marl:POLICY_DIR, "
        "topdrl:POLICY_DIR, FILE.py:Class"
    )
    for label, opts in (cfg.scheduler_options or {}).items():
        if label not in cfg.schedulers:
            typo = difflib.get_close_matches(str(label), [str(name) for name in cfg.schedulers], n=1)
            if typo:  # the list's name is the misspelt one where the options name a scheduler close to it
                raise chk.fail(
                    ("schedulers", str(cfg.schedulers.index(typo[0]))),
                    f"{typo[0]!r}: did you mean {label!r} (scheduler_options defines it)?",
                )
            raise chk.fail(
                ("scheduler_options", str(label)),
                f"not among schedulers: {', '.join(cfg.schedulers)}; list it there, or remove its entry here",
            )
        if not isinstance(opts, Mapping):
            raise chk.fail(("scheduler_options", str(label)), "expected a mapping {policy: NAME, OPTION: VALUE...}")
        for key in opts:
            if key != "policy" and "policy" not in opts and difflib.get_close_matches(str(key), ["policy"], n=1):
                raise chk.fail(("scheduler_options", str(label), str(key)), "unknown key; did you mean 'policy'?")
        policy, options = cfg.policy_of(label)
        try:
            scheduler = get_policy(policy, **options)
        except (ValueError, TypeError) as err:  # a scheduler of one's own says what it takes; a name, the names
            named = is_custom_spec(policy) or ":" in policy or policy.split(",")[0] in policy_names()
            listed = "choose one of" in str(err)  # get_policy's own list of the names
            names = "" if named or listed else f" (policy {policy!r}; allowed: {allowed})"
            raise chk.fail(("scheduler_options", str(label)), f"{err}{names}") from None
        try:
            check_fits(scheduler, topo)
        except ValueError as err:
            raise chk.fail(("scheduler_options", str(label)), str(err)) from None
    for section in ("claims", "published"):
        for label in getattr(cfg, section) or {}:
            if label not in cfg.schedulers:
                raise chk.fail(
                    (section, str(label)),
                    f"not among schedulers: {', '.join(cfg.schedulers)}; list it there, or remove its entry here",
                )
    for label, claim in (cfg.claims or {}).items():
        if label not in cfg.schedulers or not isinstance(claim, str):
            raise chk.fail(("claims", str(label)), 'expected `SCHEDULER: "the paper\'s claim"` for a listed scheduler')
    step = cfg.published_step
    if step is not None and (isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0):
        raise chk.fail(("published_step",), "expected the published figures' rounding step in seconds (> 0), e.g. 360")
    for label, values in (cfg.published or {}).items():
        if label not in cfg.schedulers or not isinstance(values, Mapping):
            raise chk.fail(
                ("published", str(label)), "expected `SCHEDULER: {WORKLOAD_LABEL: avg JCT}` for a listed scheduler"
            )
        for w, v in values.items():
            known = str(w) in cfg.workload_specs or str(w) == "mean"
            if not known or isinstance(v, bool) or not isinstance(v, (int, float)):
                raise chk.fail(
                    ("published", str(label), str(w)),
                    f"expected a workload label of `workloads` ({', '.join(cfg.workload_specs)}) or `mean` (over "
                    "them all) and a number of seconds",
                )
    for i, name in enumerate(cfg.schedulers):
        if cfg.scheduler_options and name in cfg.scheduler_options:
            continue
        if name == MARL:
            if cfg.train_config is None:
                raise chk.fail(("schedulers", str(i)), f"{MARL!r} is the policy this run trains: add a train section")
            continue
        if name == MARL_WARM_START:
            if not isinstance(cfg.train_config, PriorityTrainSection) or MARL not in cfg.schedulers:
                raise chk.fail(
                    ("schedulers", str(i)),
                    f"{MARL_WARM_START!r} is the untrained network of the priority agents this run trains with "
                    f"PPO; add a train section of theirs and {MARL!r} to the schedulers",
                )
            continue
        if split_folder_name(name):
            try:  # its files are read now, not inside a Ray task, and it is asked whether it runs on the cluster
                check_fits(load_folder_policy(name), topo)
            except (ValueError, FileNotFoundError) as err:
                raise chk.fail(("schedulers", str(i)), str(err)) from None
            continue
        if is_custom_spec(name):
            try:
                load_custom_scheduler(name)
            except PluginError as err:
                raise chk.fail(("schedulers", str(i)), str(err)) from None
            continue
        try:
            get_policy(name)
        except ValueError:
            hint = did_you_mean(str(name), policy_names())
            raise chk.fail(("schedulers", str(i)), f"unknown scheduler {name!r}; {hint + ' ' if hint else ''}"
                                                   f"allowed: {allowed}") from None  # fmt: skip
    if len(set(cfg.schedulers)) != len(cfg.schedulers):
        raise chk.fail(("schedulers",), f"schedulers repeat: {cfg.schedulers}")
    for i, name in enumerate(cfg.baselines):
        if name not in cfg.schedulers:
            raise chk.fail(("baselines", str(i)), f"{name!r} is not among schedulers: {', '.join(cfg.schedulers)}")
    if cfg.timeline_points < 10:
        raise chk.fail(("timeline_points",), f"must be >= 10, got {cfg.timeline_points}")
    ray = cfg.ray
    if ray.num_cpus is not None and ray.num_cpus < 1:
        raise chk.fail(("ray", "num_cpus"), "must be >= 1 (or null for this machine's CPU count)")
    if ray.object_store_mb < 75:
        raise chk.fail(("ray", "object_store_mb"), "Ray needs at least 75 MiB of object store")
    if ray.task_cpus <= 0:
        raise chk.fail(("ray", "task_cpus"), f"must be > 0, got {ray.task_cpus}")
    if cfg.scaling_config is not None:
        _check_scaling(cfg, chk)


def _check_scaling(cfg: ExperimentConfig, chk: ConfigChecker) -> None:

    sc = cfg.scaling_config
    assert sc is not None
    if not isinstance(cfg.train_config, PriorityTrainSection):
        raise chk.fail(("scaling",), "needs a train section of the priority agents (their env and network)")
    if sc.policy != "untrained":
        from marl.deploy.priority_export import read_priority_metadata

        try:
            read_priority_metadata(Path(sc.policy))
        except (OSError, ValueError) as err:
            raise chk.fail(("scaling", "policy"), f"untrained, or a priority policy folder: {err}") from None
    racks = _cluster_of(cfg, chk).view.num_racks
    if not sc.agents:
        raise chk.fail(("scaling", "agents"), "list at least one agent count")
    for i, k in enumerate(sc.agents):
        path = ("scaling", "agents", str(i))
        if k < 1 or racks % k:
            divisors = [d for d in range(1, racks + 1) if racks % d == 0]
            raise chk.fail(path, f"{k} agents do not divide the {racks} racks; allowed: {divisors}")
    if sc.env_runners < 1 or sc.rollout_steps < 1:
        raise chk.fail(("scaling", "env_runners" if sc.env_runners < 1 else "rollout_steps"), "must be >= 1")
    _check_workload(chk, ("scaling", "workload"), sc.workload or cfg.workload)
    _check_workload(chk, ("scaling", "rollout_workload"), sc.rollout_workload)


def _cluster_of(cfg: ExperimentConfig, chk: ConfigChecker) -> Any:
    """The experiment's cluster (a preset, a YAML file relative to the cwd, or a mapping), built; its spec's
    error named at the config's ``cluster`` key."""
    from topology import ClusterSpecError, build_cluster, parse_spec
    from topology.yaml_lines import dotted_path

    if isinstance(cfg.cluster, Mapping):
        try:
            return build_cluster(parse_spec(dict(cfg.cluster), source="cluster"))
        except ClusterSpecError as err:  # named by the config's own line of the field
            raise chk.fail(("cluster", *dotted_path(err.path)), err.detail) from None
    try:
        return build_cluster(cfg.cluster)
    except ClusterSpecError as err:
        raise chk.fail(("cluster",), str(err)) from None


def _check_workload(chk: ConfigChecker, path: tuple[str, ...], spec: str, cluster_gpus: int | None = None) -> None:
    """The spec's kind, options, argument and file; with ``cluster_gpus``, a window of a trace (``start=``,
    ``end=``) is loaded too, so that one without jobs (or too few for its ``load=``) is said before Ray starts."""
    from cluster_sim.workload_spec import WorkloadSpecError, check_workload_spec, parse_workload_spec

    try:
        check_workload_spec(spec)
        if cluster_gpus is not None and any(f",{key}=" in spec for key in ("start", "end")):
            parse_workload_spec(spec, cluster_gpus=cluster_gpus, seed=0)
    except WorkloadSpecError as e:
        raise chk.fail(path, str(e)) from None


def load_experiment_config(
    path: str | Path, workloads: list[str] | None = None, sets: Sequence[str] = ()
) -> ExperimentConfig:
    """Read and validate an experiment YAML file; ``workloads``: only these labels of its ``workloads`` (a
    label it lacks is named with the ones it has); ``sets``: ``KEY=VALUE`` settings that replace the file's
    (``--set``: ``seeds=[0]``, ``train.ppo.iterations=2``), checked as the file's are."""
    data, lines = read_yaml_config(path, "experiment config", ExperimentConfigError)
    data, given = set_keys(data, sets, str(path))
    if ("schedulers",) in given and isinstance(data, Mapping) and isinstance(data.get("schedulers"), list):
        # fewer schedulers on the command line: what the file says of the others goes with them
        listed = set(map(str, data["schedulers"]))
        about = [key for key in ("scheduler_options", "published", "claims") if isinstance(data.get(key), Mapping)]
        data = {**data, **{key: {k: v for k, v in data[key].items() if str(k) in listed} for key in about}}
        if ("baselines",) not in given and isinstance(data.get("baselines"), list):  # its baselines among them
            kept = [b for b in data["baselines"] if str(b) in listed]
            data = {k: v for k, v in data.items() if k != "baselines"} | ({"baselines": kept} if kept else {})
    if workloads and isinstance(data, Mapping):
        have = data.get("workloads")
        if not isinstance(have, Mapping):
            raise ExperimentConfigError(f"{path}: --workload picks among `workloads:`, and this config has none")
        missing = [w for w in workloads if w not in have]
        if missing:
            raise ExperimentConfigError(
                f"{path}: no workload {', '.join(map(repr, missing))}; its workloads: {', '.join(map(str, have))}"
            )
        data = {**data, "workloads": {w: have[w] for w in workloads}}
        published = data.get("published")
        if isinstance(published, Mapping):  # published figures of the workloads that run
            # a published mean over all the workloads is no figure for some of them
            subset = len(set(workloads)) < len(have)
            data["published"] = {
                k: {w: v for w, v in fig.items() if w in workloads or (w == "mean" and not subset)}
                if isinstance(fig, Mapping) else fig
                for k, fig in published.items()
            }  # fmt: skip
            if subset and any(isinstance(fig, Mapping) and "mean" in fig for fig in published.values()):
                data["published_source"] = (
                    f"{data.get('published_source') or 'the config'}; those are means over all {len(have)} "
                    f"workloads, not figures for the {len(set(workloads))} this run has: run the config without "
                    "--workload to put them beside ours"
                )
    changed = sorted({key for key, _, _ in (text.partition("=") for text in sets) if key.split(".")[0] in SETUP_KEYS})
    if changed and isinstance(data, Mapping) and data.get("published"):
        data = {**data, "published_source": (
            f"{data.get('published_source') or 'the config'}; this run changed {', '.join(changed)} (--set), so those "
            "figures are of the experiment the config describes, not of this one: a ratio says how far the change "
            "moved a scheduler, not how faithful the replay is"
        )}  # fmt: skip
    return parse_experiment_config(data, str(path), lines, given)


# the settings that make an experiment another one than its published figures describe (not seeds, schedulers ...)
SETUP_KEYS = frozenset({
    "cluster", "workload", "workloads", "preset", "interference", "interference_data", "restart_cost", "start_cost",
    "app_restart_costs", "calibration", "perf_model", "scheduler_options",
})  # fmt: skip


def absolute_spec(spec: str) -> str:
    """A workload spec (or ``gavel:PATH``) with its file made absolute, for Ray workers with another cwd."""
    kind, sep, rest = spec.partition(":")
    if not sep or kind == "synthetic":
        return spec
    file, comma, options = rest.partition(",")
    return f"{kind}:{os.path.abspath(file)}{comma}{options}"
