"""Ray's standard result logs for a training run folder, so that what an RLlib user reads elsewhere reads here.

Ray Tune writes each iteration's result dict as one JSON line (``result.json``) and its numeric leaves as
TensorBoard scalars named ``ray/tune/<path>``; :func:`marl.training.priority_train.train_priority` runs the
algorithm outside Tune, so it writes the same two itself: ``tensorboard --logdir OUT`` shows the run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"
TENSORBOARD_DIR = "tensorboard"
_SKIPPED = ("config", "pid", "timestamp", "time_total_s", "training_iteration")  # as Tune's TBX logger skips


def scalars(result: Mapping[str, Any], prefix: str = "ray/tune") -> dict[str, float]:
    """The finite numeric leaves of a (nested) result dict, keyed by their ``/``-joined path under ``prefix``."""
    out: dict[str, float] = {}

    def walk(node: Mapping[str, Any], path: str) -> None:
        for key, value in node.items():
            if not path and key in _SKIPPED:
                continue
            name = f"{path}/{key}" if path else str(key)
            if isinstance(value, Mapping):
                walk(value, name)
            elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value)):
                out[f"{prefix}/{name}"] = float(value)
            elif hasattr(value, "item") and getattr(value, "size", 0) == 1:  # numpy and torch scalars
                v = float(value.item())
                if math.isfinite(v):
                    out[f"{prefix}/{name}"] = v

    walk(result, "")
    return out


class ResultLog:
    """``result.json`` (appended: a resumed run continues it) and TensorBoard events under ``folder``."""

    def __init__(self, folder: str | Path) -> None:
        from tensorboardX import SummaryWriter  # ray[rllib] brings it (Tune's TensorBoard logger uses it)

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._json = open(self.folder / RESULT_FILE, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        self._writer = SummaryWriter(str(self.folder / TENSORBOARD_DIR), flush_secs=30)

    def write(self, result: Mapping[str, Any], step: int) -> None:
        """One iteration: its whole result as a JSON line, its numbers as scalars at ``step`` (env steps)."""
        from ray.tune.utils.util import SafeFallbackEncoder

        self._json.write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")
        self._json.flush()
        for name, value in scalars(result).items():
            self._writer.add_scalar(name, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._json.close()
        self._writer.close()

    def __enter__(self) -> ResultLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
