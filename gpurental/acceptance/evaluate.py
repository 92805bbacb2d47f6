"""Measured against nominal: pure functions, no database (tested with numbers alone)."""

from __future__ import annotations

# (probe key, label, NominalSpec field, unit), in the order staff and customers read them.
FIGURES = (
    ("gemm_fp32_tflops", "FP32 GEMM", "fp32_tflops", "TFLOPS"),
    ("gemm_tf32_tflops", "TF32 GEMM", "tf32_tflops", "TFLOPS"),
    ("gemm_fp16_tflops", "FP16 GEMM", "fp16_tflops", "TFLOPS"),
    ("gemm_bf16_tflops", "BF16 GEMM", "bf16_tflops", "TFLOPS"),
    ("memory_bandwidth_gbs", "Memory bandwidth", "memory_bandwidth_gbs", "GB/s"),
    ("h2d_gbs", "Host → device copy", "host_link_gbs", "GB/s"),
    ("d2h_gbs", "Device → host copy", "host_link_gbs", "GB/s"),
    ("p2p_gbs", "Peer-to-peer, slowest pair", "p2p_gbs", "GB/s"),
    ("allreduce_busbw_gbs", "All-reduce bus bandwidth (NCCL)", "allreduce_busbw_gbs", "GB/s"),
)
GEMM_KEYS = {"gemm_fp32_tflops", "gemm_tf32_tflops", "gemm_fp16_tflops", "gemm_bf16_tflops"}
# What customers are shown: the first of these that was compared.
HEADLINE_KEYS = ("gemm_fp16_tflops", "gemm_bf16_tflops", "gemm_fp32_tflops")
INFORMATIONAL = "no nominal figure: shown, not compared"


def _row(key, label, unit, *, measured=None, nominal=None, threshold=0.0, note="") -> dict:
    row = {
        "key": key,
        "label": label,
        "unit": unit,
        "measured": measured,
        "nominal": nominal,
        "percent": None,
        "passed": None,
        "note": note,
        "threshold": threshold,
    }
    if measured is not None and nominal:
        row["percent"] = round(100 * measured / nominal, 1)
        row["passed"] = measured >= threshold * nominal
    elif measured is not None and not note:
        row["note"] = INFORMATIONAL
    return row


def figures_evaluate(
    *,
    result: dict,
    network: list[dict],
    nominal: dict[str, float | None] | None,
    per_cpu_core: bool,
    nic_gbps: float | None,
    threshold: float,
    gemm_threshold: float | None = None,
    expected_device: str,
    expected_gpus: int,
    previous: list[dict] | None = None,
    regression_tolerance: float = 0.05,
) -> tuple[list[dict], list[str]]:
    """Every figure of a run with its nominal, percentage and verdict, and the labels of
    those below their threshold (a fraction of nominal): ``gemm_threshold`` for the dense
    GEMMs (their data-sheet peaks are at the boost clock; default ``threshold``),
    ``threshold`` for the rest. A figure the probe could not measure
    ("not applicable on CPU") or one without a nominal is shown and not compared."""
    rows = []
    device = result.get("device", "")
    if device != expected_device:
        rows.append(
            {
                **_row("device", "Device", "", note=f"the benchmark ran on {device or 'nothing'}"),
                "passed": False,
                "note": f"expected {expected_device}, the benchmark ran on {device or 'nothing'} "
                "(is the NVIDIA Container Toolkit installed?)",
            }
        )
    elif device == "cuda" and int(result.get("gpu_count") or 0) != expected_gpus:
        rows.append(
            {
                **_row("gpu_count", "GPUs seen", "", measured=result.get("gpu_count")),
                "passed": False,
                "note": f"the host reports {expected_gpus} GPUs, the benchmark saw "
                f"{result.get('gpu_count')}",
            }
        )
    if nominal is None:
        rows.append(
            {
                **_row("nominal", "Nominal figures", ""),
                "passed": False,
                "note": "no nominal spec for this host's GPU model: add one in the back-office",
            }
        )
        nominal = {}
    figures = result.get("figures") or {}
    cores = max(1, int(result.get("cpu_threads") or 1))
    for key, label, field, unit in FIGURES:
        reported = figures.get(key)
        want = nominal.get(field)
        if want is not None and per_cpu_core and key in GEMM_KEYS:
            want = want * cores
        if not isinstance(reported, dict):
            rows.append(_row(key, label, unit, nominal=want, note="not reported by the benchmark"))
        elif "not_applicable" in reported:
            rows.append(_row(key, label, unit, nominal=want, note=str(reported["not_applicable"])))
        else:
            value = reported.get("value")
            value = float(value) if isinstance(value, int | float) else None
            needed = gemm_threshold if key in GEMM_KEYS and gemm_threshold else threshold
            rows.append(_row(key, label, unit, measured=value, nominal=want, threshold=needed))
    for entry in network:
        peer = str(entry.get("peer", "?"))
        error = entry.get("error")
        rows.append(
            _row(
                f"network_gbps:{peer}",
                f"Network to {peer} (iperf3)",
                "Gb/s",
                measured=entry.get("throughput_gbps"),
                nominal=nic_gbps,
                threshold=threshold,
                note=str(error) if error else "" if nic_gbps else "NIC speed unknown: not compared",
            )
        )
        rows.append(
            _row(
                f"network_latency_ms:{peer}",
                f"Round trip to {peer} (TCP)",
                "ms",
                measured=entry.get("latency_ms"),
                note=str(error) if error else "latency: shown, not compared",
            )
        )
    regressions_flag(rows, previous or [], regression_tolerance)
    failing = [row["label"] for row in rows if row["passed"] is False]
    return rows, failing


def regressions_flag(rows: list[dict], previous: list[dict], tolerance: float) -> None:
    """Mark figures more than ``tolerance`` below the host's previous completed run."""
    before = {row["key"]: row.get("measured") for row in previous}
    for row in rows:
        old, new = before.get(row["key"]), row.get("measured")
        row["previous"] = old
        row["regressed"] = bool(
            old
            and new is not None
            and row["unit"] != "ms"  # latency: lower is better, and too noisy to flag
            and new < old * (1 - tolerance)
        )


def headline(figures: list[dict]) -> dict | None:
    """The figure customers see ("measured 94 % of nominal FP16")."""
    by_key = {row["key"]: row for row in figures}
    for key in HEADLINE_KEYS:
        row = by_key.get(key)
        if row and row.get("percent") is not None:
            return row
    return None


def short_name(label: str) -> str:
    """'FP16 GEMM' → 'FP16', for the customer's sentence."""
    return label.replace(" GEMM", "")
