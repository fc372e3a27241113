"""A throwaway multi-node Ray cluster on this machine (loopback), for tests, benchmarks and a first try of a
command on several nodes: ``python -m experiments.local_cluster --nodes 2 -- marlsched run CONFIG --out DIR``
starts the nodes, runs the command with ``RAY_ADDRESS`` set to the cluster, and stops the nodes it started.

Each node is a ``ray start`` process tree; the head gets its own temporary folder, which every process of
the cluster names on its command line, so stopping kills exactly this cluster's processes (``ray stop``
would stop every Ray instance on the machine). Token authentication is off: nothing but loopback
reaches it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_command() -> Path:
    """The ``ray`` script beside this Python (the project's virtual environment)."""
    return Path(sys.executable).parent / "ray"


@contextlib.contextmanager
def local_cluster(nodes: int = 2, cpus_per_node: int = 1, object_store_bytes: int = 80_000_000) -> Iterator[tuple]:
    """``(address, env)`` of a running ``nodes``-node cluster; stopped on exit. ``env`` is the environment
    its clients need (authentication off). :func:`kill_node` loses a worker node."""
    ray = ray_command()
    if not ray.is_file():
        raise FileNotFoundError(f"no ray command next to {sys.executable}; install the project's dependencies")
    temp = tempfile.mkdtemp(prefix="marlsched-ray-")
    port = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    common = [
        "--node-ip-address=127.0.0.1", f"--num-cpus={cpus_per_node}", f"--object-store-memory={object_store_bytes}",
        "--disable-usage-stats",
    ]  # fmt: skip
    # the head starts its Ray client server outside its process tree, by default on the fixed port 10001 (where a
    # second cluster, or another user's, would clash): on a port of its own, which names it for stop_cluster
    client_port = free_port()
    head = [f"--ray-client-server-port={client_port}"]
    try:
        subprocess.run(
            [str(ray), "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false", *head,
             *common],
            env=env, check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        for index in range(1, nodes):
            marker = json.dumps({node_resource(f"127.0.0.1:{port}", index): 1})
            subprocess.run(
                [str(ray), "start", f"--address=127.0.0.1:{port}", f"--resources={marker}", *common],
                env=env, check=True, capture_output=True, timeout=120,
            )  # fmt: skip
        yield f"127.0.0.1:{port}", env
    finally:
        stop_cluster(temp, f"--port={client_port} --mode=")  # the client server's own port
        shutil.rmtree(temp, ignore_errors=True)  # its sessions' logs: a folder in /tmp per cluster otherwise


def node_resource(address: str, index: int) -> str:
    """The custom resource that marks worker node ``index`` (1, 2, ...) of the cluster at ``address``: its
    raylet names it on its command line, so :func:`kill_node` finds exactly that node's processes."""
    return f"local_node_{address.rsplit(':', 1)[1]}_{index}"


def kill_node(address: str, index: int) -> list[int]:
    """Lose worker node ``index`` of the local cluster at ``address`` as a machine is lost: SIGKILL to its
    raylet and every process under it (its workers and actors). Returns the killed pids."""
    pids = pids_mentioning(f"--static_resource_list={node_resource(address, index)},")
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def pids_mentioning(marker: str) -> list[int]:
    """Processes whose command line names ``marker`` (a cluster's temp folder), and their children."""
    found: set[int] = set()
    parents: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        if marker in cmd:
            found.add(int(proc.name))
    changed = True
    while changed:
        kids = {pid for pid, ppid in parents.items() if ppid in found} - found
        changed = bool(kids)
        found |= kids
    return sorted(found - {os.getpid()})


def stop_cluster(*markers: str) -> None:
    """What ``ray stop`` does, for the cluster whose processes' command lines name one of ``markers`` (its temp
    folder, its client server's port) only, with a shorter grace: Ray's GCS and raylets take more than 3 s to end
    on SIGTERM, and a throwaway cluster has nothing to save, so they get a second before SIGKILL."""

    def pids() -> list[int]:
        return sorted({pid for marker in markers for pid in pids_mentioning(marker)})

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (1 if sig == signal.SIGTERM else 10)
        while _alive(pids()) and time.monotonic() < deadline:
            time.sleep(0.3)


def _alive(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                return True
        except OSError:
            continue
    return False


def main(argv: list[str] | None = None) -> int:
    """Run a command on a throwaway local cluster (``RAY_ADDRESS`` names it); its exit status."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m experiments.local_cluster",
        description="Start a Ray cluster of several nodes on this machine (loopback, authentication off), run a "
        "command on it with RAY_ADDRESS set, and stop exactly the nodes it started (not other Ray instances, as "
        "`ray stop` would).",
        epilog="e.g. python -m experiments.local_cluster --nodes 2 -- marlsched run "
        "experiments/configs/quickstart.yaml --out results/two-node",
    )
    parser.add_argument("--nodes", type=int, default=2, help="nodes, the head included (default 2)")
    parser.add_argument("--cpus-per-node", type=int, default=1, help="CPUs each node offers (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- marlsched run CONFIG --out DIR")
    if args.nodes < 1 or args.cpus_per_node < 1:
        parser.error("--nodes and --cpus-per-node must be >= 1")
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:  # `timeout`, a batch scheduler, a closed terminal: as Ctrl-C
        received.append(signum)
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        print(f"starting {args.nodes} local Ray nodes of {args.cpus_per_node} CPU(s) each ...", flush=True)
        with local_cluster(nodes=args.nodes, cpus_per_node=args.cpus_per_node) as (address, env):
            print(f"cluster at {address}; running: {' '.join(command)}", flush=True)
            try:  # the command is killed on an interrupt (subprocess.run), then the nodes are stopped
                code = subprocess.run(command, env={**env, "RAY_ADDRESS": address}).returncode
            except KeyboardInterrupt:
                code = 128 + (received[0] if received else signal.SIGINT)
            except FileNotFoundError as err:
                print(f"error: {err.filename}: no such command (activate the environment: . .venv/bin/activate)")
                code = 127
            print(f"stopping the {args.nodes} nodes", flush=True)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    return code


if __name__ == "__main__":
    sys.exit(main())
