"""Policy export: a trained RLlib module leaves as a standalone folder that runs without ray or RLlib.

A policy folder holds ``policy.pt`` (TorchScript of :class:`marl.models.hgnn.HGNNPolicyNet`; the partition's
graph is baked in as buffers), ``policy.onnx`` when the optional ``onnx``/``onnxscript`` packages are
installed, and ``metadata.json``: the observation layout, the cluster and agent settings the policy was
trained for, its feature names and the versions that produced it. :func:`load_marl_policy` turns such a
folder into a :class:`marl.deploy.scheduler.MarlScheduler` for the simulator; importing this module, loading a
policy and scheduling with it never import ray.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import platform
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cluster_sim.results import write_atomic
from interference.base import InterferenceModel
from interference.loader import load_interference_model
from marl.deploy.policy_files import load_torchscript, read_json
from marl.deploy.scheduler import MarlScheduler
from marl.env.obs_layout import OBS_KEYS, ObsLayout
from marl.models.hgnn import HGNNPolicyNet, example_inputs, trace_policy
from marl.models.inference import cpu_inference, subnormals_flushed

CKPT_META = "marl_meta.json"  # written by training beside every checkpoint: what export needs
TORCHSCRIPT_FILE = "policy.pt"
ONNX_FILE = "policy.onnx"
METADATA_FILE = "metadata.json"
FORMAT = "marlsched-policy"
FORMAT_VERSION = 1
MODULE_SUBDIR = Path("learner_group") / "learner" / "rl_module" / "shared"
Log = Callable[[str], None]


# ---------------------------------------------------------------------------------------------- export


def find_checkpoint(path: str | Path) -> tuple[Path, dict[str, Any]]:
    """(RLModule folder, training metadata) of a run folder, an algorithm checkpoint or a warm-start folder.

    A run folder (``marlsched train --out``) resolves to its latest checkpoint (``state.json``).
    """
    path = Path(path).resolve()  # RLlib loads checkpoints from absolute paths only
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    state = path / "state.json"
    if state.is_file() and not (path / CKPT_META).is_file():
        ckpt = json.loads(state.read_text()).get("checkpoint")
        if not ckpt:
            raise ValueError(f"run {path} has no PPO checkpoint yet ({state}); export {path / 'warm_start'} instead")
        path = path / ckpt
    meta_path = path / CKPT_META
    if not meta_path.is_file():
        raise FileNotFoundError(
            f"{path} lacks {CKPT_META}; pass a run folder of `marlsched train`, one of its "
            "checkpoints/iter_* folders, or its warm_start folder"
        )
    for module_dir in (path / MODULE_SUBDIR, path / "module"):
        if module_dir.is_dir():
            return module_dir, json.loads(meta_path.read_text())
    raise FileNotFoundError(f"{path} holds no RLModule (looked for {MODULE_SUBDIR} and module/)")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__, "numpy": np.__version__}
    for dist in ("ray", "marlsched", "onnx", "onnxscript"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    return out


def _check_traced(net: HGNNPolicyNet, traced: torch.jit.ScriptModule) -> float:
    inputs = example_inputs(net.layout, 5, seed=1)
    with torch.no_grad():
        ref_logits, ref_value = net(*inputs)
        got_logits, got_value = traced(*inputs)
    allowed = inputs[OBS_KEYS.index("action_mask")] > 0
    err = max(
        float((ref_logits[allowed] - got_logits[allowed]).abs().max()), float((ref_value - got_value).abs().max())
    )
    if err > 1e-5:
        raise RuntimeError(f"the traced policy differs from the module by {err:.3g}; export aborted")
    return err


def _export_onnx(net: HGNNPolicyNet, folder: Path, log: Log) -> list[str]:
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        log(f"export: ONNX skipped ({', '.join(missing)} not installed; pip install 'marlsched[onnx]')")
        return []
    b = torch.export.Dim("batch", min=1, max=1 << 16)
    torch.onnx.export(
        net.eval(),
        example_inputs(net.layout, 2),
        str(folder / ONNX_FILE),
        input_names=list(OBS_KEYS),
        output_names=["logits", "value"],
        dynamic_shapes={k: {0: b} for k in OBS_KEYS},
        dynamo=True,
    )
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(ONNX_FILE))


def export_policy_dir(checkpoint: str | Path, out_dir: str | Path, *, onnx: bool = True, log: Log = print) -> dict:
    """Write the policy folder ``out_dir`` from ``checkpoint`` (see :func:`find_checkpoint`); returns the
    metadata. The folder is assembled beside ``out_dir`` and renamed into place."""
    from ray.rllib.core.rl_module.rl_module import RLModule  # only exporting needs RLlib

    module_dir, train_meta = find_checkpoint(checkpoint)
    module = RLModule.from_checkpoint(str(module_dir))
    net: HGNNPolicyNet = module.net.eval()
    layout = net.layout
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    traced = trace_policy(net)
    err = _check_traced(net, traced)
    traced.save(str(tmp / TORCHSCRIPT_FILE))
    files = {"torchscript": TORCHSCRIPT_FILE, "onnx": _export_onnx(net, tmp, log) if onnx else []}
    predictor = {"mode": train_meta.get("predictor", "none"), "model_file": None, "data": None}
    model_path = train_meta.get("interference_model")
    if predictor["mode"] == "learned":
        if not model_path or not Path(model_path).is_file():
            raise FileNotFoundError(f"the policy reads a learned interference predictor, but {model_path!r} is gone")
        predictor["model_file"] = f"interference_model{Path(model_path).suffix}"
        shutil.copy2(model_path, tmp / predictor["model_file"])
    elif predictor["mode"] == "oracle":
        predictor["data"] = model_path  # Gavel's measured pairs (a trace path, not copied)
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "layout": layout.to_dict(),
        "partition": {"gpus": layout.G, "servers": layout.S, "racks": layout.R},
        "cluster": train_meta["cluster"],
        "num_agents": train_meta["num_agents"],
        "queue_slots": layout.Q,
        "placements": list(train_meta["placements"]),
        "partition_unit": train_meta.get("partition_unit", "rack"),
        "queue_order": train_meta.get("queue_order", "arrival"),
        "predictor": predictor,
        "trained_with": {
            "run": train_meta.get("run"),
            "iteration": train_meta.get("iteration"),
            "workload": train_meta.get("workload"),
            "interference": train_meta.get("interference"),
        },
        "model": train_meta.get("model", {}),
        "obs_keys": list(OBS_KEYS),
        "inputs": {k: list(v) for k, v in layout.shapes().items()},
        "outputs": {"logits": ["batch", layout.num_actions], "value": ["batch"]},
        "feature_names": {k: list(v) for k, v in layout.feature_names().items()},
        "files": files,
        "trace_max_abs_error": err,
        "source_checkpoint": str(Path(checkpoint).resolve()),
        "versions": _versions(),
    }
    write_atomic(tmp / METADATA_FILE, json.dumps(meta, indent=2) + "\n")
    for f in tmp.iterdir():
        f.chmod(0o644)  # readable by whoever deploys it (temporary files are created owner-only)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    log(f"export: {out / TORCHSCRIPT_FILE} ({layout.G} GPUs per partition, {meta['num_agents']} agents)")
    return meta


# ---------------------------------------------------------------------------------------------- load


def read_metadata(policy_dir: str | Path) -> dict[str, Any]:
    """The validated metadata of a policy folder."""
    path = Path(policy_dir) / METADATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{policy_dir} is not a policy folder (no {METADATA_FILE}); run `marlsched export`")
    meta = read_json(path)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r} is not {FORMAT!r}")
    if int(meta.get("format_version", 0)) > FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {meta['format_version']} is newer than this marlsched reads ({FORMAT_VERSION})"
        )
    for key in ("layout", "num_agents", "placements", "files"):
        if key not in meta:
            raise ValueError(f"{path} lacks {key!r}; re-export the policy")
    return meta


class TorchScriptPolicy:
    """``policy_fn`` for MarlScheduler: stacked observations (K, ...) -> masked logits (K, C + 1).

    ``source`` is a TorchScript file or a module with HGNNPolicyNet's signature. ``num_threads`` sets
    torch's intra-op threads of this process (one is fastest for a few agents; None leaves it alone).
    """

    def __init__(self, source: str | Path | torch.nn.Module, num_threads: int | None = 1) -> None:
        cpu_inference(num_threads)
        if isinstance(source, torch.nn.Module):
            self.module = source.eval()
        else:
            self.module = load_torchscript(source).eval()

    @torch.no_grad()
    def __call__(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        inputs = [torch.as_tensor(np.asarray(batch[k], dtype=np.float32)) for k in OBS_KEYS]
        with subnormals_flushed():
            logits, _ = self.module(*inputs)
        return logits.numpy()

    @torch.no_grad()
    def logits_and_values(self, batch: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        with subnormals_flushed():
            logits, values = self.module(*(torch.as_tensor(np.asarray(batch[k], dtype=np.float32)) for k in OBS_KEYS))
        return logits.numpy(), values.numpy()


def predictor_of(meta: Mapping[str, Any], policy_dir: str | Path | None = None) -> InterferenceModel | None:
    """The interference predictor the policy was trained to read (None: no predictions)."""
    pred = meta.get("predictor") or {}
    mode = pred.get("mode", "none")
    if mode == "none":
        return None
    if mode == "learned":
        if policy_dir is None or not pred.get("model_file"):
            raise ValueError("a learned predictor needs the policy folder holding its model file")
        return load_interference_model(mode, str(Path(policy_dir) / pred["model_file"]))
    data = pred.get("data")
    return load_interference_model(mode, data if data and Path(str(data).removeprefix("gavel:")).exists() else None)


def marl_scheduler(
    policy_fn: Callable[[dict[str, np.ndarray]], np.ndarray],
    meta: Mapping[str, Any],
    *,
    predictor: InterferenceModel | None = None,
    policy_dir: str | Path | None = None,
    name: str = "marl",
) -> MarlScheduler:
    """A MarlScheduler for ``policy_fn`` with the agent settings in ``meta`` (a policy's metadata)."""
    return MarlScheduler(
        policy_fn,
        ObsLayout.from_dict(meta["layout"]),
        num_agents=int(meta["num_agents"]),
        placements=tuple(meta["placements"]),
        predictor=predictor if predictor is not None else predictor_of(meta, policy_dir),
        partition_unit=meta.get("partition_unit", "rack"),
        queue_order=meta.get("queue_order", "arrival"),
        name=name,
    )


def load_marl_policy(
    policy_dir: str | Path,
    *,
    predictor: InterferenceModel | None = None,
    num_threads: int | None = 1,
    name: str = "marl",
) -> MarlScheduler:
    """The exported policy in ``policy_dir`` as a cluster_sim scheduler (TorchScript, no ray).

    ``predictor`` overrides the interference predictor recorded in the metadata. A folder of the
    priority agents (:mod:`marl.deploy.priority_export`) loads as those, one agent per rack; a folder of
    the round scorer or of Sia's learned job weights (:mod:`marl.deploy.remaining_policy`) as that scheduler.
    """
    from marl.deploy.priority_export import is_priority_policy, load_priority_policy
    from marl.deploy.remaining_policy import is_remaining_policy, load_remaining_policy
    from marl.deploy.rounds_policy import is_rounds_policy, load_rounds_policy

    if is_priority_policy(policy_dir):
        return load_priority_policy(policy_dir, name=name, num_threads=num_threads)
    if is_rounds_policy(policy_dir):
        return load_rounds_policy(policy_dir, name=name)
    if is_remaining_policy(policy_dir):
        return load_remaining_policy(policy_dir, name=name)
    meta = read_metadata(policy_dir)
    fn = TorchScriptPolicy(Path(policy_dir) / meta["files"]["torchscript"], num_threads=num_threads)
    return marl_scheduler(fn, meta, predictor=predictor, policy_dir=policy_dir, name=name)
