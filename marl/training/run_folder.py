"""A training run's folder: its file names, its state (for resuming), the progress rows and learning
curve, and the metadata written beside every checkpoint (what export needs).

The layout (``marlsched train --out DIR``):

- ``config.yaml``: the validated config; ``state.json``: last checkpointed iteration and its path;
- ``warm_start/``: the imitated module (``module/``) and ``metrics.json`` (loss and accuracy per epoch);
- ``checkpoints/iter_NNNNNN/``: ``Algorithm.save_to_path`` plus ``marl_meta.json``;
- ``progress.csv`` (one row per PPO iteration), ``tb/`` (TensorBoard, when a writer is installed),
  ``learning_curve.png``;
- ``policy/``: the exported policy (see :mod:`marl.deploy.export`); ``eval.json`` and ``comparison.md``: the
  trained policy against the heuristics (:mod:`marl.training.evaluation`).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from cluster_sim.results import save_figure, write_atomic
from marl.env.placement_config import EnvConfig
from marl.training.config import TrainConfig

STATE_FILE = "state.json"
CONFIG_FILE = "config.yaml"
PROGRESS_FILE = "progress.csv"
POLICY_ID = "shared"
CSV_COLUMNS = (
    "iteration", "env_steps", "episodes", "episode_return_mean", "avg_jct", "entropy", "policy_loss", "vf_loss",
    "vf_explained_var", "iter_s", "wall_s",
)  # fmt: skip


class RunFolder:
    """Paths and small state files of one run."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()  # RLlib's checkpointing takes absolute paths only (else "empty scheme")

    @property
    def state_path(self) -> Path:
        return self.root / STATE_FILE

    def read_state(self) -> dict[str, Any]:
        if not self.state_path.is_file():
            return {"iteration": 0, "checkpoint": None, "warm_start": False, "wall_s": 0.0}
        return json.loads(self.state_path.read_text())

    def write_state(self, state: Mapping[str, Any]) -> None:
        write_atomic(self.state_path, json.dumps(dict(state), indent=2) + "\n")

    def read_rows(self) -> list[dict[str, str]]:
        path = self.root / PROGRESS_FILE
        if not path.is_file():
            return []
        with path.open(newline="") as f:
            return list(csv.DictReader(f))

    def write_rows(self, rows: list[Mapping[str, Any]]) -> None:
        out = [list(CSV_COLUMNS)] + [[_fmt(r.get(c)) for c in CSV_COLUMNS] for r in rows]
        write_atomic(self.root / PROGRESS_FILE, out)


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return float("nan")
    return out


def train_iteration(algo: Any, iteration: int) -> dict[str, Any]:
    """``algo.train()``, refused when no env runner sampled a step.

    RLlib takes a failed EnvRunner out of service and carries on; when all of them failed, PPO would go on
    updating nothing and export the warm start as if trained. Stop instead, with the cause: the runners'
    tracebacks stay in Ray's worker logs, so the driver builds and resets one environment of the same config
    and, when that fails, raises its error from here.
    """
    result = algo.train()
    if not _num(result.get("env_runners", {}).get("num_env_steps_sampled", 0)) > 0:
        head = f"PPO iteration {iteration} sampled no environment step: every env runner failed"
        cause = _env_failure(algo)
        if cause is not None:
            raise RuntimeError(
                f"{head}; building and resetting the environment here fails the same way: "
                f"{type(cause).__name__}: {cause}"
            ) from cause
        raise RuntimeError(
            f"{head} (the environment builds and resets here, so the error is in a later step: see Ray's worker "
            "logs under /tmp/ray/session_latest/logs); fix it and train again"
        )
    return result


def _env_failure(algo: Any) -> Exception | None:
    """The error of building and resetting one environment of ``algo``'s config in this process, if any."""
    config = getattr(algo, "config", None)
    env_cls = getattr(config, "env", None)
    if not isinstance(env_cls, type):
        return None  # a registered name: nothing to build here
    try:
        env_cls(dict(getattr(config, "env_config", None) or {})).reset(seed=0)
    except Exception as exc:  # the runners' own failure, replayed for its traceback
        return exc
    return None


def iteration_row(result: Mapping[str, Any], iteration: int, iter_s: float, wall_s: float) -> dict[str, Any]:
    """One progress.csv row from an ``Algorithm.train()`` result."""
    er = result.get("env_runners", {})
    ln = result.get("learners", {}).get(POLICY_ID, {})
    return {
        "iteration": iteration,
        "env_steps": int(_num(er.get("num_env_steps_sampled_lifetime", result.get("num_env_steps_sampled_lifetime")))),
        "episodes": int(np.nan_to_num(_num(er.get("num_episodes", 0)))),
        "episode_return_mean": _num(er.get("episode_return_mean")),
        "avg_jct": _num(er.get("avg_jct")),
        "entropy": _num(ln.get("entropy")),
        "policy_loss": _num(ln.get("policy_loss")),
        "vf_loss": _num(ln.get("vf_loss")),
        "vf_explained_var": _num(ln.get("vf_explained_var")),
        "iter_s": iter_s,
        "wall_s": wall_s,
    }


def summary_writer(logdir: Path) -> Any:
    """TensorBoard writer from torch (needs the tensorboard package) or tensorboardX; None if neither."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            return None
    return SummaryWriter(str(logdir))


def progress_line(row: Mapping[str, Any], total: int) -> str:
    def f(key: str, fmt: str) -> str:
        v = row[key]
        return "-" if isinstance(v, float) and math.isnan(v) else format(v, fmt)

    return (
        f"iter {row['iteration']}/{total}  env steps {row['env_steps']}  return {f('episode_return_mean', '.2f')}  "
        f"avg JCT {f('avg_jct', '.0f')} s  entropy {f('entropy', '.3f')}  policy loss {f('policy_loss', '.4f')}  "
        f"vf loss {f('vf_loss', '.3g')}  {row['iter_s']:.1f} s"
    )


def plot_learning_curve(rows: list[Mapping[str, Any]], path: Path) -> None:
    """Average JCT and episode return per iteration (PNG, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    it = np.array([int(r["iteration"]) for r in rows])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, key, label in (
        (axes[0], "avg_jct", "average JCT (s)"),
        (axes[1], "episode_return_mean", "episode return (sum over agents)"),
        (axes[2], "entropy", "policy entropy"),
    ):
        y = np.array([_num(r[key]) for r in rows])
        ok = ~np.isnan(y)
        ax.plot(it[ok], y[ok], marker="o", ms=3, alpha=0.5, label="per iteration")
        window = min(5, int(ok.sum()))
        if window >= 2:  # episodes draw different workloads, so single iterations are noisy
            smooth = np.convolve(y[ok], np.ones(window) / window, mode="valid")
            ax.plot(it[ok][window - 1 :], smooth, lw=2, marker="s", ms=4, label=f"running mean of {window} iterations")
            ax.legend(fontsize=8)
        if key == "avg_jct" and ok.sum() >= 2:  # say which way it went, and why one run's curve is no verdict
            series, what = (smooth, "running mean") if window >= 2 and len(smooth) >= 2 else (y[ok], "iteration")
            change = series[-1] / series[0] - 1.0
            ax.set_title(
                f"{'worse' if change > 0 else 'better'} by {abs(change):.0%} from first to last {what}"
                + ("\n(each iteration samples other workloads: compare paired evaluations)" if change > 0 else ""),
                fontsize=8,
            )  # fmt: skip
        ax.set_xlabel("PPO iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)


def checkpoint_meta(cfg: TrainConfig, iteration: int) -> dict[str, Any]:
    """What export needs besides the module: the env settings the policy was trained under."""
    env = EnvConfig.from_dict(cfg.env)
    predictor = env.predictor or env.interference
    return {
        "run": cfg.name,
        "iteration": iteration,
        "cluster": _cluster_spec(env.cluster),
        "num_agents": env.num_agents,
        "queue_slots": env.queue_slots,
        "placements": list(env.placements),
        "partition_unit": env.partition_unit,
        "queue_order": env.queue_order,
        "workload": env.workload,
        "interference": env.interference,
        "predictor": predictor,
        # learned: the model file (copied into an exported policy); oracle: Gavel's measured pairs, if any
        "interference_model": env.interference_model if predictor != "none" else None,
        "model": cfg.to_dict()["model"],
    }


def _cluster_spec(cluster: Any) -> Any:
    """Preset names stay names; a YAML file is inlined so the policy does not depend on its path."""
    from topology import CLUSTER_PRESETS

    if isinstance(cluster, str) and cluster not in CLUSTER_PRESETS and Path(cluster).is_file():
        return yaml.safe_load(Path(cluster).read_text())
    return cluster
