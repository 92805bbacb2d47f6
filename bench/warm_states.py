"""Which state should a warm replica wait in? Measured on this Docker Engine with the
serving image, until its ``/healthz`` answers through the published port:

- **create + start**: no container kept (the image is on the host): what a cold start
  on the host costs at the engine, and what starting a stopped gpurental instance does
  (each start makes the run's secrets anew, so the container is made again);
- **start of a stopped container**: the container kept, stopped (``docker stop``): what
  promoting a group's warm replica does (it is parked with ``keep_container`` and
  started again with the same run, see gpurental/groups/services.py);
- **unpause**: the container kept running, frozen (``docker pause``).

Stopped and not-kept hold nothing; a paused container keeps its memory and its GPU (the
platform would have to keep the GPU allocated, and bill it). The hardening is the
agent's: every capability dropped, no-new-privileges.

    python bench/warm_states.py [--rounds 10] [--smoke] [--image gpurental/serving-embed:latest]

With ``--image gpurental/serving-embed:latest`` (a real model, loaded at start), every
state but unpause pays the model's load again: the process starts anew.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

IMAGE = "gpurental/serving-echo:latest"
LABEL = "gpurental.bench=warm-states"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ready(port: int, timeout: float = 120) -> None:
    import requests

    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.005)
    raise SystemExit(f"the serving image never answered on port {port}")


def published(container) -> int:
    container.reload()
    return int(container.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--smoke", action="store_true", help="2 rounds: it runs, sane figures")
    parser.add_argument("--image", default=IMAGE, help=f"a serving image (default {IMAGE})")
    args = parser.parse_args()
    rounds = 2 if args.smoke else args.rounds
    image = args.image

    import docker

    client = docker.from_env()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise SystemExit(f"{image} is not built: make images") from None
    key, value = LABEL.split("=")
    times: dict[str, list[float]] = {"create + start": [], "start (stopped)": [], "unpause": []}
    for _ in range(rounds):
        container = None
        try:
            started = time.perf_counter()
            container = client.containers.create(
                image,
                ports={"8000/tcp": ("127.0.0.1", free_port())},
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                labels={key: value},
            )
            container.start()
            ready(published(container))
            times["create + start"].append(time.perf_counter() - started)

            container.stop(timeout=5)
            started = time.perf_counter()
            container.start()
            ready(published(container))
            times["start (stopped)"].append(time.perf_counter() - started)

            container.pause()
            started = time.perf_counter()
            container.unpause()
            ready(published(container))
            times["unpause"].append(time.perf_counter() - started)
        finally:
            if container is not None:
                container.remove(force=True)
    print(f"\nwarm replica states, {rounds} rounds, until /healthz answers ({image})")
    print(f"{'state':18} {'p50':>9} {'min':>9} {'max':>9}   holds")
    holds = {
        "create + start": "nothing",
        "start (stopped)": "disk only",
        "unpause": "memory and GPU",
    }
    for name, values in times.items():
        p50, low, high = (statistics.median(values), min(values), max(values))
        print(
            f"{name:18} {p50 * 1000:7.0f}ms {low * 1000:7.0f}ms {high * 1000:7.0f}ms   {holds[name]}"
        )
    gain = statistics.median(times["create + start"]) - statistics.median(times["start (stopped)"])
    print(f"keeping a stopped container saves {gain * 1000:.0f} ms per promotion at the engine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
