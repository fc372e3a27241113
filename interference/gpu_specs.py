"""Public datasheet figures of the GPU generations that interference models reason about.

A predictor that sees only "V100" cannot say anything about an A100; one that sees peak compute, memory
bandwidth and memory size can. Figures are NVIDIA's datasheet numbers for the variants the clusters in
question use: K80 is one GK210 die (Gavel schedules each die as a GPU), P100 and V100 are the 16 GB
parts Gavel measured on, A100 and H100 are the SXM parts. Names are upper case (lookups are
case-insensitive), so ``RTX2080Ti`` of a cluster spec finds ``RTX2080TI``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GpuSpec:
    name: str
    fp32_tflops: float  # peak dense FP32
    mem_bw_gbs: float  # device memory bandwidth, GB/s
    mem_gb: float  # device memory, GB
    pcie_gbs: float  # host link bandwidth per direction, GB/s (PCIe 3.0 x16 ≈ 15.8, 4.0 ≈ 31.5, 5.0 ≈ 63)


GPU_SPECS: dict[str, GpuSpec] = {
    s.name: s
    for s in (
        GpuSpec("K80", 4.37, 240.0, 12.0, 15.8),
        GpuSpec("P100", 9.3, 732.0, 16.0, 15.8),
        GpuSpec("T4", 8.1, 320.0, 16.0, 15.8),
        GpuSpec("V100", 15.7, 900.0, 16.0, 15.8),
        GpuSpec("RTX2080TI", 13.45, 616.0, 11.0, 15.8),  # GeForce RTX 2080 Ti (Sia's cluster)
        GpuSpec("RTX6000", 16.3, 672.0, 24.0, 15.8),  # Quadro RTX 6000 (Sia's profiles)
        GpuSpec("A10", 31.2, 600.0, 24.0, 31.5),
        GpuSpec("A100", 19.5, 2039.0, 80.0, 31.5),
        GpuSpec("H100", 67.0, 3350.0, 80.0, 63.0),
        GpuSpec("H200", 67.0, 4800.0, 141.0, 63.0),
    )
}


def gpu_spec(gpu_type: str) -> GpuSpec:
    """Spec of ``gpu_type`` (case-insensitive); a clear error lists the known generations."""
    spec = GPU_SPECS.get(gpu_type.upper())
    if spec is None:
        raise KeyError(
            f"unknown GPU type {gpu_type!r}; known types: {', '.join(GPU_SPECS)} "
            "(describe it in a YAML file of datasheet figures and pass --gpu-specs FILE)"
        )
    return spec


SPEC_FIELDS = {
    "fp32_tflops": "peak dense FP32 TFLOP/s",
    "mem_bw_gbs": "memory bandwidth, GB/s",
    "mem_gb": "device memory, GB",
    "pcie_gbs": "host link bandwidth per direction, GB/s",
}


def load_gpu_specs(path: str | Path) -> list[GpuSpec]:
    """Add (or replace) GPU types from a YAML file of datasheet figures, so any GPU can be described::

        L40S: {fp32_tflops: 91.6, mem_bw_gbs: 864, mem_gb: 48, pcie_gbs: 31.5}

    Every field is required and positive; errors name the file, the GPU and the field.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"GPU specs file {path} not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not valid YAML ({e})") from None
    example = "L40S: {fp32_tflops: 91.6, mem_bw_gbs: 864, mem_gb: 48, pcie_gbs: 31.5}"
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a mapping of GPU name to datasheet figures, e.g. {example}")
    specs = []
    for name, fields in data.items():
        where = f"{path}: {name}"
        if not isinstance(fields, dict):
            raise ValueError(f"{where}: expected a mapping with {', '.join(SPEC_FIELDS)}, e.g. {example}")
        unknown = sorted(set(fields) - set(SPEC_FIELDS))
        if unknown:
            raise ValueError(
                f"{where}: unknown field(s) {', '.join(map(str, unknown))}; fields: {', '.join(SPEC_FIELDS)}"
            )
        values = {}
        for f, meaning in SPEC_FIELDS.items():
            v = fields.get(f)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ValueError(f"{where}.{f}: is {v!r}; expected a positive number ({meaning})")
            values[f] = float(v)
        specs.append(GpuSpec(str(name).upper(), **values))
    for s in specs:
        GPU_SPECS[s.name] = s
    return specs
