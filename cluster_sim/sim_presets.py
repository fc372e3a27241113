"""Named simulator settings of a published evaluation: what `marlsched simulate --preset NAME` and a run
config's ``preset: NAME`` fill in, defined once so that both paths replay a paper the same way.

A published workload replayed without its paper's settings gives other figures than the paper's, silently;
:func:`preset_warning` says so and names the preset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# the simulator settings a preset fixes (keywords of cluster_sim.build.build_simulator)
PRESET_KEYS = ("interference", "restart_cost", "start_cost", "app_restart_costs", "calibration")
# simulate's values for those settings when neither a flag nor a preset gives one
SIMULATE_DEFAULTS: dict[str, Any] = {
    "interference": "none",
    "restart_cost": 30.0,
    "start_cost": 0.0,
    "app_restart_costs": False,
    "calibration": False,
}


@dataclass(frozen=True)
class SimPreset:
    """A paper's simulator settings, and how to tell its workloads (a ``pollux:`` file under ``marker``)."""

    name: str
    about: str
    interference: str
    costs: Mapping[str, Any]  # restart and start costs, Sia's per-application costs and calibration
    marker: str  # a path component of the paper's workload files

    @property
    def settings(self) -> dict[str, Any]:
        """Every setting of :data:`PRESET_KEYS`, as keywords of ``build_simulator``."""
        return {"interference": self.interference, **self.costs}

    def owns(self, workload_spec: str) -> bool:
        """Whether ``workload_spec`` is one of this paper's published workloads."""
        kind, _, rest = workload_spec.partition(":")
        return kind.strip().lower() == "pollux" and self.marker in Path(rest.split(",")[0]).parts


SIM_PRESETS: dict[str, SimPreset] = {
    "sia": SimPreset(
        name="sia",
        about="Sia (SOSP'23): each application's own restart cost on every allocation, the first start included "
        "(30 s start and restart for jobs of other applications), Sia's calibration slowdowns, no interference",
        interference="none",
        costs={"restart_cost": 30.0, "start_cost": 30.0, "app_restart_costs": True, "calibration": True},
        marker="sia-sosp23",
    ),
    "pollux": SimPreset(
        name="pollux",
        about="Pollux (OSDI'21): 30 s start-up on every allocation, no interference",
        interference="none",
        costs={"restart_cost": 30.0, "start_cost": 30.0, "app_restart_costs": False, "calibration": False},
        marker="pollux-osdi21",
    ),
}


def restart_phrase(restart_cost: float, app_restart_costs: bool, start_cost: float = 0.0) -> str:
    """The restart cost as a results title states it: Sia's per-application costs replace the flat one; a start
    cost (Pollux's and Sia's 30 s on every first start) is named where there is one, since figures move with it."""
    if app_restart_costs:  # the application's cost on every allocation, the first start included
        from cluster_sim.gpu_profiles import RESTART_COST

        own = ", ".join(f"{app} {cost:g} s" for app, cost in RESTART_COST.items())
        others = f"{restart_cost:g} s restart" + (f", {start_cost:g} s start" if start_cost else "")
        return f"start and restart cost each application's own on every allocation ({own}; Sia's), {others} for others"
    phrase = f"restart cost {restart_cost:g} s"
    return f"{phrase}, start cost {start_cost:g} s" if start_cost else phrase


def get_preset(name: str) -> SimPreset:
    """The preset ``name``; an unknown one is named with the choices."""
    if name not in SIM_PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of: {', '.join(SIM_PRESETS)}")
    return SIM_PRESETS[name]


def resolve_settings(preset: str | None, given: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The simulator settings: each one given (not None), else the preset's, else ``defaults``."""
    base = dict(defaults)
    if preset:
        base.update(get_preset(preset).settings)
    base.update({k: v for k, v in given.items() if v is not None})
    return base


def preset_warning(workload_spec: str, settings: Mapping[str, Any]) -> str | None:
    """A warning when a published workload runs with settings other than its paper's, naming them and the
    preset that sets them; None when it matches (or the workload is no paper's)."""
    for preset in SIM_PRESETS.values():
        if not preset.owns(workload_spec):
            continue
        differ = [k for k, v in preset.settings.items() if settings.get(k) != v]
        if not differ:
            return None
        what = ", ".join(f"{k} {settings.get(k)!r} (paper: {preset.settings[k]!r})" for k in differ)
        return (
            f"this is {preset.name.capitalize()}'s published workload, run with other settings than its paper's: "
            f"{what}; its figures will differ from the paper's. Use --preset {preset.name} (a run config: "
            f"preset: {preset.name}) to replay it as published."
        )
    return None
