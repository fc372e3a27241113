"""Heuristic schedulers: an ordering of the waiting jobs combined with a placement strategy.

``get_policy(name, seed)`` accepts the named defaults in :data:`POLICIES` and any explicit combination
``ORDERING+PLACEMENT`` (for example ``fifo+spread`` or ``sjf+best-fit``) of :data:`ORDERINGS` and
:data:`cluster_sim.placement.PLACEMENTS`.

Named defaults:

- ``fifo``: strict arrival order, consolidated placement.
- ``sjf``, ``srtf``: oracle shortest job / shortest remaining time first (SRTF preempts), consolidated.
- ``tiresias``: discretised 2D-LAS with preemption, consolidated.
- ``tiresias-pollux``: the settings of Pollux's Tiresias baseline: two queues split at 16 GPU-hours, the
  most-free-GPUs placement, decisions every 60 s, and each queue kept in the order jobs entered it
  (arrival, then demotion time), running or not.
- ``gandiva``: arrival order with backfilling and Gandiva's same-model server affinity.
- ``drf``: dominant resource fairness across tenants, consolidated.
- ``optimus-oracle``: marginal gain per GPU-second with the oracle remaining time and the performance
  model, consolidated, rigid (jobs keep their GPU count).
- ``closest-gpus``: strict arrival order with TopDRL's closest-GPUs placement; ``closest-gpus-backfill``: the same,
  any waiting job that fits may start.
- ``qssf``, ``qssf-np``: expected remaining time from the history of finished jobs of the same tenant
  and GPU count (no oracle), preemptive like SRTF or not.
- ``pollux``: Pollux's goodput-based joint allocation of GPUs and batch sizes every 60 s (elastic: jobs of
  measured applications resize and change batch size; see :mod:`cluster_sim.policies.pollux`).
- ``optimus``: Optimus as an elastic policy: GPUs to the largest cut in estimated remaining time, the
  remaining work fitted from finished jobs (``oracle=True``: the true one, Pollux's Optimus+Oracle);
  :mod:`cluster_sim.policies.optimus_elastic`.
- ``afs``: AFS-style elastic share: each further GPU to the largest marginal throughput per GPU.
- ``ones``: ONES' online evolutionary search over batch sizes, GPUs following the batch.
- ``sia``: Sia's heterogeneity-aware choice of GPU type, GPU count and batch size per job by an integer
  program every 60 s (:mod:`cluster_sim.policies.sia`); ``sia-oracle`` weighs each job by its true remaining
  time (a privileged reference).
- ``gavel``: Gavel's heterogeneity-aware max-sum-throughput time shares per GPU type (an LP), realised in
  360 s rounds; jobs keep the GPU count and batch they asked for (:mod:`cluster_sim.policies.gavel`).
  ``gavel-oracle`` weighs each job's throughput by its true remaining work (the LP then maximises the
  rate of completions): an oracle reference of what durations add to Gavel's type matching.
  ``rounds-gavel``: Gavel's priorities in the scored rounds, which also fill the GPUs the LP leaves idle;
  ``gavel-las``: the same less ``las`` x log(1 + attained GPU-hours) (default 2), leaning towards the jobs
  that have run least, which Gavel's LP cannot see (``normalise=true``: the LP over each job's speeds
  relative to its fastest type; :class:`cluster_sim.policies.gavel.GavelPriorityScore`);
  ``gavel-las-oracle`` weighs each job in its LP by 1 / its true remaining time (a reference of what
  durations add to it).
  ``lookahead-oracle``: ``gavel-las`` whose settings are chosen every hour by playing each ahead on a clone of
  the simulator (privileged: future arrivals and true durations; :mod:`cluster_sim.policies.lookahead`), the
  room left above ``gavel-las`` in its rounds; ``lookahead-las-oracle`` chooses only among the LAS weights
  (2, 0, 4), settings a deployed scheduler could switch among: the ceiling of any controller of that weight.
- ``rounds-las``: rigid jobs re-assigned every 360 s, least attained service first, each on its fastest
  GPU type with room; ``rounds-blind``: the same order, type-blind (the first type with room, whatever
  the job's speed there: the measure of what GPU-type matching is worth); ``rounds-oracle``: the same
  frame ranking (job, type) by the time to finish there from the true remaining work (an oracle
  reference and teacher); ``rounds-oracle-area`` ranks by the true remaining GPU-time instead (work x
  GPUs), leaning to the type where a job is comparatively fastest;
  :mod:`cluster_sim.policies.rigid_rounds`.
- ``random``: random order, random GPUs.
- ``pack-none``, ``pack-blind``: arrival order with backfilling, without GPU sharing or with 1-GPU jobs
  packed onto GPUs blindly (needs ``--gpu-sharing``); the predictor-guided mode is
  ``cluster_sim.policies.gpu_packing:GpuPacking,mode=aware,predictor=MODEL`` (see that module);
  ``pack-none-qssf``, ``pack-blind-qssf``: the same, the queue ordered by QSSF's history estimate
  (option ``order=qssf``), as Lucid orders by estimated duration; ``pack-blind-tiresias``: Tiresias decides
  who runs and who is preempted, and the 1-GPU jobs it leaves waiting are packed (option ``under=``).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable

from cluster_sim.placement import PLACEMENTS, placement_names
from cluster_sim.policies.afs import AFS
from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.policies.drf import DRF
from cluster_sim.policies.fifo import FIFO
from cluster_sim.policies.gavel import LAS_WEIGHT, Gavel, GavelPriorityScore
from cluster_sim.policies.gpu_packing import GpuPacking
from cluster_sim.policies.lookahead import LAS_VARIANTS, LookaheadRounds
from cluster_sim.policies.ones import ONES
from cluster_sim.policies.optimus import Optimus
from cluster_sim.policies.optimus_elastic import ElasticOptimus
from cluster_sim.policies.pollux import Pollux
from cluster_sim.policies.qssf import QSSF
from cluster_sim.policies.randomized import RandomOrder
from cluster_sim.policies.rigid_rounds import ScoredRounds
from cluster_sim.policies.sia import Sia
from cluster_sim.policies.sjf import SJF
from cluster_sim.policies.srtf import SRTF
from cluster_sim.policies.tiresias import Tiresias
from cluster_sim.policy_folders import folder_prefixes, load_folder_policy, split_folder_name
from cluster_sim.protocol import FunctionScheduler
from cluster_sim.typed_placement import GPU_TYPE_ORDERS
from topology.spec import did_you_mean

ORDERINGS: dict[str, type[PolicyScheduler]] = {
    cls.ordering: cls for cls in (FIFO, SJF, SRTF, Tiresias, DRF, Optimus, QSSF, RandomOrder)
}


def make_scheduler(ordering: str, placement: str, *, seed: int = 0, **opts) -> PolicyScheduler:
    """Scheduler with the given ordering and placement; ``opts`` go to the ordering's constructor
    (``backfill``, ``name``, SRTF's ``margin``, Tiresias' ``thresholds`` ...)."""
    if ordering not in ORDERINGS:
        raise ValueError(f"unknown ordering {ordering!r}; choose one of: {', '.join(sorted(ORDERINGS))}")
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of: {', '.join(placement_names())}")
    return ORDERINGS[ordering](placement, seed=seed, **opts)


def _named(ordering: str, placement: str, name: str, **opts) -> Callable[[int], PolicyScheduler]:
    def build(seed: int = 0, **options) -> PolicyScheduler:
        return make_scheduler(ordering, placement, seed=seed, **{"name": name, **opts, **options})

    build.__doc__ = f"{name}: ordering {ordering!r}, placement {placement!r}"
    return build


def _gavel_rounds(name: str, las: float, normalise: bool, seed: int, options: dict) -> ScoredRounds:
    """Gavel's priorities (optionally LAS-leaning) in the scored rounds; options ``las``, ``normalise``,
    ``weight`` go to the score, the rest to :class:`ScoredRounds`."""
    score = GavelPriorityScore(
        float(options.pop("las", las)),
        interval=float(options.get("interval", 360.0)),
        normalise=bool(options.pop("normalise", normalise)),
        weight=float(options.pop("weight", 0.0)),
        oracle=float(options.pop("oracle", 0.0)),
    )
    return ScoredRounds(score, seed=seed, **{"name": name, "stay": 0.0, **options})


POLICIES: dict[str, Callable[[int], PolicyScheduler]] = {
    "fifo": _named("fifo", "consolidate", "fifo"),
    "sjf": _named("sjf", "consolidate", "sjf"),
    "srtf": _named("srtf", "consolidate", "srtf"),
    "tiresias": _named("tiresias", "consolidate", "tiresias"),
    # Pollux's Tiresias baseline: two queues, demotion at 16 GPU-hours, most-free-GPUs placement, decisions
    # every 60 s and queues in order of entry, as in Pollux's simulator
    "tiresias-pollux": _named(
        "tiresias", "most-free", "tiresias-pollux", thresholds=(16 * 3600.0,), interval=60.0, queue_order="entry"
    ),
    "gandiva": _named("fifo", "gandiva", "gandiva", backfill=True),
    "drf": _named("drf", "consolidate", "drf"),
    "optimus-oracle": _named("optimus-oracle", "consolidate", "optimus-oracle"),
    "closest-gpus": _named("fifo", "closest-gpus", "closest-gpus"),
    # the same with backfilling: any waiting job that fits may start (work-conserving, as TopDRL's picker is)
    "closest-gpus-backfill": _named("fifo", "closest-gpus", "closest-gpus-backfill", backfill=True),
    "qssf": _named("qssf", "consolidate", "qssf"),
    "qssf-np": _named("qssf", "consolidate", "qssf-np", preempt=False),
    "random": _named("random", "random", "random"),
    "pollux": lambda seed=0, **options: Pollux(seed=seed, **options),
    "optimus": lambda seed=0, **options: ElasticOptimus(seed=seed, **options),
    "afs": lambda seed=0, **options: AFS(seed=seed, **options),
    "ones": lambda seed=0, **options: ONES(seed=seed, **options),
    "sia": lambda seed=0, **options: Sia(seed=seed, **options),
    "sia-oracle": lambda seed=0, **options: Sia(seed=seed, **{"oracle": 0.5, "name": "sia-oracle", **options}),
    "gavel": lambda seed=0, **options: Gavel(seed=seed, **options),
    "gavel-oracle": lambda seed=0, **options: Gavel(
        objective="oracle-completions", seed=seed, **{"name": "gavel-oracle", **options}
    ),
    "rounds-gavel": lambda seed=0, **options: _gavel_rounds("rounds-gavel", 0.0, False, seed, options),
    "gavel-las": lambda seed=0, **options: _gavel_rounds("gavel-las", LAS_WEIGHT, False, seed, options),
    "gavel-las-oracle": lambda seed=0, **options: _gavel_rounds(
        "gavel-las-oracle", LAS_WEIGHT, False, seed, {"oracle": 1.0, **options}
    ),
    "lookahead-oracle": lambda seed=0, **options: LookaheadRounds(seed=seed, **options),
    "lookahead-las-oracle": lambda seed=0, **options: LookaheadRounds(
        seed=seed, **{"variants": LAS_VARIANTS, "name": "lookahead-las-oracle", **options}
    ),
    "rounds-las": lambda seed=0, **options: ScoredRounds("las", seed=seed, **options),
    "rounds-blind": lambda seed=0, **options: ScoredRounds("blind", seed=seed, **options),
    "rounds-oracle": lambda seed=0, **options: ScoredRounds("oracle", seed=seed, **options),
    "rounds-oracle-area": lambda seed=0, **options: ScoredRounds("oracle-area", seed=seed, **options),
    "pack-none": lambda seed=0, **options: GpuPacking(mode="none", seed=seed, **options),
    "pack-blind": lambda seed=0, **options: GpuPacking(mode="blind", seed=seed, **options),
    "pack-none-qssf": lambda seed=0, **options: GpuPacking(mode="none", order="qssf", seed=seed, **options),
    "pack-blind-qssf": lambda seed=0, **options: GpuPacking(mode="blind", order="qssf", seed=seed, **options),
    "pack-blind-tiresias": lambda seed=0, **options: GpuPacking(mode="blind", under="tiresias", seed=seed, **options),
}


def register_policy(name: str, factory: Callable[[int], PolicyScheduler], *, replace: bool = False) -> None:
    """Add a named scheduler: ``factory(seed)`` returns a fresh one (anything speaking the Scheduler
    protocol). Call it from a plugin module (``marlsched --plugin FILE``) to use the name everywhere a
    built-in one goes; ``replace=True`` overrides an existing name."""
    if not name or "," in name or ":" in name:
        raise ValueError(f"policy name {name!r} must be non-empty and contain no ',' or ':'")
    if name in POLICIES and not replace:
        raise ValueError(f"policy {name!r} is already registered; pass replace=True to override it")
    POLICIES[name] = factory


def policy_names() -> list[str]:
    """The named policies, each a name :func:`get_policy` builds (``ORDERING+PLACEMENT`` combinations come on top:
    :func:`combination_syntax`)."""
    return list(POLICIES)


def combination_syntax() -> str:
    """The ``ORDERING+PLACEMENT`` pattern with its choices, for help texts."""
    return f"ORDERING+PLACEMENT ({'|'.join(ORDERINGS)} + {'|'.join(placement_names())})"


def constructor_options(cls: type) -> list[str]:
    """The keyword options a scheduler class takes, through the ``__init__`` methods that pass ``**kw`` on."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return sorted(names - {"seed"})


def reads_true_durations(name: str) -> bool:
    """Whether the policy ``name`` reads jobs' true durations (``sjf``, ``srtf`` and every ``*-oracle``, with
    any ``@type`` or ``+placement``): a reference of what exact durations buy inside its own rule, which no
    deployed scheduler has, and so never a baseline."""
    base = name.split("@")[0].split("+")[0]
    return base in ("sjf", "srtf") or "oracle" in base.split("-")


def get_policy(name: str, /, seed: int = 0, **options) -> PolicyScheduler:
    """A fresh scheduler for a named policy or an ``ORDERING+PLACEMENT`` combination. ``options`` go to
    its constructor (``thresholds``, ``interval``, ``name`` ...; a named policy's own settings are the
    defaults they override), as keywords or in the name as ``NAME,key=value,...`` (``qssf,name=mine``: values
    read as YAML, as ``--policy`` takes them); an option the scheduler does not take is a ``TypeError`` naming it.
    ``NAME@ORDER`` (``qssf@fastest``) is ``NAME`` with ``gpu_type=ORDER``: on a cluster of several GPU
    types, the order in which a heuristic tries the types for a job (:mod:`cluster_sim.typed_placement`).
    ``PREFIX:DIR`` (``marl:experiments/policies/philly-small``) is the trained policy saved in that folder
    (:mod:`cluster_sim.policy_folders`); ``FILE_OR_MODULE:Class`` a scheduler class of your own
    (:mod:`cluster_sim.scheduler_spec`)."""
    from cluster_sim.scheduler_spec import custom_spec_form, load_custom_scheduler

    if not isinstance(name, str):  # a scheduler object is run as it is: get_policy makes one from a name
        what = "class" if isinstance(name, type) else type(name).__name__
        raise TypeError(
            f"get_policy takes a scheduler's name, not a {what} ({name!r}); give your scheduler object to sim.run() "
            "as it is (an instance: MyScheduler(...)), or name its class as 'FILE_OR_MODULE:Class'"
        )
    head, *items = name.split(",")
    if items and not split_folder_name(head) and not custom_spec_form(name):  # those two read their own options
        from cluster_sim.plugins import spec_options

        if bad := [item for item in items if "=" not in item]:
            raise ValueError(
                f"scheduler {name!r}: one scheduler per name, and after it only key=value options, not {bad[0]!r} "
                "(for several schedulers, get each by its own name)"
            )
        given = spec_options(name, items)
        if twice := sorted(set(given) & set(options)):
            raise ValueError(
                f"scheduler {name!r}: option {twice[0]} given in the name and again beside it; give it once"
            )
        try:
            return get_policy(head, seed, **given, **options)
        except TypeError as err:  # an option the name carries: a mistake in a string, as --policy reports them
            raise ValueError(f"{err} (in {name!r})") from None
    base, at, order = name.partition("@")
    if at:
        if order not in GPU_TYPE_ORDERS:
            raise ValueError(f"scheduler {name!r}: GPU type order {order!r} is not one of {', '.join(GPU_TYPE_ORDERS)}")
        policy = get_policy(base, seed, **{"gpu_type": order, **options})
        if "name" not in options:
            policy.name = name
        return policy
    if name in POLICIES:
        if not options:
            return POLICIES[name](seed)
        try:
            return POLICIES[name](seed, **options)
        except TypeError as err:  # an option it does not take: named with those it does
            if "unexpected keyword argument" not in str(err):
                raise
            takes = constructor_options(type(POLICIES[name](seed)))
            bad = next((k for k in options if k not in takes), sorted(options)[0])
            hint = did_you_mean(bad, takes)
            raise TypeError(
                f"scheduler {name!r}: unknown option {bad!r}; {hint + ' ' if hint else ''}allowed: {', '.join(takes)}"
            ) from None
    if split_folder_name(name):
        return load_folder_policy(name, **options)
    if custom_spec_form(name):  # FILE_OR_MODULE:Class[,key=value...]: a scheduler of your own
        return load_custom_scheduler(name, seed, **options)
    ordering, plus, placement = name.partition("+")
    if plus and ordering in ORDERINGS and placement in PLACEMENTS:
        return make_scheduler(ordering, placement, seed=seed, **options)
    if plus and ordering in ORDERINGS:
        raise ValueError(
            f"scheduler {name!r}: unknown placement {placement!r}; placements: {', '.join(placement_names())} (a "
            "placement of your own: register it in a file given to --plugin FILE before the command)"
        )
    if ":" not in name and (name.endswith(".py") or "/" in name):
        raise ValueError(f"scheduler {name!r}: a scheduler of your own is named FILE:Class (e.g. mysched.py:Mine)")
    prefix, colon, rest = name.partition(":")
    if colon and (near := difflib.get_close_matches(prefix, folder_prefixes(), n=1)):
        raise ValueError(
            f"scheduler {name!r}: {prefix!r} is not a policy-folder prefix; did you mean {near[0]}:{rest}? "
            f"(prefixes: {', '.join(folder_prefixes())})"
        )
    close = difflib.get_close_matches(name, list(POLICIES), n=1)
    raise ValueError(
        f"unknown scheduler {name!r}; {f'did you mean {close[0]!r}? ' if close else ''}choose one of: "
        f"{', '.join(POLICIES)}, or ORDERING+PLACEMENT with ORDERING in {{{', '.join(ORDERINGS)}}} and PLACEMENT "
        f"in {{{', '.join(placement_names())}}}, each optionally NAME@ORDER with ORDER in "
        f"{{{', '.join(GPU_TYPE_ORDERS)}}} (the order of GPU types on a mixed cluster), or PREFIX:DIR for a trained "
        f"policy's folder (prefixes: "
        f"{', '.join(folder_prefixes()) or 'none; pip install marlsched'}), or FILE_OR_MODULE:Class for your own"
    )


__all__ = [
    "AFS",
    "DRF",
    "FIFO",
    "ONES",
    "ORDERINGS",
    "POLICIES",
    "QSSF",
    "SJF",
    "SRTF",
    "ElasticOptimus",
    "FunctionScheduler",
    "Gavel",
    "GpuPacking",
    "Optimus",
    "PolicyScheduler",
    "Pollux",
    "RandomOrder",
    "ScoredRounds",
    "Sia",
    "Tiresias",
    "combination_syntax",
    "constructor_options",
    "get_policy",
    "make_scheduler",
    "policy_names",
    "register_policy",
]  # fmt: skip
