"""The host acceptance benchmark on this machine: measured against nominal.

    .venv/bin/python bench/acceptance.py [--smoke] [--threshold 0.80] [--gemm-threshold 0.60]
                                         [--python PATH]
                                         [--image IMAGE] [--peer HOST:PORT]

Runs the same probe the agent runs on a joining host (``gpurental/agent/acceptance_probe.py``:
dense GEMM in FP32/TF32/FP16/BF16, memory bandwidth, host↔device copies, peer-to-peer per
GPU pair, NCCL all-reduce bus bandwidth), then compares each figure with the nominal one
exactly as the control plane does (``gpurental/acceptance/evaluate.py``): the spec sheet
of the GPU model NVML names, or, without a GPU, the CPU nominal (per core, times the
threads used). With ``--peer`` it also measures the network to an ``iperf3 -s`` there.

Where the probe runs: with ``--python``, that interpreter (it needs torch); else in the
framework image ``--image`` on the local Docker Engine (what the agent does; default
gpurental/pytorch:2.13.0-cpu, or the -cuda one when nvidia-smi answers); else, when this
Python has torch, here.

Prints a table (measured, nominal, % of nominal, verdict) and whether a host like this
one would be accepted at ``--threshold``. A timing report, never a test: nothing here
fails because this machine is slow.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpurental.acceptance.evaluate import figures_evaluate  # noqa: E402 - after sys.path
from gpurental.acceptance.specsheets import CPU_SPEC, GPU_SPECS  # noqa: E402
from gpurental.agent.acceptance import PROBE, iperf3_measure, last_json_line  # noqa: E402


def has_nvidia() -> bool:
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0  # noqa: S603, S607


def run_probe(args) -> tuple[dict, str]:
    probe_args = ["--smoke"] if args.smoke else []
    if args.python:
        where = f"{args.python} (here)"
        done = subprocess.run(  # noqa: S603
            [args.python, str(PROBE), *probe_args], capture_output=True, text=True, check=False
        )
        result = last_json_line(done.stdout)
        if result is None:
            sys.exit(f"the probe failed:\n{done.stderr[-2000:]}")
        return result, where
    cuda = has_nvidia()
    image = args.image or (
        "gpurental/pytorch:2.13.0-cuda" if cuda else "gpurental/pytorch:2.13.0-cpu"
    )
    try:
        import docker

        from gpurental.agent.runtimes.batch import run_script

        client = docker.from_env()
        client.images.get(image)
    except Exception as exc:  # noqa: BLE001 - any reason: fall back, and say why
        if importlib.util.find_spec("torch") is None:
            sys.exit(
                f"cannot run the probe: no Docker image {image} ({exc.__class__.__name__}: "
                f"{exc}) and no torch in {sys.executable}; build the image with `make images` "
                "or pass --python /path/to/python-with-torch"
            )
        return run_probe(argparse.Namespace(**{**vars(args), "python": sys.executable}))
    gpu_uuids = []
    if cuda:
        listed = subprocess.run(  # noqa: S603
            ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],  # noqa: S607
            capture_output=True,
            text=True,
            check=False,
        )
        gpu_uuids = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    done = run_script(
        client,
        name=f"gpurental-acceptance-bench-{os.getpid()}",
        image=image,
        script_name="gpurental_acceptance_probe.py",
        script=PROBE.read_bytes(),
        args=probe_args + ([] if gpu_uuids else ["--device", "cpu"]),
        gpu_uuids=gpu_uuids,
        cpu_count=float(os.cpu_count() or 1),
        memory_mb=args.memory_mb,
        timeout_s=3600,
    )
    result = last_json_line(done.stdout)
    if done.exit_code != 0 or result is None:
        sys.exit(f"the probe exited with {done.exit_code}:\n{done.stderr[-2000:]}")
    return result, f"container {image}"


def nominal_for(result: dict) -> tuple[dict | None, str]:
    if result.get("device") == "cpu":
        return CPU_SPEC, "CPU nominal (per core × threads)"
    names = set(result.get("gpu_names") or [])
    for name in names:
        if name in GPU_SPECS:
            return GPU_SPECS[name], f"{name} spec sheet"
    return None, f"no spec sheet for {', '.join(sorted(names)) or 'this GPU'}"


def fmt(value, unit: str = "") -> str:
    if value is None:
        return "—"
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes, seconds")
    parser.add_argument(
        "--threshold", type=float, default=0.80, help="memory, copies, links (ACCEPTANCE_THRESHOLD)"
    )
    parser.add_argument(
        "--gemm-threshold",
        type=float,
        default=0.60,
        help="dense GEMMs against the data sheet's peaks (ACCEPTANCE_THRESHOLD_GEMM)",
    )
    parser.add_argument("--python", help="run the probe with this interpreter (needs torch)")
    parser.add_argument("--image", help="framework image to run the probe in")
    parser.add_argument("--memory-mb", type=int, default=16384)
    parser.add_argument("--peer", help="HOST:PORT of an iperf3 -s to measure the network to")
    args = parser.parse_args()
    started = time.monotonic()
    result, where = run_probe(args)
    nominal, nominal_name = nominal_for(result)
    network = []
    if args.peer:
        host, _, port = args.peer.rpartition(":")
        network.append(
            {"peer": args.peer, **iperf3_measure(address=host, port=int(port), seconds=5)}
        )
    rows, failing = figures_evaluate(
        result=result,
        network=network,
        nominal=nominal,
        per_cpu_core=bool(nominal and nominal.get("per_cpu_core")),
        nic_gbps=None,
        threshold=args.threshold,
        gemm_threshold=args.gemm_threshold,
        expected_device=result.get("device", ""),
        expected_gpus=int(result.get("gpu_count") or 0),
    )
    device = (
        f"{result['gpu_count']}× {', '.join(sorted(set(result['gpu_names'])))}"
        if result.get("device") == "cuda"
        else f"CPU: {result.get('cpu_model')}, {result.get('cpu_threads')} threads"
    )
    print(
        f"acceptance probe{' (smoke sizes)' if args.smoke else ''}: {device}; "
        f"torch {result.get('torch')}; run in {where}; {result.get('seconds')} s"
    )
    source = (nominal or {}).get("source")
    print(f"nominal: {nominal_name}{f' ({source})' if source else ''}")
    print(f"thresholds: GEMMs {args.gemm_threshold:.0%}, the rest {args.threshold:.0%}\n")
    print(f"{'figure':34} {'measured':>16} {'nominal':>16} {'% nom.':>7}  verdict")
    for row in rows:
        percent = f"{row['percent']:.1f}" if row["percent"] is not None else "—"
        verdict = {True: "pass", False: "BELOW"}.get(row["passed"], row["note"])
        print(
            f"{row['label']:34} {fmt(row['measured'], row['unit']):>16} "
            f"{fmt(row['nominal'], row['unit']):>16} {percent:>7}  {verdict}"
        )
    verdict = "accepted" if not failing else f"held back ({', '.join(failing)})"
    print(f"\na host like this one would be {verdict}; {time.monotonic() - started:.1f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
