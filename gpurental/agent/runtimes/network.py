"""The tenant network: where every instance container lives on a GPU host.

- A Docker bridge network ``gpurental-tenants`` (interface ``gpr-tenants``) with
  inter-container traffic off (``enable_icc=false``): containers cannot reach each other.
- Firewall rules: in ``INPUT``, no new connection from the bridge to the host itself (its
  services on any of its addresses); in a chain of their own (``GPURENTAL-TENANTS``),
  jumped to from ``DOCKER-USER``, nothing forwarded from a container to private ranges (10/8, 172.16/12, 192.168/16, 100.64/10) or
  link-local addresses (169.254/16, the cloud metadata service). Replies on connections
  made to the container (its published JupyterLab port) still flow. The public internet
  stays reachable, so customers can install packages.

Applied by the agent at start (it runs as root on a GPU host), idempotently: the chain
is rebuilt each time, the jumps added once.
"""

from __future__ import annotations

import shutil
import subprocess

NETWORK = "gpurental-tenants"
BRIDGE = "gpr-tenants"  # at most 15 characters: a Linux interface name
CHAIN = "GPURENTAL-TENANTS"
BLOCKED = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")


class NetworkSetupError(RuntimeError):
    pass


def ensure_network(client) -> None:
    """The tenant bridge exists, with inter-container traffic off."""
    import docker.errors

    try:
        network = client.networks.get(NETWORK)
    except docker.errors.NotFound:
        client.networks.create(
            NETWORK,
            driver="bridge",
            options={
                "com.docker.network.bridge.enable_icc": "false",
                "com.docker.network.bridge.name": BRIDGE,
            },
            labels={"gpurental.managed": "true"},
        )
        return
    options = network.attrs.get("Options") or {}
    if options.get("com.docker.network.bridge.enable_icc") != "false":
        raise NetworkSetupError(
            f"Docker network {NETWORK} exists with inter-container traffic on; remove it "
            "(docker network rm) and restart the agent"
        )


def firewall_rules() -> list[list[str]]:
    """The chain's rules, in order (iptables arguments after ``-A CHAIN``)."""
    rules = [["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"]]
    rules += [["-d", cidr, "-j", "DROP"] for cidr in BLOCKED]
    return rules


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    binary = shutil.which("iptables") or "/usr/sbin/iptables"
    return subprocess.run(  # noqa: S603 - the system's iptables, our own arguments
        [binary, "-w", *args], capture_output=True, text=True, check=check
    )


def ensure_firewall() -> None:
    if shutil.which("iptables") is None:
        raise NetworkSetupError("iptables is not installed: the tenant firewall cannot be set")
    try:
        if _iptables("-n", "-L", CHAIN, check=False).returncode != 0:
            _iptables("-N", CHAIN)
        _iptables("-F", CHAIN)
        for rule in firewall_rules():
            _iptables("-A", CHAIN, *rule)
        # To the host itself (any of its addresses): replies only, nothing new.
        host_drop = ["-i", BRIDGE, "-m", "conntrack", "--ctstate", "NEW,INVALID", "-j", "DROP"]
        if _iptables("-C", "INPUT", *host_drop, check=False).returncode != 0:
            _iptables("-I", "INPUT", "1", *host_drop)
        # Through the host (forwarded): the chain's drops, before Docker's own accepts.
        if _iptables("-n", "-L", "DOCKER-USER", check=False).returncode != 0:
            _iptables("-N", "DOCKER-USER")
        forward_jump = ["-i", BRIDGE, "-j", CHAIN]
        if _iptables("-C", "DOCKER-USER", *forward_jump, check=False).returncode != 0:
            _iptables("-I", "DOCKER-USER", "1", *forward_jump)
    except subprocess.CalledProcessError as exc:
        raise NetworkSetupError(
            f"setting the tenant firewall failed ({' '.join(exc.cmd)}: {exc.stderr.strip()}); "
            "the agent must run as root"
        ) from exc
