"""Imitation inside RLlib's Learner: the priority agents' warm start and PPO in one pipeline, as DL2 has it.

DAgger (:mod:`marl.training.priority_dagger`) fits the network's order scores to a privileged label, the
negative log of each job's true remaining time, on the states the policy visits. Here the same label rides
along with the samples: the environment puts it in each agent's ``info`` (``imitation_label``, set by
training only; an observation never holds it), :class:`ImitationLabels` moves it into the train batch, and
:class:`ImitationPPOLearner` adds ``coef`` times the DAgger regression (:func:`score_regression_loss`) to
PPO's loss for the first ``iterations`` iterations. The runners sample the current policy, so every
iteration is a DAgger round on the policy's own states, and the value function learns while the policy is
still imitating, so PPO starts with a critic that knows the warm-started policy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

from marl.env.priority_env import LABEL
from marl.models.priority_net import score_regression_loss

LOSS_SUM, MINIBATCHES = "imitation_loss_sum", "imitation_minibatches"  # the learner's metrics, per module


def mean_loss(learner_results: dict[str, Any]) -> float:
    """The iteration's mean imitation loss over its minibatches, from one module's learner results (nan: none)."""
    count = float(learner_results.get(MINIBATCHES, 0) or 0)
    return float(learner_results.get(LOSS_SUM, 0.0)) / count if count else float("nan")


def imitation_connector(*_spaces: Any) -> ConnectorV2:
    """The learner connector piece (``learner_connector=imitation_connector``)."""
    return ImitationLabels()


class ImitationLabels(ConnectorV2):
    """Learner connector piece: each agent step's ``imitation_label`` (from its info) as a batch column, in
    the rows of the observations the actions were taken on (zeros where an info has none)."""

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: list[Any], **kwargs: Any) -> Any:
        if LABEL in batch:
            return batch
        for sa_episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            n = len(sa_episode)
            zeros = np.zeros(sa_episode.get_observations(0)["jobs"].shape[0], np.float32)
            rows = np.stack([i.get(LABEL, zeros) for i in sa_episode.get_infos(slice(0, n))]).astype(np.float32)
            self.add_n_batch_items(batch, LABEL, items_to_add=rows, num_items=n, single_agent_episode=sa_episode)
        return batch


class ImitationPPOLearner(PPOTorchLearner):
    """PPO's learner plus ``coef`` x :func:`~marl.models.priority_net.score_regression_loss` of the order
    scores (the first ``N`` action means) against the batch's labels, while fewer than ``iterations`` (0:
    every) batches have been learned; settings from ``learner_config_dict["imitation"]``: ``coef``,
    ``iterations``, ``rank_weight`` and ``batch`` (the train batch size: iterations are counted in
    environment steps, which a resumed training keeps)."""

    def build(self) -> None:
        super().build()
        self._imitating = True

    def _settings(self) -> dict[str, Any]:
        return dict(self.config.learner_config_dict.get("imitation") or {})

    def before_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().before_gradient_based_update(timesteps=timesteps)
        s = self._settings()
        iterations = int(s.get("iterations", 0))
        if iterations > 0:  # half a batch of slack: a batch may hold a few steps more than asked
            steps = float(timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0) or 0)
            self._imitating = steps < (iterations + 0.5) * float(s["batch"])

    def compute_loss_for_module(self, *, module_id: str, config: Any, batch: dict[str, Any], fwd_out: dict) -> Any:
        total = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        s = self._settings()
        coef = float(s.get("coef", 0.0)) if self._imitating else 0.0
        if coef <= 0.0 or LABEL not in batch:
            return total
        label = batch[LABEL]
        n = label.shape[-1]
        means = fwd_out[Columns.ACTION_DIST_INPUTS][:, :n]  # the order scores (the type scores follow)
        valid = (batch[Columns.OBS]["jobs"][..., 0] > 0).to(means.dtype)
        mask = batch.get(Columns.LOSS_MASK)
        if mask is not None:
            valid = valid * mask.to(means.dtype)[:, None]
        loss = score_regression_loss(means, label, valid, float(s.get("rank_weight", 0.0)))
        # sums, cleared at each iteration's reduce: the progress row is their ratio, the iteration's mean
        self.metrics.log_value((module_id, LOSS_SUM), loss.detach().item(), reduce="sum")
        self.metrics.log_value((module_id, MINIBATCHES), 1, reduce="sum")
        return total + coef * loss


__all__ = [
    "LABEL",
    "LOSS_SUM",
    "MINIBATCHES",
    "ImitationLabels",
    "ImitationPPOLearner",
    "imitation_connector",
    "mean_loss",
]
