"""The agent's side of the host acceptance benchmark.

The control plane sends ``protocol.ACCEPTANCE_RUN`` (a run id, the framework image, the
host's GPUs, sizes, and a few peer hosts to measure the network against). The agent:

1. runs ``acceptance_probe.py`` in a one-shot container of that image on all its GPUs
   (``runtimes/batch.py``; the script is copied in, so any torch image will do);
2. measures the network to each peer with ``iperf3 -c`` from the host itself (Debian's
   iperf3; each host runs ``iperf3 -s``, see the README), throughput and TCP round trip;
3. reports the raw figures back (``protocol.ACCEPTANCE_REPORT``): started, then finished
   or failed with a reason. Comparing with the nominal figures is the control plane's job.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

from gpurental.agent.runtimes import ContainerRuntimeError

log = logging.getLogger(__name__)

PROBE = Path(__file__).with_name("acceptance_probe.py")


def last_json_line(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def iperf3_measure(*, address: str, port: int, seconds: int, binary: str = "iperf3") -> dict:
    """Throughput (Gb/s) and mean TCP round trip (ms) from this host to an ``iperf3 -s``."""
    found = shutil.which(binary)
    if found is None:
        return {"error": "iperf3 is not installed on this host (apt-get install -y iperf3)"}
    try:
        done = subprocess.run(  # noqa: S603 - fixed binary, arguments from the agent's message
            [found, "-c", address, "-p", str(int(port)), "-t", str(int(seconds)), "-J"],
            capture_output=True,
            text=True,
            timeout=seconds + 30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"iperf3 to {address}:{port} did not finish within {seconds + 30} s"}
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return {"error": f"iperf3 failed: {(done.stderr or done.stdout).strip()[-300:]}"}
    if report.get("error"):
        return {"error": f"iperf3: {report['error']}"}
    end = report.get("end") or {}
    received = (end.get("sum_received") or {}).get("bits_per_second")
    rtts = [
        s["sender"]["mean_rtt"]
        for s in end.get("streams") or []
        if isinstance(s.get("sender"), dict) and "mean_rtt" in s["sender"]
    ]
    return {
        "throughput_gbps": round(received / 1e9, 3) if received else None,
        # iperf3 reports the kernel's smoothed RTT in microseconds.
        "latency_ms": round(sum(rtts) / len(rtts) / 1000, 3) if rtts else None,
        "seconds": seconds,
    }


def acceptance_run(agent, payload: dict) -> None:
    """Run the benchmark this message asks for and report what came of it."""
    reporter, run_id = agent.reporter, payload["run_id"]
    reporter.acceptance(run_id, "started")
    runtime = agent.runtime
    if runtime.name != "docker":
        reporter.acceptance(
            run_id,
            "failed",
            reason=f"the acceptance benchmark runs in a container; this agent uses the "
            f"{runtime.name} runtime (set GPURENTAL_RUNTIME=docker)",
        )
        return
    from gpurental.agent.runtimes.batch import run_script

    args = ["--smoke"] if payload.get("smoke") else []
    gpu_uuids = list(payload.get("gpu_uuids") or []) if payload.get("gpu_source") == "nvml" else []
    if not gpu_uuids:
        args += ["--device", "cpu"]
    try:
        done = run_script(
            runtime.client,
            name=f"gpurental-acceptance-{run_id}",
            image=payload["image"],
            script_name="gpurental_acceptance_probe.py",
            script=PROBE.read_bytes(),
            args=args,
            gpu_uuids=gpu_uuids,
            # 0: the whole host (the control plane does not know how many CPUs it has).
            cpu_count=float(payload.get("cpu_count") or os.cpu_count() or 1),
            memory_mb=int(payload["memory_mb"]),
            timeout_s=float(payload["timeout_s"]),
            host_name=getattr(runtime, "host_name", ""),
        )
    except ContainerRuntimeError as exc:
        reporter.acceptance(run_id, "failed", reason=str(exc))
        return
    result = last_json_line(done.stdout)
    if done.exit_code != 0 or result is None:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        reporter.acceptance(
            run_id,
            "failed",
            reason=f"the benchmark exited with code {done.exit_code}; last lines:\n{tail}",
        )
        return
    network = []
    for peer in payload.get("peers") or []:
        figures = iperf3_measure(
            address=str(peer["address"]),
            port=int(peer["port"]),
            seconds=int(payload.get("iperf3_seconds") or 5),
        )
        network.append({"peer": str(peer["name"]), **figures})
    log.info("acceptance run %s done in %.1f s", run_id, done.seconds)
    reporter.acceptance(
        run_id, "finished", result=result, network=network, seconds=round(done.seconds, 1)
    )
