"""Shape and column meaning of one scheduler agent's observation.

One agent owns a partition of R racks, S servers and G GPUs; every partition of a cluster has the same
shape, so one layout (and one set of network weights) serves all agents. The environment fills the
arrays, the policy network reads them; this module is the single place both agree on.

Two column conventions are structural, because the network relies on them rather than on learning them:

- ``queue_feats[:, 0]`` is ``valid`` (1 for a real queued job, 0 for padding), so padded slots can be
  excluded from the pooled queue summary whatever values they hold;
- ``cand_feats[:, :Q]`` is the one-hot queue slot of the job a candidate would start, so the network can
  attach that job's embedding to the candidate.

All other columns are named for readers and metadata; the network treats them as plain inputs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from topology.view import Level

GPU_FEATURES: tuple[str, ...] = (
    "free",  # 1 if no job holds the GPU
    "job_gpus_frac",  # occupant job's GPU count / G
    "job_span_level",  # occupant job's span level / max level
    "job_attained_norm",  # occupant job's attained service, normalised
    "job_remaining_norm",  # occupant job's estimated remaining time, normalised
    "pred_slowdown",  # predicted interference slowdown of the occupant (0 = none)
    "gpu_speed",  # GPU generation speed relative to the fastest in the cluster
)
SERVER_FEATURES: tuple[str, ...] = (
    "free_frac",  # free GPUs / GPUs of the server
    "num_jobs_norm",  # jobs with at least one GPU here, normalised
    "nvswitch",  # 1 for an NVSwitch server (all GPUs one hop apart)
    "intra_bw_norm",  # GPU↔GPU bandwidth, normalised by the cluster maximum
    "nic_bw_norm",  # server → top-of-rack bandwidth, normalised
    "pred_slowdown_mean",  # mean predicted interference slowdown of its jobs
)
RACK_FEATURES: tuple[str, ...] = (
    "free_frac",  # free GPUs / GPUs of the rack
    "empty_servers_frac",  # servers with every GPU free / servers of the rack
    "uplink_bw_norm",  # uplink capacity after oversubscription, normalised
    "uplink_load",  # share of the uplink used by jobs spanning racks
)
QUEUE_FEATURES: tuple[str, ...] = (
    "valid",  # structural: 1 for a queued job, 0 for padding
    "num_gpus_frac",  # requested GPUs / G
    "wait_norm",  # time already queued, normalised
    "attained_norm",  # attained service so far (preempted jobs), normalised
    "est_duration_norm",  # estimated duration under the reference placement, normalised
    "model_size_norm",  # parameter count, log-normalised
    "flops_norm",  # FLOPs per sample, log-normalised
    "batch_norm",  # global batch size, log-normalised
    "solo_tput_norm",  # solo throughput, normalised
    "sync_sensitivity",  # how much the job slows down across racks (0 = not at all)
)
SPAN_FEATURES: tuple[str, ...] = tuple(f"span_{level.name.lower()}" for level in Level)
CAND_EXTRA_FEATURES: tuple[str, ...] = (
    *SPAN_FEATURES,  # one-hot slowest level the placement spans
    "num_servers_norm",  # servers used / S
    "pred_interference",  # predicted slowdown of the job on this placement
    "free_frac_after",  # fraction of the partition still free after starting it
    "est_speed",  # estimated throughput relative to the ideal placement
)

OBS_KEYS: tuple[str, ...] = (
    "gpu_feats",
    "server_feats",
    "rack_feats",
    "queue_feats",
    "cand_feats",
    "cand_gpus",
    "action_mask",
)


def _generic(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(n))


@dataclass(frozen=True)
class ObsLayout:
    """Dimensions of one agent's observation; feature widths default to the named columns above.

    ``G, S, R`` are the partition's GPUs, servers and racks, ``Q`` the queued jobs shown, ``C`` the
    candidate placements (the action space is ``Discrete(C + 1)``, the last action being "wait").
    A width that differs from the default is allowed (the env may add or drop columns); its columns are
    then named generically, except the structural ones described in the module docstring.
    """

    G: int
    S: int
    R: int
    Q: int
    C: int
    Fg: int | None = None
    Fs: int | None = None
    Fr: int | None = None
    Fq: int | None = None
    Fc: int | None = None

    def __post_init__(self) -> None:
        defaults = {
            "Fg": len(GPU_FEATURES),
            "Fs": len(SERVER_FEATURES),
            "Fr": len(RACK_FEATURES),
            "Fq": len(QUEUE_FEATURES),
            "Fc": self.Q + len(CAND_EXTRA_FEATURES) if isinstance(self.Q, (int, np.integer)) else None,
        }
        for name, value in defaults.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        for name in ("G", "S", "R", "Q", "C", "Fg", "Fs", "Fr", "Fq", "Fc"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ObsLayout.{name} must be a positive int, got {value!r}")
            object.__setattr__(self, name, int(value))
        if not self.G >= self.S >= self.R:
            raise ValueError(
                f"ObsLayout needs G >= S >= R (GPUs, servers, racks of one partition), "
                f"got G={self.G}, S={self.S}, R={self.R}"
            )
        if self.Fc < self.Q:
            raise ValueError(
                f"ObsLayout.Fc={self.Fc} is smaller than Q={self.Q}: the first Q candidate columns are "
                f"the one-hot queue slot; set Fc >= Q (default Q + {len(CAND_EXTRA_FEATURES)})"
            )

    @property
    def num_actions(self) -> int:
        """Candidates plus the final "wait" action."""
        return self.C + 1

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {
            "gpu_feats": (self.G, self.Fg),
            "server_feats": (self.S, self.Fs),
            "rack_feats": (self.R, self.Fr),
            "queue_feats": (self.Q, self.Fq),
            "cand_feats": (self.C, self.Fc),
            "cand_gpus": (self.C, self.G),
            "action_mask": (self.num_actions,),
        }

    def space(self) -> gym.spaces.Dict:
        """The observation space; masks are in [0, 1], features unbounded float32."""
        boxes: dict[str, gym.Space] = {}
        for key, shape in self.shapes().items():
            bounded = key in ("cand_gpus", "action_mask")
            low, high = (0.0, 1.0) if bounded else (-np.inf, np.inf)
            boxes[key] = gym.spaces.Box(low=low, high=high, shape=shape, dtype=np.float32)
        return gym.spaces.Dict(boxes)

    def action_space(self) -> gym.spaces.Discrete:
        return gym.spaces.Discrete(self.num_actions)

    def zeros(self) -> dict[str, np.ndarray]:
        """An all-padding observation (only "wait" allowed), for the env to fill in place."""
        obs = {key: np.zeros(shape, dtype=np.float32) for key, shape in self.shapes().items()}
        obs["action_mask"][-1] = 1.0
        return obs

    def feature_names(self) -> dict[str, tuple[str, ...]]:
        """Column names of every observation key (the last axis)."""

        def pick(default: tuple[str, ...], width: int, prefix: str) -> tuple[str, ...]:
            return default if len(default) == width else _generic(prefix, width)

        queue = pick(QUEUE_FEATURES, self.Fq, "queue_f")
        queue = ("valid", *queue[1:])
        slots = tuple(f"slot_{q}" for q in range(self.Q))
        extra_width = self.Fc - self.Q
        cand_extra = pick(CAND_EXTRA_FEATURES, extra_width, "cand_f")
        return {
            "gpu_feats": pick(GPU_FEATURES, self.Fg, "gpu_f"),
            "server_feats": pick(SERVER_FEATURES, self.Fs, "server_f"),
            "rack_feats": pick(RACK_FEATURES, self.Fr, "rack_f"),
            "queue_feats": queue,
            "cand_feats": (*slots, *cand_extra),
            "cand_gpus": _generic("gpu", self.G),
            "action_mask": (*_generic("cand", self.C), "wait"),
        }

    def flat_names(self) -> list[str]:
        """Name of every scalar in ``gymnasium.spaces.flatten(self.space(), obs)`` order."""
        names = self.feature_names()
        out: list[str] = []
        for key, space in self.space().spaces.items():  # gymnasium's Dict order (sorted keys)
            cols = names[key]
            if len(space.shape) == 1:
                out.extend(f"{key}.{c}" for c in cols)
            else:
                out.extend(f"{key}[{row}].{c}" for row in range(space.shape[0]) for c in cols)
        return out

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ObsLayout:
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"ObsLayout.from_dict: unknown keys {sorted(unknown)}; expected a subset of "
                f"{list(cls.__dataclass_fields__)}"
            )
        return cls(**data)

    def check(self, obs: dict[str, np.ndarray]) -> None:
        """Raise a ValueError naming the key if ``obs`` does not match this layout."""
        shapes = self.shapes()
        missing = set(shapes) - set(obs)
        if missing:
            raise ValueError(f"observation lacks keys {sorted(missing)}; the layout needs {list(shapes)}")
        for key, shape in shapes.items():
            got = tuple(np.shape(obs[key]))
            if got != shape:
                raise ValueError(f"observation[{key!r}] has shape {got}, the layout needs {shape}")
        if obs["action_mask"][-1] != 1.0:
            raise ValueError("observation['action_mask'][-1] (wait) must be 1: waiting is always allowed")
