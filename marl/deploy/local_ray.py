"""Starting Ray in-process for one command: its workers' threads set deliberately, nothing left behind.

- **Threads.** A Ray worker (a simulation task, an RLlib env runner, an actor) is given one CPU. NumPy's
  BLAS and OpenMP would still start a thread per core in each, and with several workers per machine those
  threads only contend: the ``pollux`` policy runs 2.5x slower that way on a busy 2-core machine. The
  workers of a Ray started here inherit one BLAS/OpenMP thread each; a value the user exported is kept,
  and workers of a cluster the user started follow that cluster's environment.
- **Repeatable.** Workers start with ``PYTHONHASHSEED=0`` (unless set): with the seed, the same machine and
  the same versions, training gives the same curve and policy (see the README for what is not promised).
- **Quiet.** Ray's and RLlib's start-up chatter is kept from the terminal: the INFO and WARNING lines of
  their Python loggers, and the one C++ line the driver prints at error level on every env runner's start
  (``core_worker.cc: Actor ... max_restarts > 0``, a caveat about restarting actors whose arguments sit in
  the object store, Ray issue 53727): :func:`without_known_noise` drops that line alone and passes every
  other line on. Errors still arrive, as ERROR lines and as the exceptions Ray raises in the driver.
- **No leftovers.** No dashboard is started. Ray's own processes die with the command, except two agents
  the raylet starts (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) that outlive a command killed with
  SIGKILL. A small watchdog process, started with Ray, waits for the command's end however it comes (a
  pipe only the command holds reaches end-of-file) and then stops whichever of Ray's processes are still
  there (matched by pid and start time, so a recycled pid is never touched).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

WORKER_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_WATCHDOG_PIPES: list[int] = []  # write ends held open for the life of the process

_WATCHDOG = r"""
import os, sys, time
import psutil
os.read(int(sys.argv[1]), 1)  # blocks until every holder of the write end has exited
procs = []
for item in sys.argv[2:]:
    pid, started = item.split(":")
    try:
        p = psutil.Process(int(pid))
        if abs(p.create_time() - float(started)) < 1e-3:
            procs.append(p)
    except psutil.Error:
        pass
for p in procs:
    try:
        p.terminate()
    except psutil.Error:
        pass
_, alive = psutil.wait_procs(procs, timeout=3)
for p in alive:
    try:
        p.kill()
    except psutil.Error:
        pass
"""


RAY_LOGGERS = ("ray", "ray.rllib", "ray.tune")  # Python loggers whose INFO and WARNING lines are start-up chatter
QUIET_LEVEL = logging.ERROR


# C++ lines of the driver that report no fault of the run (each a regular expression)
KNOWN_NOISE = (r"core_worker\.cc:\d+: Actor with class name: .* max_restarts > 0",)


def quiet_ray_output() -> None:
    """Ray's and RLlib's Python loggers at ERROR, before ``ray.init`` (see the module docstring)."""
    for name in RAY_LOGGERS:
        logging.getLogger(name).setLevel(QUIET_LEVEL)


@contextlib.contextmanager
def without_known_noise() -> Iterator[None]:
    """Run the block with the process's stderr (file descriptor 2, where Ray's C++ code writes) caught in a
    file, then pass each line on except those of :data:`KNOWN_NOISE`."""
    import re
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            noise = re.compile("|".join(KNOWN_NOISE))
            kept = [line for line in caught.read().decode(errors="replace").splitlines(True) if not noise.search(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


def one_thread_per_worker() -> dict[str, str]:
    """Set the thread variables (unless set) so the workers of a Ray started next inherit them; returns them."""
    for var in WORKER_THREAD_VARS:
        os.environ.setdefault(var, "1")
    return {var: os.environ[var] for var in WORKER_THREAD_VARS}


def start_local_ray(num_cpus: int | None, object_store_bytes: int) -> None:
    """``ray.init`` in-process with the settings above (see the module docstring)."""
    import ray

    one_thread_per_worker()
    # Python's string hashing is salted per process unless PYTHONHASHSEED is set; RLlib orders agents and
    # batches through sets and dicts of strings, so unsalted workers are what makes seeded training repeat
    os.environ.setdefault("PYTHONHASHSEED", "0")
    quiet_ray_output()
    # address "local": a new Ray here, never a cluster that `ray start` left in /tmp/ray/ray_current_cluster
    # (Ray's default would connect to it, or fail when that cluster is gone or num_cpus is given)
    # no dashboard, so no metrics either: collecting them was a quarter of an idle in-process Ray's CPU (0.8 s of
    # CPU a minute of the 3.1 s it used, measured)
    ray.init(address="local", num_cpus=num_cpus, object_store_memory=object_store_bytes, include_dashboard=False,
             log_to_driver=False, logging_level=QUIET_LEVEL,
             _system_config={"enable_metrics_collection": False})  # fmt: skip
    reap_on_exit()


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Refuse a ``HOST:PORT`` (or ``ray://HOST:PORT``) where nothing listens, in seconds: Ray itself retries such
    an address for minutes, printing only its own connection errors. ``auto`` is left to Ray."""
    import socket

    if address.startswith(("http://", "https://")):
        raise ValueError(
            f"Ray address {address}: a dashboard URL (what `ray job submit` takes), not the cluster's address; give "
            "the head's HOST:6379 (the address `ray start --head` printed), or auto on a node of the cluster"
        )
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout).close()
    except OSError as err:
        raise ValueError(
            f"Ray address {address}: nothing answers there ({err.strerror or err}); start the cluster's head with "
            "`ray start --head` and give its HOST:6379, or leave --address out to run Ray in-process"
        ) from None


def init_ray(address: str | None, num_cpus: int | None, object_store_bytes: int, log=print) -> bool:
    """Connect to the Ray cluster at ``address`` (``auto``, ``HOST:PORT``; None: ``RAY_ADDRESS`` where set, as
    inside ``ray job submit``) or start Ray in-process (:func:`start_local_ray`); logs where, with the nodes, CPUs
    and a cluster's dashboard. Returns whether this call started Ray (and so must stop it); False where Ray was
    already up."""
    import time

    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    t0 = time.perf_counter()
    dashboard = ""
    if address:
        check_reachable(address)
        quiet_ray_output()  # num_cpus may not be passed when connecting
        try:
            ctx = ray.init(address=address, log_to_driver=False, logging_level=QUIET_LEVEL)
        except ConnectionError as err:  # a port that answers but is no Ray head, or auto without a cluster here
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(
                f"Ray address {address}: no Ray cluster answered ({first}); give the head's HOST:6379 (the address "
                "`ray start --head` printed), or leave --address out to run Ray in-process"
            ) from None
        found = ray.get_runtime_context().gcs_address if address == "auto" else address  # the one auto found
        where = f"cluster at {found}" + (" (auto)" if found != address else "")
        dashboard = f"; dashboard {ctx.dashboard_url}" if ctx.dashboard_url else "; the cluster runs no dashboard"
    else:
        num_cpus = num_cpus or os.cpu_count() or 1
        start_local_ray(num_cpus, object_store_bytes)
        where = f"in-process ({num_cpus} CPUs)"
    cpus = ray.cluster_resources().get("CPU", 0)
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    log(f"ray: {where}, {nodes} node(s), {cpus:g} CPUs ({time.perf_counter() - t0:.1f} s){dashboard}")
    return True


def reap_on_exit() -> None:
    """Start the watchdog over the processes this process has started so far (Ray's, right after init)."""
    import psutil

    procs = []
    for p in psutil.Process().children(recursive=True):
        try:
            procs.append(f"{p.pid}:{p.create_time()}")
        except psutil.Error:
            continue
    if not procs:
        return
    read, write = os.pipe()
    subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(read), *procs],
        pass_fds=(read,),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C in the terminal reaches the command, not its watchdog
    )
    os.close(read)
    os.set_inheritable(write, False)  # only this process holds it: its exit is the watchdog's signal
    _WATCHDOG_PIPES.append(write)


__all__ = ["WORKER_THREAD_VARS", "init_ray", "one_thread_per_worker", "reap_on_exit", "start_local_ray"]


def stop_algorithm(algo: Any) -> None:
    """``algo.stop()``, and the empty folder RLlib's Trainable makes under ``~/ray_results`` outside Tune removed
    (one per algorithm built: hundreds after a day of tests and benchmarks)."""
    from pathlib import Path

    logdir = Path(getattr(algo, "logdir", "") or "")
    # APPO's learner thread in this process: RLlib waits 5 s for it to stop, an update on busy cores outlasts
    # that, and a thread still running torch at interpreter exit aborts the process (exit 134) after success
    learner = getattr(getattr(algo, "learner_group", None), "_learner", None)
    thread = getattr(learner, "_learner_thread", None)
    algo.stop()
    if thread is not None and thread.is_alive():
        thread.request_stop()
        thread.join()
    if logdir.name and logdir.is_dir() and not any(logdir.iterdir()):
        logdir.rmdir()
