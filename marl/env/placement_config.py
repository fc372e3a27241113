"""Settings of the training environment and their defaults, in one place: the RL environment reads them,
training configs validate against them and record them, without importing RLlib."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from cluster_sim.workload import Workload
from interference.base import InterferenceModel
from interference.loader import interference_modes
from marl.env.candidates import DEFAULT_PLACEMENTS

REWARD_SCALE_S = 3600.0


@dataclass(frozen=True)
class EnvConfig:
    """Settings of :class:`MarlSchedEnv` (RLlib passes them as the ``env_config`` dict).

    ``cluster``: preset name, YAML path or spec mapping. ``workload``: a spec string (see
    :mod:`cluster_sim.workload_spec`; each reset draws a new seed for it), a fixed Workload, or a callable
    ``(seed, cluster_gpus) -> Workload``. ``interference``: the simulator's ground truth ("learned" with
    ``interference_model`` for training). ``predictor``: the model whose predictions agents see; None uses
    the simulator's. Both also take an InterferenceModel object. ``eval``: every reset uses ``seed``
    itself, so evaluation episodes are identical. ``envs_per_runner``: vector slots per EnvRunner, set by
    training so that every copy draws its own workloads (:mod:`marl.env.seeding`). ``queue_order``: which
    queued jobs the agents are shown (:meth:`marl.env.coordinator.Coordinator.shown`).
    """

    cluster: str | Mapping[str, Any] = "small"
    workload: str | Workload | Callable[[int, int], Workload] = "synthetic:100"
    num_agents: int = 4
    queue_slots: int = 3
    placements: tuple[str, ...] = DEFAULT_PLACEMENTS
    interference: str | InterferenceModel = "none"
    interference_model: str | None = None
    predictor: str | InterferenceModel | None = None
    perf_model: bool = True
    restart_cost: float = 0.0
    reward_scale: float = REWARD_SCALE_S
    seed: int = 0
    eval: bool = False
    partition_unit: str = "rack"
    queue_order: str = "arrival"
    envs_per_runner: int = 1

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | None) -> EnvConfig:
        config = dict(config or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(config) - names)
        if unknown:
            raise ValueError(f"env_config: unknown keys {unknown}; allowed: {sorted(names)}")
        if "placements" in config:
            config["placements"] = tuple(config["placements"])
        cfg = cls(**config)
        for key in ("interference", "predictor"):
            value = getattr(cfg, key)
            if isinstance(value, str) and value not in interference_modes():
                raise ValueError(f"env_config.{key}={value!r}; choose one of {interference_modes()}")
            if not (value is None or isinstance(value, str) or hasattr(value, "throughput_factors")):
                raise ValueError(f"env_config.{key}: expected a mode in {interference_modes()} or an InterferenceModel")
        if cfg.reward_scale <= 0:
            raise ValueError(f"env_config.reward_scale={cfg.reward_scale} must be > 0 seconds")
        return cfg


# Keys of EnvConfig a YAML file may set (seed, eval and envs_per_runner are set per run).
ENV_KEYS: tuple[str, ...] = tuple(
    f.name for f in fields(EnvConfig) if f.name not in ("seed", "eval", "envs_per_runner")
)
ENV_DEFAULTS = EnvConfig()
