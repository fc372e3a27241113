"""Training configuration: one YAML file describes a MARL training run (env, network, warm start, PPO,
evaluation, Ray), validated up front so that a typo fails in a second with the key's path and line
instead of after minutes of training.

Every section is a frozen dataclass; its fields are the allowed keys. An unknown key, a wrong type or an
out-of-range value raises :class:`TrainConfigError` naming the file, the dotted key path, its line and
the allowed keys or values. The ``env`` section takes the keys of :class:`marl.env.placement_config.EnvConfig` (minus
``seed`` and ``eval``, which training sets itself).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from interference.loader import interference_modes
from marl.env.placement_config import ENV_DEFAULTS, ENV_KEYS

DEFAULT_HEURISTICS = ("fifo", "tiresias", "gandiva", "drf", "closest-gpus", "sjf", "srtf")


class TrainConfigError(ValueError):
    """A training config that cannot be used; the message names the file, key path and line, and the fix."""


@dataclass(frozen=True)
class ModelConfig:
    """Width and depth of the shared HGNN (marl.models.hgnn.HGNNPolicyNet)."""

    hidden: int = 64
    gpu_layers: int = 2
    server_layers: int = 2
    rack_layers: int = 1


@dataclass(frozen=True)
class WarmStartConfig:
    """DL2-style imitation of a heuristic expert (marl.training.expert.ExpertPolicy) before PPO."""

    enabled: bool = True
    strategy: str = "consolidate"  # the expert's placement strategy (one of env.placements)
    backfill: bool = False  # True: first feasible of the Q shown jobs; False: strict FIFO
    episodes: int = 4  # expert episodes recorded (the last one is held out for accuracy)
    epochs: int = 20
    batch_size: int = 256
    lr: float = 1e-3
    value_coef: float = 0.5  # weight of the value-head regression on observed discounted returns


@dataclass(frozen=True)
class PPOTrainConfig:
    """PPO on RLlib's new API stack; batch sizes count environment steps (all agents act per step)."""

    iterations: int = 40
    time_budget_min: float | None = None  # stop after the iteration that exceeds this wall time
    num_env_runners: int = 2
    num_cpus_per_env_runner: float = 0.5  # fractional: whole CPUs per runner can hang build on 2 cores
    # environments each runner steps together, so that the policy scores all their agents in one pass
    num_envs_per_env_runner: int = 1
    train_batch_size: int = 2000
    minibatch_size: int = 500
    num_epochs: int = 4
    lr: float = 3e-4
    gamma: float = 0.99
    lambda_: float = 0.95
    clip_param: float = 0.2
    vf_clip_param: float = 100.0
    vf_loss_coeff: float = 0.5
    entropy_coeff: float = 0.01
    grad_clip: float | None = 1.0
    checkpoint_every: int = 5
    # RLlib drops a runner's samples when it takes longer than this (its default, 60 s, silently yields
    # empty iterations once an episode chunk takes longer, e.g. on a busy machine)
    sample_timeout_s: float = 600.0


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation after training, on workload seeds that training never draws."""

    enabled: bool = True
    seeds: list[int] = field(default_factory=lambda: [1_000_001, 1_000_002, 1_000_003])
    interference: str = "oracle"  # ground truth in the simulator
    oracle_data: str | None = None  # gavel:PATH: measured pairs the oracle reproduces (None: parametric only)
    workload: str | None = None  # default: env.workload
    heuristics: list[str] = field(default_factory=lambda: list(DEFAULT_HEURISTICS))


@dataclass(frozen=True)
class PredictorTrainingConfig:
    """Used when ``env.interference`` (or ``env.predictor``) is "learned" and no ``env.interference_model``
    is given: a predictor is fitted to Gavel's measured pairs into the run folder before anything else
    (interference.training.fit; about 10 seconds on 2 cores)."""

    data: str | None = None  # gavel:PATH of a Gavel throughput JSON
    steps: int = 800


@dataclass(frozen=True)
class RayConfig:
    """``address`` None starts Ray in-process with ``num_cpus`` and a small object store."""

    address: str | None = None
    num_cpus: int | None = 2
    object_store_mb: int = 100


@dataclass(frozen=True)
class TrainConfig:
    name: str = "marl"
    seed: int = 0
    env: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    ppo: PPOTrainConfig = field(default_factory=PPOTrainConfig)
    predictor_training: PredictorTrainingConfig = field(default_factory=PredictorTrainingConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    source: str = field(default="<dict>", compare=False)

    def env_config(self, **overrides: Any) -> dict[str, Any]:
        """The ``env_config`` dict of marl.env.placement_env.MarlSchedEnv for this run."""
        return {**self.env, "seed": self.seed, **overrides}

    def to_dict(self) -> dict[str, Any]:
        """Plain data (YAML keys, ``lambda`` spelled as in the file), e.g. to write beside the results."""
        out = dataclasses.asdict(self)
        out.pop("source")
        out["ppo"]["lambda"] = out["ppo"].pop("lambda_")
        return out


def _yaml_key(name: str) -> str:
    return "lambda" if name == "lambda_" else name


def yaml_key_lines(text: str) -> dict[tuple[str, ...], int]:
    """1-based line of every mapping key, by key path (for error messages)."""
    lines: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node | None, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)

    walk(root, ())
    return lines


class ConfigChecker:
    """Collects config errors, each named by file, line, key path and the allowed values (shared with
    ``experiments.run_config``)."""

    def __init__(self, source: str, lines: dict[tuple[str, ...], int]) -> None:
        self.source, self.lines = source, lines

    def fail(self, path: tuple[str, ...], message: str) -> TrainConfigError:
        where = ".".join(path) if path else "<top level>"
        line = next((self.lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in self.lines), None)
        loc = f"{self.source}, line {line}" if line else self.source
        return TrainConfigError(f"{loc}: {where}: {message}")

    def check_type(self, path: tuple[str, ...], value: Any, hint: Any) -> Any:
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            options = typing.get_args(hint)
            if value is None and type(None) in options:
                return None
            inner = [o for o in options if o is not type(None)]
            errors = []
            for opt in inner:
                try:
                    return self.check_type(path, value, opt)
                except TrainConfigError as err:
                    errors.append(err)
            raise errors[0]
        if origin is list:
            (item,) = typing.get_args(hint)
            if not isinstance(value, list):
                raise self.fail(path, f"expected a list, got {value!r}")
            return [self.check_type((*path, str(i)), v, item) for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, Mapping):
                raise self.fail(path, f"expected a mapping of keys to values, got {value!r}")
            return dict(value)
        if hint is bool:
            if not isinstance(value, bool):
                raise self.fail(path, f"expected true or false, got {value!r}")
            return value
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(path, f"expected an integer, got {value!r}")
            return value
        if hint is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise self.fail(path, f"expected a finite number, got {value!r}")
            return float(value)
        if hint is str:
            if not isinstance(value, str):
                raise self.fail(path, f"expected a string, got {value!r}")
            return value
        raise TypeError(f"unsupported config field type {hint!r}")

    def section(self, cls: type, data: Any, path: tuple[str, ...]) -> Any:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise self.fail(path, f"expected a mapping with keys {self.allowed(cls)}, got {data!r}")
        hints = typing.get_type_hints(cls)
        by_key = {_yaml_key(f.name): f for f in fields(cls) if f.name != "source"}
        unknown = [k for k in data if k not in by_key]
        if unknown:
            raise self.fail((*path, str(unknown[0])), f"unknown key; allowed keys here: {', '.join(by_key)}")
        kwargs = {}
        for key, value in data.items():
            f = by_key[key]
            hint = hints[f.name]
            sub = (*path, key)
            if dataclasses.is_dataclass(hint):
                kwargs[f.name] = self.section(hint, value, sub)
            else:
                kwargs[f.name] = self.check_type(sub, value, hint)
        return cls(**kwargs)

    @staticmethod
    def allowed(cls: type) -> str:
        return ", ".join(_yaml_key(f.name) for f in fields(cls) if f.name != "source")


def parse_train_config(
    data: Any, source: str = "<dict>", lines: dict[tuple[str, ...], int] | None = None
) -> TrainConfig:
    """Validate plain data (as loaded from YAML) into a :class:`TrainConfig`."""
    chk = ConfigChecker(source, lines or {})
    if not isinstance(data, Mapping):
        raise chk.fail((), f"the file must hold a mapping with keys {chk.allowed(TrainConfig)}")
    cfg: TrainConfig = chk.section(TrainConfig, data, ())
    cfg = dataclasses.replace(cfg, source=source)
    check_train_values(cfg, chk)
    return cfg


def read_yaml_config(path: str | Path, what: str, error: type[Exception]) -> tuple[Any, dict[tuple[str, ...], int]]:
    """(parsed YAML, line of every key path) of a config file; a missing file or bad YAML names the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise error(f"{path}: not valid YAML: {err}") from None
    return data, yaml_key_lines(text)


def config_agent(path: str | Path) -> str | None:
    """The ``agent`` a training config names (a published learned scheduler, e.g. ``topdrl``, trained by
    :mod:`marl.baselines`), None for marlsched's own agents (or a file that does not parse: the loader
    reports it)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return None
    return data.get("agent") if isinstance(data, dict) else None


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a YAML training config."""
    data, lines = read_yaml_config(path, "training config", TrainConfigError)
    return parse_train_config(data, str(path), lines)


def check_train_values(cfg: TrainConfig, chk: ConfigChecker) -> None:
    """Value checks of a parsed training config (ranges, names, files), reported through ``chk``."""
    env = cfg.env
    for key in env:
        if key not in ENV_KEYS:
            raise chk.fail(("env", key), f"unknown key; allowed keys here: {', '.join(ENV_KEYS)}")
    if "workload" in env and not isinstance(env["workload"], str):
        raise chk.fail(("env", "workload"), "expected a workload spec string such as 'synthetic:300,load=0.9'")
    if "cluster" in env and not isinstance(env["cluster"], (str, Mapping)):
        raise chk.fail(("env", "cluster"), "expected a preset name, a YAML path or a cluster spec mapping")
    mode = env.get("interference", ENV_DEFAULTS.interference)
    if mode not in interference_modes():
        raise chk.fail(("env", "interference"), f"{mode!r} is not one of {', '.join(interference_modes())}")
    predictor = env.get("predictor")
    if predictor is not None and predictor not in interference_modes():
        raise chk.fail(("env", "predictor"), f"{predictor!r} is not one of {', '.join(interference_modes())}")
    model = env.get("interference_model")
    if "learned" in (mode, predictor):
        if not model and not cfg.predictor_training.data:
            raise chk.fail(
                ("env", "interference_model"),
                "interference 'learned' needs a trained interference model file (marlsched interference train) "
                "or predictor_training.data (gavel:PATH) to train one for this run",
            )
        if model and not Path(model).is_file():
            raise chk.fail(("env", "interference_model"), f"model file {model!r} does not exist")
    elif model and mode == "oracle":
        _check_gavel(chk, ("env", "interference_model"), model)
    if cfg.predictor_training.data:
        _check_gavel(chk, ("predictor_training", "data"), cfg.predictor_training.data)
    _positive(chk, ("predictor_training",), cfg.predictor_training, ("steps",))
    placements = env.get("placements", ENV_DEFAULTS.placements)
    if not isinstance(placements, (list, tuple)) or not all(isinstance(p, str) for p in placements):
        raise chk.fail(("env", "placements"), "expected a list of placement strategy names")
    for key in ("num_agents", "queue_slots"):
        value = env.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise chk.fail(("env", key), f"expected an integer >= 1, got {value!r}")

    ws = cfg.warm_start
    if ws.enabled and ws.strategy not in placements:
        raise chk.fail(("warm_start", "strategy"), f"{ws.strategy!r} is not among env.placements {list(placements)}")
    _positive(chk, ("warm_start",), ws, ("episodes", "epochs", "batch_size", "lr"))
    if ws.value_coef < 0:
        raise chk.fail(("warm_start", "value_coef"), "must be >= 0")

    ppo = cfg.ppo
    _positive(chk, ("ppo",), ppo, ("iterations", "train_batch_size", "minibatch_size", "num_envs_per_env_runner"))
    _positive(
        chk, ("ppo",), ppo, ("num_epochs", "lr", "checkpoint_every", "num_cpus_per_env_runner", "sample_timeout_s")
    )
    if ppo.num_env_runners < 0:
        raise chk.fail(("ppo", "num_env_runners"), "must be >= 0 (0 samples in the driver process)")
    if ppo.minibatch_size > ppo.train_batch_size:
        raise chk.fail(
            ("ppo", "minibatch_size"), f"{ppo.minibatch_size} exceeds ppo.train_batch_size={ppo.train_batch_size}"
        )
    for key in ("gamma", "lambda_"):
        if not 0.0 < getattr(ppo, key) <= 1.0:
            raise chk.fail(("ppo", _yaml_key(key)), f"must be in (0, 1], got {getattr(ppo, key)}")
    if ppo.time_budget_min is not None and ppo.time_budget_min <= 0:
        raise chk.fail(("ppo", "time_budget_min"), "must be > 0 minutes (or null for no limit)")

    ev = cfg.evaluation
    if ev.enabled and not ev.seeds:
        raise chk.fail(("evaluation", "seeds"), "give at least one workload seed")
    if ev.interference not in interference_modes():
        raise chk.fail(("evaluation", "interference"), f"{ev.interference!r} is not one of {interference_modes()}")
    if ev.interference == "learned" and "learned" not in (mode, predictor):
        raise chk.fail(("evaluation", "interference"), "'learned' is only available when training uses it")
    if ev.oracle_data:
        _check_gavel(chk, ("evaluation", "oracle_data"), ev.oracle_data)
    from cluster_sim.policies import get_policy

    for i, name in enumerate(ev.heuristics):
        try:
            get_policy(name)
        except ValueError as err:
            raise chk.fail(("evaluation", "heuristics", str(i)), str(err)) from None

    if cfg.ray.address is None and cfg.ray.num_cpus is not None and cfg.ray.num_cpus < 1:
        raise chk.fail(("ray", "num_cpus"), "must be >= 1")
    if cfg.ray.object_store_mb < 75:
        raise chk.fail(("ray", "object_store_mb"), "Ray needs at least 75 MiB of object store")


def _positive(chk: ConfigChecker, path: tuple[str, ...], section: Any, keys: tuple[str, ...]) -> None:
    for key in keys:
        value = getattr(section, key)
        if value <= 0:
            raise chk.fail((*path, _yaml_key(key)), f"must be > 0, got {value}")


def _check_gavel(chk: ConfigChecker, path: tuple[str, ...], spec: str) -> None:
    from interference.gavel_data import resolve_gavel_path

    try:
        resolve_gavel_path(spec)
    except FileNotFoundError as err:
        raise chk.fail(path, str(err)) from None
