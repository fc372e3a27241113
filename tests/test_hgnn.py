"""HGNN policy: layout, GCN maths, masking, invariances, export, and a real RLlib PPO round trip."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import topology
from marl.env.obs_layout import CAND_EXTRA_FEATURES, OBS_KEYS, ObsLayout
from marl.models.hgnn import (
    FLOAT_MIN,
    FixedGCNConv,
    HGNNPolicyNet,
    example_inputs,
    export_policy,
    hierarchy_arrays,
    trace_policy,
)

REPO = Path(__file__).resolve().parents[1]


def clique_edges(groups: list[np.ndarray]) -> np.ndarray:
    pairs = [(a, b) for g in groups for a in g for b in g if a != b]
    return np.array(pairs, dtype=np.int64).T.reshape(2, -1)


def toy_hierarchy(gpu_to_server: np.ndarray, server_to_rack: np.ndarray, seed: int = 0) -> dict:
    """Complete graphs inside each server / rack / the partition, random positive weights."""
    rng = np.random.default_rng(seed)
    s, r = int(gpu_to_server.max()) + 1, int(server_to_rack.max()) + 1
    ge = clique_edges([np.flatnonzero(gpu_to_server == i) for i in range(s)])
    se = clique_edges([np.flatnonzero(server_to_rack == i) for i in range(r)])
    re = clique_edges([np.arange(r)])
    return {
        "gpu_edge_index": ge,
        "gpu_edge_weight": rng.uniform(0.2, 1.0, ge.shape[1]),
        "server_edge_index": se,
        "server_edge_weight": rng.uniform(0.2, 1.0, se.shape[1]),
        "rack_edge_index": re,
        "rack_edge_weight": rng.uniform(0.2, 1.0, re.shape[1]),
        "gpu_to_server": gpu_to_server,
        "server_to_rack": server_to_rack,
    }


LAYOUT = ObsLayout(G=8, S=4, R=2, Q=3, C=4)
HIER = toy_hierarchy(np.repeat(np.arange(4), 2), np.repeat(np.arange(2), 2))


def make_net(layout: ObsLayout = LAYOUT, hier: object = HIER, seed: int = 0, **kw: int) -> HGNNPolicyNet:
    torch.manual_seed(seed)
    return HGNNPolicyNet(layout, hier, **kw).eval()


# ---------------------------------------------------------------- layout


def test_layout_space_names_and_errors() -> None:
    space = LAYOUT.space()
    assert space["gpu_feats"].shape == (8, LAYOUT.Fg)
    assert space["cand_gpus"].shape == (4, 8)
    assert space["action_mask"].shape == (5,)
    assert LAYOUT.Fc == 3 + len(CAND_EXTRA_FEATURES)
    assert LAYOUT.action_space() == gym.spaces.Discrete(5)
    assert space.contains(LAYOUT.zeros())
    names = LAYOUT.flat_names()
    assert len(names) == gym.spaces.flatdim(space) == len(set(names))
    assert LAYOUT.feature_names()["queue_feats"][0] == "valid"
    assert LAYOUT.feature_names()["cand_feats"][:4] == ("slot_0", "slot_1", "slot_2", "span_gpu")
    wide = ObsLayout(G=8, S=4, R=2, Q=3, C=4, Fg=2)
    assert wide.feature_names()["gpu_feats"] == ("gpu_f0", "gpu_f1")
    assert ObsLayout.from_dict(json.loads(json.dumps(LAYOUT.to_dict()))) == LAYOUT
    with pytest.raises(ValueError, match="Fc=2 is smaller than Q=3"):
        ObsLayout(G=8, S=4, R=2, Q=3, C=4, Fc=2)
    with pytest.raises(ValueError, match="G >= S >= R"):
        ObsLayout(G=2, S=4, R=2, Q=3, C=4)
    bad = LAYOUT.zeros()
    bad["cand_gpus"] = np.zeros((4, 7), np.float32)
    with pytest.raises(ValueError, match=r"observation\['cand_gpus'\] has shape \(4, 7\)"):
        LAYOUT.check(bad)


def test_bad_hierarchy_names_the_field() -> None:
    broken = dict(HIER, gpu_to_server=np.arange(7) % 4)
    with pytest.raises(ValueError, match="gpu_to_server has 7 entries"):
        hierarchy_arrays(broken, LAYOUT)
    broken = dict(HIER, server_edge_index=np.array([[0, -1], [1, 0]]), server_edge_weight=np.ones(2))
    with pytest.raises(ValueError, match="server_edge_index holds ids"):
        hierarchy_arrays(broken, LAYOUT)
    with pytest.raises(ValueError, match="lacks field 'rack_edge_weight'"):
        hierarchy_arrays({k: v for k, v in HIER.items() if k != "rack_edge_weight"}, LAYOUT)


# ---------------------------------------------------------------- GCN maths


def _pyg_reference(conv: FixedGCNConv, x: torch.Tensor, edge_index: np.ndarray, w: np.ndarray) -> torch.Tensor:
    from torch_geometric.nn import GCNConv

    ref = GCNConv(x.shape[-1], conv.lin.out_features)
    with torch.no_grad():
        ref.lin.weight.copy_(conv.lin.weight)
        ref.bias.copy_(conv.bias)
    ei, ew = torch.as_tensor(edge_index), torch.as_tensor(w, dtype=torch.float32)
    return torch.stack([ref(xb, ei, ew) for xb in x])


@pytest.mark.parametrize("case", ["contiguous", "shuffled", "cross_group", "small_mixed"])
def test_fixed_gcn_equals_torch_geometric_gcnconv(case: str) -> None:
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(5), 4)
    if case == "small_mixed":  # real topology: 8- and 4-GPU servers in one graph (padded blocks)
        h = topology.hierarchy_tensors(topology.build_cluster("small-mixed").view)
        ei, w, groups = h.gpu_edge_index, h.gpu_edge_weight, h.gpu_to_server
    else:
        if case == "shuffled":
            groups = rng.permutation(groups)
        ei = clique_edges([np.flatnonzero(groups == g) for g in range(5)])
        if case == "cross_group":  # edges between servers force one dense block
            ei = np.concatenate([ei, [[0, 19], [19, 0]]], axis=1)
        ei = np.concatenate([ei, [[3], [3]]], axis=1)  # an explicit self loop keeps its own weight
        w = rng.uniform(0.1, 2.0, ei.shape[1])
    n = groups.shape[0]
    torch.manual_seed(0)
    conv = FixedGCNConv(6, 5, ei, w, n, groups)
    assert conv.contiguous == (case in ("contiguous", "cross_group"))  # one block is trivially contiguous
    assert conv.num_groups == (1 if case == "cross_group" else groups.max() + 1)
    x = torch.randn(3, n, 6)
    torch.testing.assert_close(conv(x), _pyg_reference(conv, x, ei, w), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- policy network


def test_shapes_and_parameter_count_independent_of_partition_size() -> None:
    net = make_net()
    logits, value = net(*example_inputs(LAYOUT, 5))
    assert logits.shape == (5, LAYOUT.C + 1) and value.shape == (5,)
    assert torch.isfinite(value).all()
    n_params = sum(p.numel() for p in net.parameters())
    h, lay = 64, LAYOUT

    def lin(i: int, o: int) -> int:
        return i * o + o

    expected = (
        lin(lay.Fg, h) + 2 * h * h + 2 * h  # GPU input + 2 GCN layers
        + lin(h + lay.Fs, h) + 2 * (h * h + h)  # server
        + lin(h + lay.Fr, h) + (h * h + h)  # rack
        + lin(h, h)  # partition
        + lin(lay.Fq, h) + lin(h, h)  # queue
        + lin(lay.Fc - lay.Q + 4 * h, h) + lin(h, h) + lin(h, 1)  # candidate scorer
        + 2 * (lin(2 * h, h) + lin(h, 1))  # wait and value heads
    )  # fmt: skip
    assert n_params == expected
    # The same weights fit any partition with the same feature widths: parameters don't grow with G.
    big = ObsLayout(G=64, S=8, R=1, Q=3, C=4)
    big_net = make_net(big, toy_hierarchy(np.repeat(np.arange(8), 8), np.zeros(8, np.int64)))
    assert sum(p.numel() for p in big_net.parameters()) == n_params
    missing = big_net.load_state_dict(dict(net.named_parameters()), strict=False).missing_keys
    assert all(k not in dict(big_net.named_parameters()) for k in missing)  # only graph buffers differ
    big_logits, _ = big_net(*example_inputs(big, 2))
    assert big_logits.shape == (2, big.C + 1) and torch.isfinite(big_logits).any()


def test_masked_actions_get_zero_probability_and_finite_gradients() -> None:
    net = make_net().train()
    inputs = list(example_inputs(LAYOUT, 6, seed=3))
    mask = inputs[-1]
    mask[0, :-1] = 0.0  # only "wait" allowed
    logits, value = net(*inputs)
    probs = torch.softmax(logits, dim=-1)
    assert (probs[mask == 0] < 1e-30).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones(6))
    assert probs[0, -1].item() == pytest.approx(1.0)
    assert (logits[mask == 0] <= FLOAT_MIN / 2).all()
    from ray.rllib.utils.torch_utils import FLOAT_MIN as RLLIB_FLOAT_MIN

    assert FLOAT_MIN == RLLIB_FLOAT_MIN
    # PPO's loss on a sampled (hence allowed) action must give finite gradients despite masked entries.
    actions = torch.distributions.Categorical(logits=logits).sample()
    loss = -torch.log_softmax(logits, -1).gather(1, actions[:, None]).sum() + value.sum()
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_padding_and_permutation_invariances() -> None:
    net = make_net()
    inputs = dict(zip(OBS_KEYS, example_inputs(LAYOUT, 4, seed=5), strict=True))
    inputs["queue_feats"][:, 2, 0] = 0.0  # slot 2 is padding in every sample
    logits, value = net.forward_obs(inputs)

    # Whatever the env leaves in a padded queue row does not matter.
    junk = dict(inputs, queue_feats=inputs["queue_feats"].clone())
    junk["queue_feats"][:, 2, 1:] = torch.randn(4, LAYOUT.Fq - 1) * 100
    logits_j, value_j = net.forward_obs(junk)
    torch.testing.assert_close(logits_j, logits)
    torch.testing.assert_close(value_j, value)

    # Reordering queue slots (and the candidates' slot one-hots with them) changes nothing.
    perm = torch.tensor([2, 0, 1])
    moved = dict(inputs, queue_feats=inputs["queue_feats"][:, perm], cand_feats=inputs["cand_feats"].clone())
    moved["cand_feats"][..., :3] = inputs["cand_feats"][..., :3][..., perm]
    logits_m, value_m = net.forward_obs(moved)
    torch.testing.assert_close(logits_m, logits, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(value_m, value, atol=1e-6, rtol=1e-6)

    # Reordering candidates reorders their logits; "wait" and the value stay put.
    cperm = torch.tensor([3, 1, 0, 2])
    shuffled = dict(inputs)
    for key in ("cand_feats", "cand_gpus"):
        shuffled[key] = inputs[key][:, cperm]
    shuffled["action_mask"] = torch.cat([inputs["action_mask"][:, cperm], inputs["action_mask"][:, -1:]], 1)
    logits_c, value_c = net.forward_obs(shuffled)
    torch.testing.assert_close(logits_c[:, :-1], logits[:, cperm], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(logits_c[:, -1], logits[:, -1])
    torch.testing.assert_close(value_c, value)

    # A candidate on a free GPU differs from one on a busy GPU: the GPU embeddings reach the scores.
    gpu = inputs["gpu_feats"].clone()
    gpu[:, :, 0] += 1.0
    assert not torch.allclose(net.forward_obs(dict(inputs, gpu_feats=gpu))[0], logits)


_STANDALONE = textwrap.dedent(
    """
    import json, sys, torch
    ts = torch.jit.load(sys.argv[1])
    logits, value = ts(*torch.load(sys.argv[2]))
    banned = sorted(m for m in sys.modules if m.split(".")[0] in ("torch_geometric", "ray", "marl"))
    print(json.dumps({"banned": banned, "logits": logits.tolist(), "value": value.tolist()}))
    """
)


def test_traced_and_exported_policy_match_and_run_standalone(tmp_path: Path) -> None:
    net = make_net()
    traced, program = trace_policy(net, batch=2), export_policy(net, batch=2)
    inputs = example_inputs(LAYOUT, 7, seed=9)  # batch size unlike the one traced with
    with torch.no_grad():
        ref_logits, ref_value = net(*inputs)
    torch.export.save(program, str(tmp_path / "policy.pt2"))
    reloaded = torch.export.load(str(tmp_path / "policy.pt2")).module()
    for out in (traced(*inputs), program.module()(*inputs), reloaded(*inputs)):
        torch.testing.assert_close(out[0], ref_logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(out[1], ref_value, atol=1e-5, rtol=0)
    # The TorchScript file alone runs the policy in a process without torch_geometric, ray or marl.
    traced.save(str(tmp_path / "policy.pt"))
    torch.save(inputs, tmp_path / "inputs.pt")
    args = [str(tmp_path / n) for n in ("policy.pt", "inputs.pt")]
    proc = subprocess.run(
        [sys.executable, "-c", _STANDALONE, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["banned"] == []
    torch.testing.assert_close(torch.tensor(got["logits"]), ref_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.tensor(got["value"]), ref_value, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- RLlib PPO round trip

# One rack of the "small" preset: 8 NVSwitch servers, 64 GPUs; real topology tensors.
_SMALL = topology.build_cluster("small").view
_PART = topology.partition(_SMALL, 4)[0]
PPO_HIER = topology.hierarchy_tensors(_SMALL, _PART)
PPO_LAYOUT = ObsLayout(G=_PART.num_gpus, S=len(_PART.servers), R=len(_PART.racks), Q=3, C=4)
SCORE_COL = PPO_LAYOUT.Q  # first non-slot candidate feature


def _ppo_env_cls() -> type:
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    class ToyPlacementEnv(MultiAgentEnv):
        """Two agents; reward 1 for picking the allowed candidate with the highest score column."""

        def __init__(self, config: dict | None = None):
            super().__init__()
            self.layout = PPO_LAYOUT
            self.agents = self.possible_agents = ["p0", "p1"]
            self.observation_spaces = {a: self.layout.space() for a in self.agents}
            self.action_spaces = {a: self.layout.action_space() for a in self.agents}
            self.rng = np.random.default_rng((config or {}).get("seed", 0))
            self.t = 0

        def _obs(self) -> dict:
            lay, rng = self.layout, self.rng
            obs = lay.zeros()
            for key in ("gpu_feats", "server_feats", "rack_feats"):
                obs[key][:] = rng.random(obs[key].shape)
            obs["queue_feats"][:, 1:] = rng.random((lay.Q, lay.Fq - 1))
            obs["queue_feats"][:, 0] = 1.0
            obs["cand_feats"][np.arange(lay.C), rng.integers(0, lay.Q, lay.C)] = 1.0
            obs["cand_feats"][:, lay.Q :] = rng.random((lay.C, lay.Fc - lay.Q))
            obs["cand_gpus"][:] = rng.random((lay.C, lay.G)) < 0.1
            obs["action_mask"][: lay.C] = rng.random(lay.C) < 0.75
            obs["action_mask"][0] = 1.0
            return obs

        def reset(self, *, seed: int | None = None, options: dict | None = None):
            if seed is not None:
                self.rng = np.random.default_rng(seed)
            self.t = 0
            self.last = {a: self._obs() for a in self.agents}
            return self.last, {}

        def step(self, action_dict: dict):
            rewards = {}
            for agent, action in action_dict.items():
                obs = self.last[agent]
                scores = np.where(obs["action_mask"][:-1] > 0, obs["cand_feats"][:, SCORE_COL], -np.inf)
                rewards[agent] = float(int(action) == int(np.argmax(scores)))
            self.t += 1
            self.last = {a: self._obs() for a in self.agents}
            done = self.t >= 10
            return self.last, rewards, {"__all__": done}, {"__all__": False}, {}

    return ToyPlacementEnv


def test_ppo_trains_shared_hgnn_module_and_checkpoint_round_trips(ray_local, tmp_path: Path) -> None:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModule

    from marl.models.rl_module import HGNNRLModule, hgnn_module_spec

    spec = hgnn_module_spec(PPO_LAYOUT, PPO_HIER, hidden=32)
    config = (
        PPOConfig()
        .environment(_ppo_env_cls(), env_config={"seed": 0}, disable_env_checking=True)
        .env_runners(num_env_runners=0)
        .learners(num_learners=0)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kw: "shared")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={"shared": spec}))
        .training(train_batch_size_per_learner=120, minibatch_size=60, num_epochs=1, lr=3e-4)
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        module = algo.get_module("shared")
        assert isinstance(module, HGNNRLModule)
        before = {k: v.detach().clone() for k, v in module.net.state_dict().items()}
        for _ in range(2):
            result = algo.train()
        learner = result["learners"]["shared"]
        assert np.isfinite(learner["policy_loss"]) and np.isfinite(learner["vf_loss"])
        sampled = result["env_runners"]["num_agent_steps_sampled_lifetime"]
        assert sampled["p0"] > 0 and sampled["p1"] > 0  # both agents feed the one shared module
        after = algo.get_module("shared").net.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in before), "training did not move weights"

        algo.save_to_path(str(tmp_path / "ckpt"))
        loaded = RLModule.from_checkpoint(tmp_path / "ckpt" / "learner_group" / "learner" / "rl_module" / "shared")
        assert isinstance(loaded, HGNNRLModule)
        env = _ppo_env_cls()({"seed": 7})
        obs, _ = env.reset()
        batch = {k: torch.as_tensor(np.stack([obs["p0"][k], obs["p1"][k]])) for k in OBS_KEYS}
        out_live = algo.get_module("shared").forward_inference({Columns.OBS: batch})
        out_loaded = loaded.forward_inference({Columns.OBS: batch})
        logits = out_loaded[Columns.ACTION_DIST_INPUTS]
        torch.testing.assert_close(logits, out_live[Columns.ACTION_DIST_INPUTS])
        assert (logits[batch["action_mask"] == 0] <= FLOAT_MIN / 2).all()
        values = loaded.compute_values({Columns.OBS: batch})
        assert values.shape == (2,)

        traced = trace_policy(loaded.net)
        ts_logits, ts_values = traced(*(batch[k] for k in OBS_KEYS))
        torch.testing.assert_close(ts_logits, logits, atol=1e-5, rtol=0)
        torch.testing.assert_close(ts_values, values, atol=1e-5, rtol=0)
    finally:
        algo.stop()
