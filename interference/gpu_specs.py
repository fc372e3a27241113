"""Public datasheet figures of the GPU generations that interference models reason about.

A predictor that sees only "V100" cannot say anything about an A100; one that sees peak compute, memory
bandwidth and memory size can. Figures are NVIDIA's datasheet numbers for the variants the clusters in
question use: K80 is one GK210 die (Gavel schedules each die as a GPU), P100 and V100 are the 16 GB
parts Gavel measured on, A100 and H100 are the SXM parts.
"""

from __future__ import annotations

from dataclasses import dataclass


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
            "(add its datasheet figures to interference/gpu_specs.py)"
        )
    return spec
