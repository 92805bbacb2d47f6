"""Customers' own images on this Docker Engine and Debian's docker-registry (127.0.0.1):

- **launch**: the catalog image (on the host, never pulled) against the same image as a
  customer's own, cached on the host: every launch of it still asks the registry for its
  manifest (the login check), until JupyterLab answers. The issue's goal: within 5 %.
- **save as image**: an instance with N MB written into its container (not /workspace),
  committed and pushed to the platform's registry (``DockerRuntime.save_image``), then
  launched where the image is not cached, as on a second host: pulled, then started.

    python bench/images.py [--rounds 5] [--change-mb 1024] [--smoke]

The agent's runtime does the work (the same hardening, network sandboxes off); the
registry keeps its data in a temporary folder on this machine's disk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CATALOG_IMAGE = "gpurental/jupyter-cpu:latest"
USERS = {"customer": "bench-customer-pw", "platform": "bench-platform-pw"}
GB = 1024**3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def login(registry, user: str) -> dict:
    return {"username": user, "password": USERS[user], "serveraddress": registry.address}


def spec(image: str, pull=None):
    from gpurental.agent.runtimes.base import ContainerSpec

    return ContainerSpec(
        instance_id=str(uuid.uuid4()),
        image=image,
        token=uuid.uuid4().hex,
        gpu_indices=(0,),
        gpu_uuids=(),
        gpu_source="simulated",
        cpu_count=1.0,
        memory_mb=1024,
        pids_limit=256,
        pull=pull,
    )


def timed_launch(runtime, container_spec) -> float:
    started = time.perf_counter()
    runtime.start(container_spec, lambda *_a, **_k: None)
    took = time.perf_counter() - started
    runtime.remove(container_spec.instance_id)
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--change-mb", type=int, default=1024)
    parser.add_argument("--smoke", action="store_true", help="2 rounds, a 16 MB change")
    args = parser.parse_args()
    rounds, change_mb = (2, 16) if args.smoke else (args.rounds, args.change_mb)

    import docker

    from gpurental import registry as registry_mod
    from gpurental.agent.runtimes import docker_problem
    from gpurental.agent.runtimes.base import PullPolicy
    from gpurental.agent.runtimes.docker import DockerRuntime, container_name
    from gpurental.agent.runtimes.imagecache import ImageCache

    if (problem := docker_problem()) or not registry_mod.available():
        print(
            f"bench/images.py needs a Docker Engine and docker-registry: {problem or 'not installed'}"
        )
        return 1
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-images-"))
    registry = registry_mod.Registry(work / "registry", free_port(), users=USERS).start()
    client = docker.from_env()
    runtime = DockerRuntime(
        client=client,
        ready_timeout_s=120,
        image_cache=ImageCache(str(work / "images.json"), limit_bytes=50 * GB),
    )
    pushed = []
    try:
        own = f"{registry.address}/customer/jupyter:1"
        client.images.get(CATALOG_IMAGE).tag(own.rsplit(":", 1)[0], "1")
        started = time.perf_counter()
        for line in client.api.push(
            own.rsplit(":", 1)[0],
            "1",
            auth_config=login(registry, "customer"),
            stream=True,
            decode=True,
        ):
            assert "error" not in line, line
        push_s = time.perf_counter() - started
        pushed.append(own)
        policy = PullPolicy(50 * GB, 600, login(registry, "customer"))

        timed_launch(runtime, spec(CATALOG_IMAGE))  # one warm-up of each, not counted
        timed_launch(runtime, spec(own, policy))
        catalog, custom = [], []
        for _ in range(rounds):  # interleaved, so that drift hits both alike
            catalog.append(timed_launch(runtime, spec(CATALOG_IMAGE)))
            custom.append(timed_launch(runtime, spec(own, policy)))
        cat50, own50 = statistics.median(catalog), statistics.median(custom)

        # Save as image: N MB of new files in the container, committed and pushed.
        source = spec(own, policy)
        runtime.start(source, lambda *_a, **_k: None)
        container = client.containers.get(container_name(source.instance_id))
        code, out = container.exec_run(
            ["sh", "-c", f"head -c {change_mb * 1024 * 1024} /dev/urandom > /opt/change.bin"]
        )
        assert code == 0, out
        saved = f"{registry.address}/a1/bench-env:{uuid.uuid4().hex[:8]}"
        marks: dict[str, float] = {}

        def progress(message: str, percent=None) -> None:
            marks.setdefault(message.split(" ")[0], time.perf_counter())

        started = time.perf_counter()
        size, digest = runtime.save_image(
            source.instance_id, saved, login(registry, "platform"), progress
        )
        save_s = time.perf_counter() - started
        commit_s = marks.get("pushing", time.perf_counter()) - started
        pushed.append(saved)
        runtime.remove(source.instance_id)

        # On "another host": not cached here, so pulled first.
        client.images.remove(saved)
        runtime.image_cache.forget(saved)
        other = spec(saved, PullPolicy(50 * GB, 600, login(registry, "platform")))
        marks.clear()
        started = time.perf_counter()
        timings = {}

        def launch_progress(message: str, pull=None) -> None:
            if message.startswith("creating") and "pulled" not in timings:
                timings["pulled"] = time.perf_counter() - started

        runtime.start(other, launch_progress)
        relaunch_s = time.perf_counter() - started
        runtime.remove(other.instance_id)
        pull_s = timings.get("pulled", relaunch_s)
    finally:
        registry.stop()
        for reference in pushed:
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(reference, force=True)

    print(f"\ncustomers' images, {rounds} rounds, each until JupyterLab answers")
    print(
        f"  push of the {client.images.get(CATALOG_IMAGE).attrs['Size'] / 1e6:.0f} MB catalog image to the registry: {push_s:.1f} s"
    )
    print(
        f"  launch, catalog image:           p50 {cat50 * 1000:7.0f} ms  (min {min(catalog) * 1000:.0f}, max {max(catalog) * 1000:.0f})"
    )
    print(
        f"  launch, own image, cached:       p50 {own50 * 1000:7.0f} ms  (min {min(custom) * 1000:.0f}, max {max(custom) * 1000:.0f})"
    )
    print(
        f"  own image against catalog:       {100 * (own50 - cat50) / cat50:+.1f} % (goal: within 5 %)"
    )
    print(
        f"  save as image, {change_mb} MB change: {save_s:.1f} s (commit {commit_s:.1f} s, push {save_s - commit_s:.1f} s), image {size / 1e6:.0f} MB"
    )
    print(
        f"  launch of it where not cached:   {relaunch_s:.1f} s (pull {pull_s:.1f} s, start {relaunch_s - pull_s:.1f} s)"
    )
    print(
        json.dumps(
            {
                "rounds": rounds,
                "catalog_p50_s": round(cat50, 3),
                "own_cached_p50_s": round(own50, 3),
                "own_vs_catalog_pct": round(100 * (own50 - cat50) / cat50, 1),
                "change_mb": change_mb,
                "save_s": round(save_s, 2),
                "commit_s": round(commit_s, 2),
                "push_s": round(save_s - commit_s, 2),
                "relaunch_s": round(relaunch_s, 2),
                "pull_s": round(pull_s, 2),
                "digest": digest,
            }
        )
    )
    ok = all(x > 0 for x in (*catalog, *custom, save_s, relaunch_s)) and digest.startswith(
        "sha256:"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
