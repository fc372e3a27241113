"""Parameter count and forward latency of the shared HGNN policy on one partition of a preset cluster.

A decision round asks every agent once, so two figures matter: one agent alone (batch 1, what a
per-partition Ray actor pays) and all agents of the cluster batched together (batch = number of agents,
what a single inference server would pay). Ray actors run with one intra-op thread by default, hence
``--threads 1``.

    python -m experiments.benchmarks.hgnn_latency --cluster dc-1k --agents 32
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import topology
from marl.env.obs_layout import ObsLayout
from marl.models.hgnn import HGNNPolicyNet, example_inputs, trace_policy


def _time_ms(fn: Callable[[], object], repeats: int, warmup: int = 10) -> tuple[float, float]:
    """Median and 95th percentile of ``fn``'s wall time in milliseconds."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.95 * len(samples)))]


def run(cluster: str, agents: int, queue: int, candidates: int, hidden: int, threads: int, repeats: int) -> dict:
    torch.set_num_threads(threads)
    view = topology.build_cluster(cluster).view
    part = topology.partition(view, agents)[0]
    hier = topology.hierarchy_tensors(view, part)
    layout = ObsLayout(G=hier.num_gpus, S=hier.num_servers, R=hier.num_racks, Q=queue, C=candidates)
    torch.manual_seed(0)
    net = HGNNPolicyNet(layout, hier, hidden=hidden).eval()
    traced = trace_policy(net)
    result: dict = {
        "cluster": cluster,
        "agents": agents,
        "partition": {"gpus": layout.G, "servers": layout.S, "racks": layout.R},
        "queue": queue,
        "candidates": candidates,
        "hidden": hidden,
        "parameters": sum(p.numel() for p in net.parameters()),
        "threads": threads,
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "latency_ms": {},
    }
    with torch.inference_mode():
        for batch in (1, agents):
            inputs = example_inputs(layout, batch, seed=batch)
            for name, model in (("eager", net), ("torchscript", traced)):
                median, p95 = _time_ms(lambda m=model, x=inputs: m(*x), repeats)
                result["latency_ms"][f"{name}_b{batch}"] = {
                    "median": median,
                    "p95": p95,
                    "per_agent": median / batch,
                }
    return result


def _print(result: dict) -> None:
    p = result["partition"]
    print(
        f"{result['cluster']}, {result['agents']} agents: partition of {p['racks']} racks, {p['servers']} "
        f"servers, {p['gpus']} GPUs; Q={result['queue']} queued, C={result['candidates']} candidates"
    )
    print(f"parameters: {result['parameters']:,} (hidden {result['hidden']}); torch threads: {result['threads']}")
    print(f"{'model, batch':<22}{'median ms':>11}{'p95 ms':>10}{'ms / agent':>12}")
    for key, t in result["latency_ms"].items():
        print(f"{key:<22}{t['median']:>11.3f}{t['p95']:>10.3f}{t['per_agent']:>12.3f}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="dc-1k", help=f"preset: {', '.join(topology.CLUSTER_PRESETS)}")
    ap.add_argument("--agents", type=int, default=32, help="partitions (one agent each)")
    ap.add_argument("--queue", type=int, default=8, help="queued jobs shown to an agent (Q)")
    ap.add_argument("--candidates", type=int, default=32, help="candidate placements (C)")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    result = run(args.cluster, args.agents, args.queue, args.candidates, args.hidden, args.threads, args.repeats)
    _print(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=args.json.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(result, f, indent=2)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
