"""RLlib wrapper of the shared HGNN policy: unpacks RLlib batches, keeps all maths in ``HGNNPolicyNet``.

The plain network stays free of RLlib so that it can be exported and run without ray; this module only
translates between RLlib's batch dictionaries and the network's tensor arguments (new API stack,
RLlib 2.60: ``TorchRLModule`` + ``ValueFunctionAPI`` as PPO needs).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule

from marl.env.obs_layout import OBS_KEYS, ObsLayout
from marl.models.hgnn import HGNNPolicyNet, hierarchy_to_config

_NET_OPTIONS = ("hidden", "gpu_layers", "server_layers", "rack_layers")


def hgnn_model_config(
    layout: ObsLayout,
    hierarchy: Any,
    hidden: int = 64,
    gpu_layers: int = 2,
    server_layers: int = 2,
    rack_layers: int = 1,
) -> dict[str, Any]:
    """The ``model_config`` of an ``HGNNRLModule``: plain ints and lists, so checkpoints stay portable.

    ``hierarchy`` is a ``topology.graph_tensors.HierarchyTensors`` of one partition (or a mapping with
    the same fields); all partitions share its shape, so one module serves every agent.
    """
    return {
        "layout": layout.to_dict(),
        "hierarchy": hierarchy_to_config(hierarchy),
        "hidden": hidden,
        "gpu_layers": gpu_layers,
        "server_layers": server_layers,
        "rack_layers": rack_layers,
    }


def hgnn_module_spec(layout: ObsLayout, hierarchy: Any, **net_options: int) -> RLModuleSpec:
    """``RLModuleSpec`` of the shared policy for ``layout``'s observation and action spaces."""
    return RLModuleSpec(
        module_class=HGNNRLModule,
        observation_space=layout.space(),
        action_space=layout.action_space(),
        model_config=hgnn_model_config(layout, hierarchy, **net_options),
    )


class HGNNRLModule(TorchRLModule, ValueFunctionAPI):
    """Shared candidate-scoring policy and critic of all scheduler agents (see ``marl.models.hgnn``)."""

    def setup(self) -> None:
        cfg = self.model_config or {}
        for key in ("layout", "hierarchy"):
            if key not in cfg:
                raise ValueError(
                    f"HGNNRLModule: model_config lacks {key!r}; build it with marl.models.rl_module.hgnn_model_config"
                )
        layout = ObsLayout.from_dict(cfg["layout"])
        self._check_spaces(layout)
        options = {k: int(cfg[k]) for k in _NET_OPTIONS if k in cfg}
        self.net = HGNNPolicyNet(layout, cfg["hierarchy"], **options)

    def _check_spaces(self, layout: ObsLayout) -> None:
        obs_space, act_space = self.observation_space, self.action_space
        if obs_space is not None:
            spaces = getattr(obs_space, "spaces", None)
            if spaces is None:
                raise ValueError(
                    f"HGNNRLModule needs the Dict observation space of ObsLayout.space(), got {obs_space}; "
                    "do not flatten observations in the env-to-module connector"
                )
            for key, shape in layout.shapes().items():
                got = getattr(spaces.get(key), "shape", None)
                if got != shape:
                    raise ValueError(
                        f"HGNNRLModule: observation space [{key!r}] has shape {got}, model_config's layout "
                        f"needs {shape}; build both from the same ObsLayout"
                    )
        if act_space is not None and getattr(act_space, "n", None) != layout.num_actions:
            raise ValueError(
                f"HGNNRLModule: action space {act_space} should be Discrete({layout.num_actions}) "
                f"(C={layout.C} candidates + wait)"
            )

    def _encode(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        obs = batch[Columns.OBS]
        return self.net.encode(*(obs[k] for k in OBS_KEYS))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        logits, _ = self._encode(batch)
        return {Columns.ACTION_DIST_INPUTS: logits}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # The critic embedding rides along so PPO's value call does not encode the batch a second time.
        logits, critic = self._encode(batch)
        return {Columns.ACTION_DIST_INPUTS: logits, Columns.EMBEDDINGS: critic}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        if embeddings is None:
            _, embeddings = self._encode(batch)
        return self.net.value(embeddings)
