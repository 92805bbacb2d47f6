"""Measured against the data sheet: what a healthy H200 measured (bench/README, "On a real
NVIDIA H200", 2026-12-04) passes at the default thresholds, and the same card would be
held back if GEMMs needed the 80 % the rest need."""

from __future__ import annotations

from gpurental.acceptance.evaluate import figures_evaluate
from gpurental.acceptance.specsheets import GPU_SPECS

H200_MEASURED = {
    "gemm_fp32_tflops": 51.0,
    "gemm_tf32_tflops": 347.1,
    "gemm_fp16_tflops": 645.7,
    "gemm_bf16_tflops": 665.3,
    "memory_bandwidth_gbs": 4164.0,
    "h2d_gbs": 55.1,
    "d2h_gbs": 55.3,
}


def evaluate(**thresholds):
    figures = {key: {"value": value} for key, value in H200_MEASURED.items()}
    one_gpu = {"not_applicable": "one GPU: no pair"}
    figures |= {"p2p_gbs": one_gpu, "allreduce_busbw_gbs": one_gpu}
    return figures_evaluate(
        result={"device": "cuda", "gpu_count": 1, "figures": figures},
        network=[],
        nominal=GPU_SPECS["NVIDIA H200"],
        per_cpu_core=False,
        nic_gbps=None,
        expected_device="cuda",
        expected_gpus=1,
        **thresholds,
    )


def test_a_healthy_h200_passes_against_its_data_sheet_at_the_default_thresholds():
    rows, failing = evaluate(threshold=0.80, gemm_threshold=0.60)
    assert failing == []
    by_key = {row["key"]: row for row in rows}
    # Nominal is the data sheet's dense peak, not what a card measured.
    assert by_key["gemm_fp16_tflops"]["nominal"] == 989.4
    assert by_key["gemm_fp16_tflops"]["percent"] == 65.3
    assert by_key["memory_bandwidth_gbs"]["percent"] == 86.8
    assert "datasheet" in GPU_SPECS["NVIDIA H200"]["source"]


def test_one_threshold_for_everything_holds_back_the_gemms_only():
    rows, failing = evaluate(threshold=0.80)
    assert failing == ["FP32 GEMM", "TF32 GEMM", "FP16 GEMM", "BF16 GEMM"]
