"""The article's network test between two instances of one account: ping and iperf3 over
their private network (gpurental/networks), beside the same test on the host's own stack.

    .venv/bin/python bench/network.py [--seconds 5] [--smoke]

Two containers of gpurental/jupyter-cpu, hardened as the agent makes them (no
capabilities, no new privileges, user namespaces remapped by the engine), join a private
network exactly as the agent joins instances (``network.private_join``) and find each other
by name. The private network is a bridge on one host; the cross-host overlay is not built,
so there is no overlay figure yet. The host's own figure is iperf3 on its loopback: on a
one-machine setup that is the host's fastest link and the ceiling of the bridge's.

A report, never a test: nothing here fails because this machine is slow.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpurental.agent.runtimes import network  # noqa: E402 - after sys.path
from gpurental.agent.runtimes.base import PrivateNet  # noqa: E402

IMAGE = "gpurental/jupyter-cpu:latest"
INDEX, SUBNET = 999_990, "10.255.250.0/24"  # outside the control plane's default pool


def iperf3_json(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {done.stdout[-500:]}{done.stderr[-500:]}")
    return json.loads(done.stdout)


def gbps(result: dict) -> float:
    return result["end"]["sum_received"]["bits_per_second"] / 1e9


def ping_ms(output: str) -> float:
    # rtt min/avg/max/mdev = 0.041/0.052/0.068/0.009 ms
    return float(output.rsplit("=", 1)[1].split("/")[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="1 s each: it still runs")
    args = parser.parse_args()
    seconds = 1 if args.smoke else args.seconds
    import docker

    client = docker.from_env()
    tag = uuid.uuid4().hex[:6]
    net = PrivateNet(INDEX, SUBNET, ())
    containers = []
    try:
        for name in ("a", "b"):
            container = client.containers.run(
                IMAGE,
                entrypoint=["sleep", "infinity"],
                command=[],
                name=f"gpurental-bench-net-{name}-{tag}",
                detach=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges:true"],
                sysctls=dict(network.SYSCTLS),
                stop_signal="SIGKILL",
                labels={"gpurental.bench": "network"},
            )
            named = PrivateNet(INDEX, SUBNET, (f"bench-{name}.internal",))
            network.private_join(client, named, container.id)
            containers.append(container)
        a, b = containers
        ping = a.exec_run(["ping", "-c", "5", "-i", "0.2", "bench-b.internal"])
        if ping.exit_code != 0:
            sys.exit(f"ping over the private network failed: {ping.output.decode()}")
        b.exec_run(["iperf3", "-s", "-1", "-D"])
        time.sleep(0.3)  # the daemon's listen
        bridge = iperf3_json(
            ["docker", "exec", a.id, "iperf3", "-c", "bench-b.internal", "-t", str(seconds), "-J"]
        )
        port = "5299"
        server = subprocess.Popen(["iperf3", "-s", "-1", "-p", port], stdout=subprocess.DEVNULL)  # noqa: S603, S607
        time.sleep(0.3)
        host = iperf3_json(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", str(seconds), "-J"])
        server.wait(10)
        print(f"iperf3 -t {seconds}, one TCP stream; ping -c 5 (average round trip)\n")
        print(f"{'path':52} {'Gb/s':>8} {'ping ms':>8}")
        print(
            f"{'private network (bridge on one host, by name)':52} {gbps(bridge):8.2f} "
            f"{ping_ms(ping.output.decode()):8.3f}"
        )
        print(f"{'the host itself (loopback)':52} {gbps(host):8.2f} {'—':>8}")
        print(f"\nbridge / host: {gbps(bridge) / gbps(host):.0%}")
        print("cross-host overlay: not built (no figure)")
    finally:
        for container in containers:
            container.remove(force=True)
        network.private_prune(client, [net.network_name])
    return 0


if __name__ == "__main__":
    if shutil.which("iperf3") is None:
        sys.exit("iperf3 is not installed here (apt-get install iperf3)")
    sys.exit(main())
