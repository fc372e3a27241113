"""RLlib wrapper of :class:`marl.models.priority_net.PriorityNet`: a Gaussian over per-slot scores (new API stack).

The action is one score per job slot, drawn from a diagonal Gaussian around the network's scores with one
learned standard deviation (RLlib's default ``TorchDiagGaussian`` for a Box action space). Padded slots
get mean 0 and log-std 0 as constants, so their (ignored) actions add nothing to the PPO ratio, the KL or
the entropy gradient, and the network runs on the occupied slots only (``skip_padding``: at data-center scale
most slots are padding). Evaluation uses the mean: the deterministic scores of the exported network.

The value is the network's centralised critic plus a training-only term of the ``critic`` inputs (the
reference schedule's state, :data:`marl.env.priority_features.CRITIC_FEATURES`): with a reward relative to
that reference, the return-to-go depends mostly on how far behind or ahead of it the system is, which
no deployed agent could observe. The term lives here, not in the exported network.

For APPO the module also keeps a target copy of the network (RLlib's ``TargetNetworkAPI``): the "old"
policy of APPO's clipped surrogate, synced by the learner. The old policy's spread is the current one's (the
log-stds are two scalars, kept out of the copy), so the clip bounds the means' moves only.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import TARGET_NETWORK_ACTION_DIST_INPUTS, InferenceOnlyAPI, TargetNetworkAPI
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from marl.env.priority_features import CRITIC_FEATURES, JobSetLayout
from marl.models.inference import subnormals_flushed
from marl.models.priority_net import PLACING_INPUTS, PlacingPriorityNet, PriorityNet


def priority_module_spec(
    layout: JobSetLayout,
    hidden: int = 64,
    init_log_std: float = -1.0,
    init_policy: str | None = None,
    init_type_log_std: float | None = None,
) -> RLModuleSpec:
    """The shared module of all priority agents for ``layout``'s spaces. ``init_policy``: a policy folder's
    network file (absolute path), its TorchScript ``policy.pt`` or ``torch.export`` program ``policy.pt2``,
    whose weights every copy starts from."""
    return RLModuleSpec(
        module_class=PriorityRLModule,
        observation_space=layout.space(critic=True),
        action_space=layout.action_space(),
        model_config={
            "hidden": int(hidden),
            "init_log_std": float(init_log_std),
            "init_policy": init_policy,
            "placing": layout.placing,
            "interference": layout.interference,
            "init_type_log_std": float(init_log_std if init_type_log_std is None else init_type_log_std),
        },
    )


def _start_weights(path: str) -> dict[str, torch.Tensor]:
    """The weights in a policy network file, TorchScript or (``.pt2``) ``torch.export`` program: both keep
    the module's parameter names."""
    if path.endswith(".pt2"):
        return torch.export.load(path).module().state_dict()
    return torch.jit.load(path, map_location="cpu").state_dict()


class PriorityRLModule(TorchRLModule, ValueFunctionAPI, TargetNetworkAPI, InferenceOnlyAPI):
    """Shared scoring policy and centralised critic of the priority agents."""

    def setup(self) -> None:
        cfg = self.model_config or {}
        self.placing = bool(cfg.get("placing", False))
        hidden = int(cfg.get("hidden", 64))
        inputs = bool(cfg.get("interference", False))
        self.net = PlacingPriorityNet(hidden, inputs) if self.placing else PriorityNet(hidden)
        if cfg.get("init_policy"):  # every copy (learner, env runners) loads the same file: no sync needed
            state = _start_weights(cfg["init_policy"])
            placing_state = any(k.startswith("topology.") for k in state)
            if placing_state and not self.placing:
                raise ValueError(f"{cfg['init_policy']}: a placing policy cannot start agents that do not place")
            if isinstance(self.net, PlacingPriorityNet):
                self.net.load_order_head(state)  # its order (and placing), zero weights on the inputs it lacks
            else:
                self.net.load_state_dict(state)
        self.log_std = nn.Parameter(torch.tensor(float(cfg.get("init_log_std", -1.0))))
        # the type scores' own spread: their prior (log speed ratios) is on another scale than the order's
        self.type_log_std = nn.Parameter(torch.tensor(float(cfg.get("init_type_log_std", -1.0))))
        h = self.net.hidden
        self.critic_extra = nn.Sequential(nn.Linear(len(CRITIC_FEATURES), h), nn.ReLU(), nn.Linear(h, 1))

    def _encode(self, batch: dict[str, Any], net: nn.Module | None = None) -> tuple[torch.Tensor, ...]:
        """The action's means, its log-stds (constant 0 on padding) and the critic's context (``net``: the
        target copy instead of the network)."""
        net = self.net if net is None else net
        obs = batch[Columns.OBS]
        valid = obs["jobs"][..., 0] > 0
        with subnormals_flushed():  # env runners; the learner's backward pass: train_priority flushes
            if isinstance(net, PlacingPriorityNet):
                scores, types, ctx = net.encode_all(*(obs[k] for k in PLACING_INPUTS), skip_padding=True)
                means = torch.cat([scores, types.flatten(1)], dim=-1)
                type_valid = (obs["cands"][..., 0] > 0).flatten(1)
                log_std = torch.cat(
                    [
                        torch.where(valid, self.log_std.expand_as(scores), torch.zeros_like(scores)),
                        torch.where(
                            type_valid,
                            self.type_log_std.expand_as(type_valid),
                            torch.zeros_like(means[:, scores.shape[1] :]),
                        ),
                    ],
                    dim=-1,
                )
                return means, log_std, ctx
            scores, ctx = net.encode(obs["jobs"], obs["parts"], skip_padding=True)
        log_std = torch.where(valid, self.log_std.expand_as(scores), torch.zeros_like(scores))
        return scores, log_std, ctx

    def _dist_inputs(self, batch: dict[str, Any], net: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        means, log_std, ctx = self._encode(batch, net)
        return torch.cat([means, log_std], dim=-1), ctx

    def make_target_networks(self) -> None:
        self._old_net = make_target_network(self.net)

    def get_target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.net, self._old_net)]

    def forward_target(self, batch: dict[str, Any]) -> dict[str, Any]:
        inputs, _ = self._dist_inputs(batch, self._old_net)
        return {TARGET_NETWORK_ACTION_DIST_INPUTS: inputs}

    def get_non_inference_attributes(self) -> list[str]:
        return ["_old_net"]  # APPO's target copy: the learner's only, never sent to the env runners

    def forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """RLlib's, without switching every layer to eval mode and back at each step: no layer here depends on
        the mode (no dropout, no batch norm), and the switch cost the env runners 0.2 ms a step at dc-1k."""
        return self._forward_exploration(batch, **kwargs)

    def forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """RLlib's, without the mode switch (see :meth:`forward_exploration`)."""
        return self._forward_inference(batch, **kwargs)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        inputs, _ = self._dist_inputs(batch)
        return {Columns.ACTION_DIST_INPUTS: inputs}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        inputs, ctx = self._dist_inputs(batch)
        return {Columns.ACTION_DIST_INPUTS: inputs, Columns.EMBEDDINGS: ctx}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        if embeddings is None:
            _, _, embeddings = self._encode(batch)
        value = self.net.value(embeddings)
        critic = batch[Columns.OBS].get("critic")
        return value if critic is None else value + self.critic_extra(critic).squeeze(-1)
