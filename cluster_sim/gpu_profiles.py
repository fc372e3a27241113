"""Where each GPU type's measured step times live, and what heterogeneity costs a measured application.

Sia (Jayaram Subramanya et al., SOSP'23) profiled Pollux's applications on five GPU types; its artifact keeps
one ``placements-<suffix>.csv`` / ``scalability-<suffix>.csv`` pair per type in ``<profiles>/<app>/``, named
by the machine it ran on. The files without a suffix are Pollux's own T4 measurements (byte-identical to
``aws``). This module maps marlsched's GPU type names to those suffixes and holds the facts Sia's simulator
uses per application: the restart cost of a re-allocation and its calibration slowdowns.
"""

from __future__ import annotations

from pathlib import Path

# marlsched GPU type -> Sia's profile suffix (the machine it was measured on)
PROFILE_SUFFIX: dict[str, str] = {
    "T4": "aws",  # AWS g4dn.12xlarge, 4 x T4
    "RTX2080Ti": "rtx",  # 8 x RTX 2080 Ti
    "A100": "dgx-ext",  # DGX A100, 8 x A100 40 GB over NVLink (the extended batch-size profile)
    "RTX6000": "quad",  # 4 x Quadro RTX 6000
    "V100": "azure",  # Azure ND40rs_v2, 8 x V100
}

# Seconds a job of each application loses on every (re-)allocation (checkpoint, restart, restore), as Sia's
# simulator charges them; other applications pay the simulator's restart cost.
RESTART_COST: dict[str, float] = {
    "cifar10": 50.0,
    "deepspeech2": 25.0,
    "bert": 120.0,
    "yolov3": 80.0,
    "imagenet": 250.0,
    "ncf": 15.0,
}

# Sia's calibration: its simulator divides every application's goodput by these, fitted to its physical
# runs on the RTX 2080 Ti nodes. Off by default; the Sia replay turns it on.
CALIBRATION_SLOWDOWN: dict[str, float] = {
    "cifar10": 1.8,
    "ncf": 1.5,
    "imagenet": 1.2,
    "yolov3": 1.2,
    "bert": 1.2,
    "deepspeech2": 1.2,
}

# Per-GPU batch limits that differ from the largest measured one (Sia's simulator: deepspeech2 fits 57 samples
# on an 11 GB RTX 2080 Ti).
MAX_LOCAL_BSZ: dict[tuple[str, str], int] = {("deepspeech2", "RTX2080Ti"): 57}


def profile_files(app_dir: Path, gpu_type: str) -> tuple[Path, Path] | None:
    """(placements, scalability) files of ``gpu_type`` in one application's folder, or None if it has none.

    Pollux's folders hold only the unsuffixed T4 files; Sia's hold a suffixed pair per type."""
    suffix = PROFILE_SUFFIX.get(gpu_type)
    if suffix is not None:
        pair = (app_dir / f"placements-{suffix}.csv", app_dir / f"scalability-{suffix}.csv")
        if pair[0].is_file():
            return pair
    if gpu_type == "T4" and (app_dir / "placements.csv").is_file():
        return app_dir / "placements.csv", app_dir / "scalability.csv"
    return None
