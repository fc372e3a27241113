"""Gavel's job types as numeric descriptors.

Gavel (Narayanan et al., OSDI'20, Table 2) measured seven model families at several batch sizes. A job
type string such as ``"ResNet-50 (batch size 64)"`` names a family and a per-GPU batch size; A3C and
CycleGAN have one batch size each and no suffix. The facts below are the published figures for the model
each family trains (parameters, and training GFLOPs per sample taken as 3x the published forward cost),
the same figures the workload model zoo uses, so that a descriptor built by the simulator for
``resnet50-imagenet`` at batch 64 equals the one built here for Gavel's ``ResNet-50 (batch size 64)``.
None of Gavel's jobs used mixed precision.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from interference.base import JobDescriptor
from interference.gpu_specs import gpu_spec


@dataclass(frozen=True)
class GavelFamily:
    name: str  # Gavel's prefix, e.g. "ResNet-18"
    params_m: float  # parameters, millions
    gflops: float  # training GFLOPs per sample
    fixed_batch: int | None  # the batch size of types whose name carries none
    task: str


# how held-out evaluation splits Gavel's pairs: at random, or holding out one model family at a time
SPLITS = ("random", "leave-model-out")

GAVEL_FAMILIES: dict[str, GavelFamily] = {
    f.name: f
    for f in (
        # ResNet-18 on CIFAR-10 (32x32): 11.2M params, 0.56 GFLOPs forward.
        GavelFamily("ResNet-18", 11.2, 1.67, None, "image classification, CIFAR-10"),
        # ResNet-50 on ImageNet (224x224): 25.6M params, 4.1 GFLOPs forward.
        GavelFamily("ResNet-50", 25.6, 12.3, None, "image classification, ImageNet"),
        # Transformer (base) on Multi30k de-en, ~30 tokens per sentence.
        GavelFamily("Transformer", 48.0, 8.6, None, "translation, Multi30k"),
        # 2-layer LSTM word language model on WikiText-2 (650 hidden, 35-token sequences).
        GavelFamily("LM", 28.0, 1.5, None, "language modelling, WikiText-2"),
        # Autoencoder recommender on MovieLens-20M.
        GavelFamily("Recommendation", 10.0, 0.06, None, "recommendation, ML-20M"),
        # A3C on Atari Pong with 4 workers: small conv net.
        GavelFamily("A3C", 1.0, 0.1, 4, "deep RL, Pong"),
        # CycleGAN at 256x256 (two generators, two discriminators), batch size 1.
        GavelFamily("CycleGAN", 28.3, 171.0, 1, "image-to-image translation, monet2photo"),
    )
}

_JOB_TYPE = re.compile(r"^\s*(?P<family>[^()]+?)\s*(?:\(batch size (?P<batch>\d+)\))?\s*$")


def parse_gavel_job_type(job_type: str) -> tuple[GavelFamily, int]:
    """Family and per-GPU batch size of a Gavel job type string."""
    m = _JOB_TYPE.match(job_type)
    family = GAVEL_FAMILIES.get(m.group("family")) if m else None
    if m is None or family is None:
        raise ValueError(
            f"unknown Gavel job type {job_type!r}; expected '<family> (batch size N)' or a bare family, "
            f"with family one of {', '.join(GAVEL_FAMILIES)}"
        )
    if m.group("batch") is not None:
        return family, int(m.group("batch"))
    if family.fixed_batch is None:
        raise ValueError(f"Gavel job type {job_type!r} needs a '(batch size N)' suffix")
    return family, family.fixed_batch


def gavel_job_type(family: str, batch: int) -> str:
    """The Gavel job type string for ``family`` at ``batch`` (the name that keys the measured tables)."""
    fam = GAVEL_FAMILIES.get(family)
    if fam is None:
        raise KeyError(f"unknown Gavel family {family!r}; known: {', '.join(GAVEL_FAMILIES)}")
    return fam.name if fam.fixed_batch is not None else f"{fam.name} (batch size {int(batch)})"


def gavel_family_of(job_type: str) -> str:
    """Family name of a Gavel job type; the unit that leave-one-family-out splits hold out."""
    return parse_gavel_job_type(job_type)[0].name


def gavel_job_type_of(job: JobDescriptor) -> str | None:
    """The Gavel job type a descriptor stands for, or None.

    Matched by name when the name is a Gavel job type, otherwise by facts (parameters, GFLOPs per sample,
    batch size), so the simulator's descriptors (named after the model zoo) find Gavel's measurements.
    """
    try:
        family, batch = parse_gavel_job_type(job.name)
        if batch == job.batch:
            return gavel_job_type(family.name, batch)
    except ValueError:
        pass
    for fam in GAVEL_FAMILIES.values():
        if math.isclose(fam.params_m, job.params_m, rel_tol=1e-6) and math.isclose(
            fam.gflops, job.gflops, rel_tol=1e-6
        ):
            if fam.fixed_batch is not None and job.batch != fam.fixed_batch:
                return None
            return gavel_job_type(fam.name, job.batch)
    return None


def gavel_descriptor(job_type: str, gpu_type: str, solo_steps_per_s: float) -> JobDescriptor:
    """Descriptor of a Gavel job type on ``gpu_type``; Gavel's tables give throughput in steps/s."""
    family, batch = parse_gavel_job_type(job_type)
    spec = gpu_spec(gpu_type)
    return JobDescriptor(
        params_m=family.params_m,
        gflops=family.gflops,
        batch=batch,
        solo_sps=float(solo_steps_per_s) * batch,
        amp=False,
        gpu_type=spec.name,
        name=gavel_job_type(family.name, batch),
    )
