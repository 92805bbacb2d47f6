"""Nominal figures from the vendors' public spec sheets, keyed by the name NVML reports.

Dense figures (no structured sparsity). "Per direction" for links: NVLink's headline
figure counts both directions (H100 SXM 900 GB/s = 450 each way). PCIe: Gen4 x16 moves
31.5 GB/s each way, Gen5 x16 63 GB/s. A host with PCIe cards only has PCIe between its GPUs,
so its peer-to-peer and all-reduce nominal is its PCIe link.

These seed a ``NominalSpec`` the first time a GPU model is benchmarked; staff edit them
in the back-office afterwards (a different board power limit, a PCIe variant).
"""

from __future__ import annotations

GPU_SPECS: dict[str, dict] = {
    "NVIDIA H100 80GB HBM3": {
        "fp32_tflops": 67.0,
        "tf32_tflops": 494.7,
        "fp16_tflops": 989.4,
        "bf16_tflops": 989.4,
        "memory_bandwidth_gbs": 3350.0,
        "host_link_gbs": 63.0,
        "p2p_gbs": 450.0,
        "allreduce_busbw_gbs": 450.0,
        "source": "NVIDIA H100 Tensor Core GPU datasheet (SXM5): dense figures; NVLink 4 "
        "900 GB/s both ways; PCIe Gen5 x16",
    },
    # The data sheet's peaks are at the 1.98 GHz boost clock; a second of GEMMs holds a
    # healthy H200 at its 700 W cap near 1.5 GHz, where it sustains 65-76 % of them (bench/
    # README, "On a real NVIDIA H200"). That is what ACCEPTANCE_THRESHOLD_GEMM (60 %) is
    # for: nominal stays the data sheet, never what one card measured.
    "NVIDIA H200": {
        "fp32_tflops": 67.0,
        "tf32_tflops": 494.7,
        "fp16_tflops": 989.4,
        "bf16_tflops": 989.4,
        "memory_bandwidth_gbs": 4800.0,
        "host_link_gbs": 63.0,
        "p2p_gbs": 450.0,
        "allreduce_busbw_gbs": 450.0,
        "source": "NVIDIA H200 Tensor Core GPU datasheet (SXM): dense figures (TF32 989, "
        "FP16/BF16 1,979 TFLOPS with sparsity, halved); HBM3e 4.8 TB/s; NVLink 4 900 GB/s "
        "both ways; PCIe Gen5 x16",
    },
    "NVIDIA A100-SXM4-80GB": {
        "fp32_tflops": 19.5,
        "tf32_tflops": 156.0,
        "fp16_tflops": 312.0,
        "bf16_tflops": 312.0,
        "memory_bandwidth_gbs": 2039.0,
        "host_link_gbs": 31.5,
        "p2p_gbs": 300.0,
        "allreduce_busbw_gbs": 300.0,
        "source": "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): dense figures; NVLink 3 "
        "600 GB/s both ways; PCIe Gen4 x16",
    },
    "NVIDIA A10G": {
        "fp32_tflops": 31.2,
        "tf32_tflops": 62.5,
        "fp16_tflops": 125.0,
        "bf16_tflops": 125.0,
        "memory_bandwidth_gbs": 600.0,
        "host_link_gbs": 31.5,
        "p2p_gbs": 31.5,
        "allreduce_busbw_gbs": 31.5,
        "source": "NVIDIA A10 Tensor Core GPU datasheet (AWS's A10G is its cloud variant): "
        "dense figures; PCIe Gen4 x16, no NVLink",
    },
    "NVIDIA A10": {
        "fp32_tflops": 31.2,
        "tf32_tflops": 62.5,
        "fp16_tflops": 125.0,
        "bf16_tflops": 125.0,
        "memory_bandwidth_gbs": 600.0,
        "host_link_gbs": 31.5,
        "p2p_gbs": 31.5,
        "allreduce_busbw_gbs": 31.5,
        "source": "NVIDIA A10 Tensor Core GPU datasheet: dense figures (half the sparse "
        "ones); 24 GB GDDR6 600 GB/s; PCIe Gen4 x16, no NVLink",
    },
    "NVIDIA L4": {
        "fp32_tflops": 30.3,
        "tf32_tflops": 60.0,
        "fp16_tflops": 121.0,
        "bf16_tflops": 121.0,
        "memory_bandwidth_gbs": 300.0,
        "host_link_gbs": 31.5,
        "p2p_gbs": 31.5,
        "allreduce_busbw_gbs": 31.5,
        "source": "NVIDIA L4 Tensor Core GPU datasheet: dense figures (half the sparse ones); "
        "PCIe Gen4 x16, no NVLink",
    },
}

# Hosts without a GPU (development and CI machines) run the same benchmark on the CPU.
# Peak FP32 of one x86-64 core with two 256-bit FMA pipes (AVX2; AVX-512 cores at least
# as much) at an all-core 2.5 GHz: 2 pipes × 8 lanes × 2 FLOP × 2.5 GHz = 80 GFLOPS.
# Memory: one DDR4-3200 channel, 25.6 GB/s (a small VM's share of a server). Half
# precision on CPUs without AMX has no spec-sheet figure: not compared.
CPU_SPEC = {
    "per_cpu_core": True,
    "fp32_tflops": 0.08,
    "tf32_tflops": None,
    "fp16_tflops": None,
    "bf16_tflops": None,
    "memory_bandwidth_gbs": 25.6,
    "host_link_gbs": None,
    "p2p_gbs": None,
    "allreduce_busbw_gbs": None,
    "source": "x86-64 core, 2×256-bit FMA at 2.5 GHz = 80 GFLOPS FP32 per core; "
    "one DDR4-3200 channel = 25.6 GB/s",
}
