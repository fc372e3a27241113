"""What ``marlsched train --config`` trains: an agent spec (:data:`marl.agents.AGENTS`) and one of its algorithms.

A training config names ``agent:`` (default ``priority``: marlsched's per-partition agents) and ``algo:`` (default:
the agent's first algorithm); the rest of the file is that algorithm's settings, either one flat mapping (the
algorithm's settings dataclass) or the agent's sections. One checker reads every config, so a wrong agent,
algorithm or key fails at once with the file, line, key path and the allowed values. Every trained policy lands
in ``OUT/policy``.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster_sim.out_folder import folder_lock
from marl.agents import AGENTS, AgentSpec, Algorithm, check_references, priority, reference, resolve
from marl.deploy.policy_files import code_version, training_recipe
from marl.training.config import ConfigChecker, TrainConfigError, read_yaml_config, set_keys

Log = Callable[[str], None]
POLICY = "policy"  # OUT/policy: the trained policy folder, whatever trained it
RESUMABLE = ("ppo", "appo")  # the algorithms that run on RLlib: on a Ray cluster, resumed from OUT/checkpoint
# what trainings write at OUT's top: a folder holding none of them but other files is not a training's
TRAINING_WRITES = (POLICY, "checkpoint", "progress.csv", "snapshots", "warm_start", "tensorboard", "result.json",
                   "learning_curve.png")  # fmt: skip
DEFAULT_AGENT = "priority"
# the loops that run on RLlib (the priority agents' ppo and appo): they build the priority agents' env
RLLIB_TRAINERS = frozenset(a.trainer for a in priority.SPEC.algorithms if a.name in RESUMABLE)
PRIORITY_PARSERS = frozenset(a.parse for a in priority.SPEC.algorithms if a.parse)


@dataclass(frozen=True)
class TrainRequest:
    """One ``marlsched train`` invocation: what the command line adds to the config."""

    config: Path
    out: Path
    iterations: int | None = None
    address: str | None = None  # a Ray cluster for the algorithms that use Ray (``ppo``); RAY_ADDRESS otherwise
    resume: bool = False
    evaluate: bool | None = None
    sets: tuple[str, ...] = ()  # ``--set KEY=VALUE``: settings that replace the config's
    command: str = ""
    log: Log = print


def recipe_of(data: Any, chk: ConfigChecker) -> tuple[AgentSpec, Algorithm, dict[str, Any]]:
    """The agent and algorithm a training config's data names, and the rest of its keys."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise chk.fail((), "a training config holds a mapping: agent, algo and the algorithm's settings")
    data = dict(data)
    for key in data:  # a misspelt agent or algo key would silently train the default agent with its defaults
        close = difflib.get_close_matches(str(key), ["agent", "algo"], n=1, cutoff=0.75)
        if close and key not in ("agent", "algo") and close[0] not in data:
            also = f" (agents: {', '.join(AGENTS)})" if close[0] == "agent" else " (marlsched train --help lists them)"
            raise chk.fail((str(key),), f"unknown key; did you mean {close[0]!r}?{also}")
    agent, algo = data.pop("agent", DEFAULT_AGENT), data.pop("algo", None)
    if not isinstance(agent, str) or agent not in AGENTS:
        close = difflib.get_close_matches(str(agent), list(AGENTS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise chk.fail(("agent",), f"{agent!r} is not an agent marlsched trains; {hint}agents: {', '.join(AGENTS)}")
    spec = AGENTS[agent]
    try:
        algorithm = spec.algorithm(algo)
    except ValueError as err:
        raise chk.fail(("algo",), str(err)) from None
    try:  # a typo in a package's spec, said before anything trains (not as another loop, or an unloadable folder)
        check_references(spec, algorithm)
    except ValueError as err:
        raise chk.fail(("agent",), str(err)) from None
    if algorithm.trainer in RLLIB_TRAINERS:
        trunk = AGENTS[DEFAULT_AGENT]
        if spec.decision != trunk.decision:  # RLlib's loops build the priority agents' env: their layer, or a subclass
            from marl.env.rounds_agents import agents_class

            try:
                agents_class(spec.decision)
            except ValueError:
                raise chk.fail(
                    ("algo",), f"agent {agent!r} has a decision layer of its own ({spec.decision}) that is no subclass "
                    f"of the priority agents' ({trunk.decision}), which the RLlib loops ({', '.join(RESUMABLE)}) "
                    "build; make it one, or train it with a loop that takes decision= (docs/extending.md)"
                ) from None  # fmt: skip
            env = data.get("env") if isinstance(data.get("env"), Mapping) else {}
            if env.get("decision", spec.decision) != spec.decision:
                raise chk.fail(("env", "decision"), f"agent {agent!r} decides with {spec.decision}; leave it out")
            data = {**data, "env": {**env, "decision": spec.decision}}  # its layer, in the env the runners build
    elif (other := _plays_another_layer(spec, algorithm)) is not None:
        raise chk.fail(
            ("algo",), f"agent {agent!r} decides with a layer of its own ({spec.decision}), but algo "
            f"{algorithm.name!r}'s loop ({algorithm.trainer}) builds the layer of agent {other.name!r} "
            f"({other.decision}) and takes no decision=: it would train another scheduler than the one its folder "
            "loads. Train it with a loop that plays its layer (RLlib's ppo and appo play a PriorityAgents subclass; "
            "a flat loop must take decision=), or drop this algorithm from the spec"
        )  # fmt: skip
    elif algorithm.settings is None and agent != DEFAULT_AGENT and algorithm.parse not in PRIORITY_PARSERS:
        # the baselines' sections keep their agent key (the priority agents' sections have none)
        data = {"agent": agent, **data}
    return spec, algorithm, data


def _plays_another_layer(spec: AgentSpec, algorithm: Algorithm) -> AgentSpec | None:
    """The agent whose decision layer ``algorithm``'s loop builds where ``spec``'s differs and the loop takes no
    ``decision=`` to play the spec's own (a spec reusing a built-in loop it does not fit); None where it fits."""
    import inspect

    owners = [s for s in AGENTS.values() if s.name != spec.name and any(a.trainer == algorithm.trainer
                                                                        for a in s.algorithms)]  # fmt: skip
    if not owners or any(o.decision == spec.decision for o in owners):
        return None
    if "decision" in inspect.signature(reference(spec, "trainer", algorithm)).parameters:
        return None
    return owners[0]


def check_settings(
    algorithm: Algorithm, data: dict[str, Any], chk: ConfigChecker, iterations: int | None = None
) -> Any:
    """The algorithm's settings from the rest of a config (``iterations``: the count to override), checked."""
    least = 0 if algorithm.name == "dagger" else 1  # DAgger's count is of the rounds after the teacher's own
    if iterations is not None and iterations < least:
        also = "" if least == 0 else " (0, the teacher's round alone, is for algo dagger)"
        raise ValueError(f"--iterations must be >= {least}, got {iterations}{also}")
    if algorithm.settings is None:
        cfg = resolve(str(algorithm.parse))(data, chk.source, chk.lines, chk=chk)
        if iterations is not None and isinstance(cfg, dict):  # ppo's; the baselines' trainers take the count
            section, _, key = algorithm.iterations.partition(".")
            cfg[section][key] = iterations
        if isinstance(cfg, dict) and isinstance(cfg.get("env"), dict):
            _check_traces(cfg["env"], ("env",), chk)
        return cfg
    cls = resolve(algorithm.settings)
    if iterations is not None:
        data = {**data, algorithm.iterations: iterations}
    try:
        cfg = chk.section(cls, data, ())
    except TrainConfigError:
        raise
    except (TypeError, ValueError) as err:
        key, _, rest = str(err).partition(":")  # the dataclasses' own checks start with the key they refuse
        if key in {f.name for f in dataclasses.fields(cls)}:
            raise chk.fail((key,), rest.strip()) from None
        raise chk.fail((), str(err)) from None
    _check_traces(dataclasses.asdict(cfg), (), chk)
    return cfg


def _check_traces(settings: Mapping[str, Any], at: tuple[str, ...], chk: ConfigChecker) -> None:
    """A workload or trace spec whose kind, options or file is wrong, named by its key and line before anything
    starts (a missing trace otherwise surfaced minutes later, inside the first simulation)."""
    from cluster_sim.workload_spec import WorkloadSpecError, check_workload_spec

    for key in ("trace", "workload"):
        if isinstance(settings.get(key), str) and settings[key]:
            try:
                check_workload_spec(settings[key])
            except WorkloadSpecError as err:
                raise chk.fail((*at, key), str(err)) from None


def load_recipe_config(
    path: str | Path, iterations: int | None = None, sets: Sequence[str] = ()
) -> tuple[AgentSpec, Algorithm, Any]:
    """The agent, algorithm and checked settings of a training config file with the command line's ``--set
    KEY=VALUE`` applied, without training: what ``marlsched train`` checks before it starts."""
    data, lines = read_yaml_config(path, "training config", TrainConfigError)
    data, given = set_keys(data, sets, str(path))
    chk = ConfigChecker(str(path), lines, given)
    spec, algorithm, rest = recipe_of(data, chk)
    return spec, algorithm, check_settings(algorithm, rest, chk, iterations)


def train(req: TrainRequest) -> dict[str, Any]:
    """Train what ``req.config`` names into ``req.out`` (the policy in ``OUT/policy``); the trainer's summary."""
    spec, algorithm, cfg = load_recipe_config(req.config, req.iterations, req.sets)
    if req.out.is_dir():  # a folder of one's own files is refused; a training's own is resumed or refused below
        foreign = sorted(entry.name for entry in req.out.iterdir() if not entry.name.startswith(".")
                         and entry.name not in TRAINING_WRITES)  # fmt: skip
    else:
        foreign = []
    if foreign and not any((req.out / name).exists() for name in TRAINING_WRITES):
        raise ValueError(
            f"--out {req.out} holds files that no training wrote ({', '.join(foreign[:5])}); choose an empty folder"
        )
    if (req.out / POLICY).exists() and not req.resume:
        raise ValueError(f"{req.out} already holds a trained policy; choose another --out")
    from marl.training.priority_train import CHECKPOINT_DIR  # what a killed RLlib training leaves to resume

    if req.resume and algorithm.name not in RESUMABLE:
        raise ValueError(
            f"--resume: agent {spec.name!r} with algo {algorithm.name!r} keeps no checkpoint to go on from "
            f"({' and '.join(RESUMABLE)} do); drop --resume to train it again"
        )
    if req.resume and (req.out / POLICY).exists() and not (req.out / CHECKPOINT_DIR).exists():
        raise ValueError(  # --resume would train it all again over the finished run
            f"{req.out} holds a finished training (its policy, no checkpoint): nothing to resume; choose another --out"
        )
    if not req.resume and (req.out / CHECKPOINT_DIR).is_dir():  # a fresh start would replace what it kept
        raise ValueError(
            f"{req.out} holds the checkpoint of an unfinished training ({CHECKPOINT_DIR}/): add --resume to go on "
            "from it, or choose another --out to train from the start"
        )
    if req.resume and not (req.out / CHECKPOINT_DIR).is_dir():
        raise ValueError(
            f"--resume: {req.out} holds no checkpoint ({CHECKPOINT_DIR}/, kept by a stopped PPO or APPO training): "
            "nothing to resume; drop --resume to start the training"
        )
    with folder_lock(req.out, "train"):
        return run_recipe(spec, algorithm, cfg, req)


def run_recipe(spec: AgentSpec, algorithm: Algorithm, cfg: Any, req: TrainRequest) -> dict[str, Any]:
    """Train checked settings (:func:`check_settings`) with the algorithm's loop into ``req.out``; the folder records
    ``spec``'s name as its agent and a config naming the agent and algorithm (:func:`training_recipe`)."""
    code_version()  # the commit recorded in the policy's provenance is the one that starts training
    with training_recipe(spec.name, algorithm.name):
        return _run_loop(spec, algorithm, cfg, req)


def _run_loop(spec: AgentSpec, algorithm: Algorithm, cfg: Any, req: TrainRequest) -> dict[str, Any]:
    rllib = algorithm.name in RESUMABLE
    if not rllib and req.address:  # only RLlib's algorithms run on a Ray cluster
        raise ValueError(
            f"--address: agent {spec.name!r} with algo {algorithm.name!r} is not trained on a Ray cluster "
            f"({' and '.join(RESUMABLE)} are)"
        )
    trainer = resolve(algorithm.trainer)
    if rllib:
        cfg["ray"]["address"] = req.address or cfg["ray"].get("address") or os.environ.get("RAY_ADDRESS") or None
        if req.evaluate is False:  # --no-eval: a quick try stops at training (the last iterate, the config's margin)
            cfg["select"] = cfg["tune"] = None
        return trainer(cfg, req.out, log=req.log, command=req.command, resume=req.resume)
    if algorithm.settings is not None:  # the flat loops write the policy folder they are given
        # a loop shared by agents that differ in their decision layer plays each one's (the spec's class)
        decision = {"decision": resolve(spec.decision)} if "decision" in inspect.signature(trainer).parameters else {}
        return trainer(cfg, req.out / POLICY, command=req.command, log=req.log, **decision)
    return trainer(cfg, req.out, iterations=req.iterations, evaluate=req.evaluate, command=req.command, log=req.log)


def recipes_table() -> str:
    """The agents and their algorithms, for ``marlsched train --help``."""
    import textwrap

    rows = [(f"{s.name} / {a.name}", a) for s in AGENTS.values() for a in s.algorithms]
    width = max(len(label) for label, _ in rows)
    indent = " " * (width + 4)
    return "\n".join(
        textwrap.fill(f"  {label:<{width}}  {a.about} (e.g. {a.example})", 100, subsequent_indent=indent,
                      break_on_hyphens=False, break_long_words=False)
        for label, a in rows
    )  # fmt: skip


__all__ = [
    "POLICY", "TrainRequest", "check_settings", "load_recipe_config", "recipe_of", "recipes_table", "run_recipe",
    "train",
]  # fmt: skip
