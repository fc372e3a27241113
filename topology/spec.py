"""Cluster specifications: the validated description from which both the graph and the view are built.

A spec comes from a preset (a mapping in :mod:`topology.datacenter`) or a YAML file with the same keys.
Every bad field raises :class:`ClusterSpecError` naming the source, the field path (``mix[1].fraction``),
what is wrong and what is allowed, so a typo in a config never turns into a silently different cluster.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from topology.servers import GPU_LINKS, SERVER_PRESETS, ServerLinks, ServerSpec
from topology.yaml_lines import dotted_path, line_of, repeated_key, yaml_key_lines, yaml_problem

TOP_KEYS = (
    "name",
    "pods",
    "racks_per_pod",
    "servers_per_rack",
    "server",
    "gpu_type",
    "rack_oversubscription",
    "pod_oversubscription",
    "mix",
)
MIX_KEYS = ("gpu_type", "fraction", "server")
SERVER_KEYS = ("name", "base", "gpus_per_server", "sockets", "nvswitch", "intra_bw", "cross_socket_bw", "nic_bw")


class ClusterSpecError(ValueError):
    """A cluster spec field is missing or wrong; the message names source (and line), field path and the fix."""

    def __init__(self, source: str, path: str, problem: str, allowed: str = "", line: int | None = None) -> None:
        self.source, self.path, self.problem, self.allowed, self.line = source, path, problem, allowed, line
        where = f"{source}, line {line}" if line else source
        super().__init__(f"{where}: {self.detail}" if path == "<file>" else f"{where}: {path}: {self.detail}")

    @property
    def detail(self) -> str:
        """What is wrong and what is allowed, without where (for a config that holds the spec inline)."""
        if not self.allowed:
            return self.problem
        return f"{self.problem}{' ' if self.problem.endswith('?') else '; '}allowed: {self.allowed}"

    def __reduce__(self):  # picklable, so that it crosses process pools intact
        return (type(self), (self.source, self.path, self.problem, self.allowed, self.line))


def did_you_mean(value: str, allowed: Iterable[str]) -> str:
    """``did you mean 'X'?`` for the allowed name closest to a misspelt ``value`` (in any case), else nothing."""
    by_case = {name.casefold(): name for name in allowed}
    close = difflib.get_close_matches(value.casefold(), list(by_case), n=1, cutoff=0.6)
    return f"did you mean {by_case[close[0]]!r}?" if close else ""


@dataclass(frozen=True)
class GpuGroup:
    """One kind of server in the cluster: a server model with one GPU generation and its share of racks."""

    gpu_type: str
    server: ServerSpec
    fraction: float
    links: ServerLinks


@dataclass(frozen=True)
class ClusterSpec:
    """Uniform hierarchy pods x racks x servers; ``groups`` say which racks hold which servers."""

    name: str
    pods: int
    racks_per_pod: int
    servers_per_rack: int
    groups: tuple[GpuGroup, ...]
    rack_oversubscription: float = 1.0
    pod_oversubscription: float = 1.0
    source: str = "<spec>"

    @property
    def num_racks(self) -> int:
        return self.pods * self.racks_per_pod

    @property
    def num_servers(self) -> int:
        return self.num_racks * self.servers_per_rack

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """GPU generations in order of first appearance among the groups (the view's type indices)."""
        return tuple(dict.fromkeys(g.gpu_type for g in self.groups))

    def rack_counts(self) -> np.ndarray:
        return rack_counts([g.fraction for g in self.groups], self.num_racks)

    def rack_groups(self) -> np.ndarray:
        """Group index of every rack, interleaved so that every pod and partition sees the same mix.

        Group g's n_g racks sit at the ideal times (j + 0.5) / n_g; sorting all of them (ties broken by
        group order) spreads each generation evenly over the rack sequence, deterministically.
        """
        counts = self.rack_counts()
        group = np.repeat(np.arange(len(counts)), counts)
        times = np.concatenate([(np.arange(n) + 0.5) / n for n in counts])
        return group[np.lexsort((group, times))].astype(np.int32)


def rack_counts(fractions: list[float], racks: int) -> np.ndarray:
    """Racks per group by largest remainder: sums to ``racks`` exactly, ties go to the earlier group."""
    raw = np.asarray(fractions, dtype=np.float64) * racks
    counts = np.floor(raw + 1e-9).astype(np.int64)
    left = racks - int(counts.sum())
    if left > 0:
        order = np.lexsort((np.arange(len(raw)), -(raw - counts)))
        counts[order[:left]] += 1
    return counts


def _check_keys(data: Any, allowed: tuple[str, ...], path: str, source: str) -> Mapping:
    if not isinstance(data, Mapping):
        raise ClusterSpecError(source, path, f"expected a mapping, got {type(data).__name__}")
    unknown = [k for k in data if k not in allowed]
    if unknown:
        key = str(unknown[0])
        raise ClusterSpecError(
            source,
            f"{path}.{key}" if path else key,
            f"unknown key; {did_you_mean(key, allowed)}".rstrip("; "),
            ", ".join(allowed),
        )
    return data


def _int(value: Any, path: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ClusterSpecError(source, path, f"got {value!r}", "an integer >= 1")
    return value


def _float(value: Any, path: str, source: str, minimum: float, strict: bool = True) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (value <= minimum if strict else value < minimum):
        raise ClusterSpecError(source, path, f"got {value!r}", f"a number {'>' if strict else '>='} {minimum}")
    return float(value)


def _gpu_type(value: Any, path: str, source: str) -> str:
    """A GPU type as the datasheets name it; case does not matter (``a100`` is ``A100``)."""
    if isinstance(value, str):
        by_case = {t.casefold(): t for t in GPU_LINKS}
        if value.casefold() in by_case:
            return by_case[value.casefold()]
    guess = did_you_mean(value, GPU_LINKS) if isinstance(value, str) else ""
    raise ClusterSpecError(source, path, f"unknown GPU type {value!r}; {guess}".rstrip("; "), ", ".join(GPU_LINKS))


def _server(value: Any, path: str, source: str) -> ServerSpec:
    if isinstance(value, str):
        if value not in SERVER_PRESETS:
            raise ClusterSpecError(
                source,
                path,
                f"unknown server preset {value!r}; {did_you_mean(value, SERVER_PRESETS)}".rstrip("; "),
                f"{', '.join(SERVER_PRESETS)} or a mapping",
            )
        return SERVER_PRESETS[value]
    if not isinstance(value, Mapping):
        raise ClusterSpecError(source, path, f"got {value!r}", f"a preset ({', '.join(SERVER_PRESETS)}) or a mapping")
    data = _check_keys(value, SERVER_KEYS, path, source)
    base = None
    if "base" in data:
        if not isinstance(data["base"], str):
            raise ClusterSpecError(source, f"{path}.base", "must name a preset", ", ".join(SERVER_PRESETS))
        base = _server(data["base"], f"{path}.base", source)
    elif "gpus_per_server" not in data:
        raise ClusterSpecError(source, f"{path}.gpus_per_server", "missing (needed when there is no base)")
    kw: dict[str, Any] = {"name": str(data.get("name", f"{base.name}-custom" if base else "custom"))}
    if "gpus_per_server" in data:
        kw["gpus"] = _int(data["gpus_per_server"], f"{path}.gpus_per_server", source)
    if "sockets" in data:
        kw["sockets"] = _int(data["sockets"], f"{path}.sockets", source)
    if "nvswitch" in data:
        if not isinstance(data["nvswitch"], bool):
            raise ClusterSpecError(source, f"{path}.nvswitch", f"got {data['nvswitch']!r}", "true or false")
        kw["nvswitch"] = data["nvswitch"]
    for key in ("intra_bw", "cross_socket_bw", "nic_bw"):
        if key in data:
            kw[key] = _float(data[key], f"{path}.{key}", source, 0.0)
    server = replace(base, **kw) if base else ServerSpec(**kw)
    for field, problem in server.problems():
        raise ClusterSpecError(source, f"{path}.{field}", problem)
    return server


def _group(gpu_type: str, server: ServerSpec, fraction: float, path: str, source: str) -> GpuGroup:
    try:
        links = server.links(gpu_type)
    except ValueError as e:
        raise ClusterSpecError(source, path, str(e)) from None
    return GpuGroup(gpu_type, server, fraction, links)


def parse_spec(data: Any, source: str = "<spec>", default_name: str = "cluster") -> ClusterSpec:
    """Validate a mapping with the keys of :data:`TOP_KEYS` and build the spec."""
    data = _check_keys(data, TOP_KEYS, "", source)
    for key in ("racks_per_pod", "servers_per_rack"):
        if key not in data:
            raise ClusterSpecError(source, key, "missing", "an integer >= 1")
    counts = {k: _int(data.get(k, 1), k, source) for k in ("pods", "racks_per_pod", "servers_per_rack")}
    ratios = {k: _float(data.get(k, 1.0), k, source, 1.0, strict=False) for k in TOP_KEYS[6:8]}
    default_server = _server(data["server"], "server", source) if "server" in data else None
    default_type = _gpu_type(data["gpu_type"], "gpu_type", source) if "gpu_type" in data else None
    if "mix" not in data:
        for key, value in (("server", default_server), ("gpu_type", default_type)):
            if value is None:
                raise ClusterSpecError(source, key, "missing (or give a mix)")
        groups = (_group(default_type, default_server, 1.0, "server", source),)
    else:
        mix = data["mix"]
        if not isinstance(mix, list) or not mix:
            raise ClusterSpecError(source, "mix", f"got {mix!r}", "a non-empty list of {gpu_type, fraction, server}")
        groups = []
        for i, entry in enumerate(mix):
            path = f"mix[{i}]"
            entry = _check_keys(entry, MIX_KEYS, path, source)
            if "fraction" not in entry:
                raise ClusterSpecError(source, f"{path}.fraction", "missing", "a number in (0, 1]")
            fraction = _float(entry["fraction"], f"{path}.fraction", source, 0.0)
            if fraction > 1.0:
                raise ClusterSpecError(source, f"{path}.fraction", f"got {fraction}", "a number in (0, 1]")
            gtype = _gpu_type(entry["gpu_type"], f"{path}.gpu_type", source) if "gpu_type" in entry else default_type
            server = _server(entry["server"], f"{path}.server", source) if "server" in entry else default_server
            if gtype is None or server is None:
                missing = "gpu_type" if gtype is None else "server"
                raise ClusterSpecError(source, f"{path}.{missing}", "missing (and no top-level default)")
            groups.append(_group(gtype, server, fraction, path, source))
        for key, default in (("server", default_server), ("gpu_type", default_type)):
            if default is not None and all(key in entry for entry in mix if isinstance(entry, dict)):
                raise ClusterSpecError(
                    source, key, "is the default of mix entries without their own, and every mix entry gives its own:"
                    f" drop the top-level {key}, or leave it out of the entries that should take it",
                )  # fmt: skip
        total = sum(g.fraction for g in groups)
        if abs(total - 1.0) > 1e-6:
            raise ClusterSpecError(source, "mix", f"the mix[*].fraction values sum to {total:g}", "a sum of 1")
        racks = counts["pods"] * counts["racks_per_pod"]
        for i, n in enumerate(rack_counts([g.fraction for g in groups], racks)):
            if n == 0:
                raise ClusterSpecError(
                    source,
                    f"mix[{i}].fraction",
                    f"{groups[i].fraction:g} of {racks} racks rounds to no rack",
                    f"a fraction >= {1 / racks:.3g}, or more racks",
                )
        groups = tuple(groups)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ClusterSpecError(source, "name", f"got {name!r}", "a non-empty string")
    return ClusterSpec(name=name, groups=groups, source=source, **counts, **ratios)


def load_spec(path: str | Path) -> ClusterSpec:
    """Read and validate a YAML cluster spec; the cluster name defaults to the file's stem."""
    path = Path(path)
    try:
        text = path.read_text()
        data = yaml.safe_load(text)
    except OSError as e:
        raise ClusterSpecError(str(path), "<file>", f"cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        line, what = yaml_problem(e)
        raise ClusterSpecError(str(path), "<file>", what, line=line) from None
    if (twice := repeated_key(text)) is not None:
        key, first, second = twice
        raise ClusterSpecError(str(path), ".".join(key), f"given twice (also at line {first}); keep one", line=second)
    if not isinstance(data, Mapping):
        raise ClusterSpecError(
            str(path),
            "<file>",
            f"holds {'nothing' if data is None else 'no mapping'}; a cluster "
            "spec is a mapping of keys (name, pods, racks_per_pod, servers_per_rack, server, ...)",
        )
    try:
        return parse_spec(data, source=str(path), default_name=path.stem)
    except ClusterSpecError as e:  # named again with the line of its field (of the enclosing key, if missing)
        line = line_of(yaml_key_lines(text), dotted_path(e.path))
        raise ClusterSpecError(e.source, e.path, e.problem, e.allowed, line) from None
