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

An account's private network (gpurental/networks) is a second bridge per account on the
host, ``gpr-p-<index>``, joined by each of its containers (as ``eth1``) under its
``.internal`` names, with traffic between them on. It is ``internal``: nothing leaves it
for another network or the internet (the default route stays on the tenant network), and
the firewall drops new connections from it to the host itself, as for the tenant bridge.
Another account's containers are on other bridges, which Docker isolates from each other,
and their tenant-network traffic to 10/8 is dropped by the chain above. The bridge goes
when its last container does.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

NETWORK = "gpurental-tenants"
# `ping` without CAP_NET_RAW (which containers do not get): ICMP echo sockets for the
# groups a container's users have. 0-65535, not Docker's usual 0-2147483647: with the
# engine remapping user namespaces, only the mapped range is accepted.
SYSCTLS = {"net.ipv4.ping_group_range": "0 65535"}
PRIVATE_BRIDGES = "gpr-p+"  # every account's private bridge (iptables' interface wildcard)
LABEL_PRIVATE = "gpurental.private"
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
        for bridge in (BRIDGE, PRIVATE_BRIDGES):
            host_drop = ["-i", bridge, "-m", "conntrack", "--ctstate", "NEW,INVALID", "-j", "DROP"]
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


def private_join(client, net, container_id: str) -> None:
    """Join the container (or the sandbox whose network it shares) to the account's
    private network under its names, making the network first if it is not there."""
    import docker.errors

    for attempt in range(2):
        network = _private_ensure(client, net)
        try:
            network.connect(container_id, aliases=list(net.names))
            return
        except docker.errors.NotFound:
            if attempt:  # pruned between the two calls by the last container's removal
                raise
        except docker.errors.APIError as exc:
            if "already exists" in str(exc):  # a start retried: joined already
                return
            raise


_private_lock = threading.Lock()  # starts run on threads: one makes a network, the rest wait


def _private_ensure(client, net):
    import docker.errors
    from docker.types import IPAMConfig, IPAMPool

    ipam = IPAMConfig(pool_configs=[IPAMPool(subnet=net.subnet)])
    with _private_lock:
        # Another agent on the same engine (the test fleet's hosts share one) may be making
        # or pruning it at this moment: a few tries settle who has it.
        for attempt in range(PRIVATE_TRIES):
            try:
                return client.networks.get(net.network_name)
            except docker.errors.NotFound:
                pass
            try:
                return _private_create(client, net, ipam)
            except NetworkSetupError:
                if attempt == PRIVATE_TRIES - 1:
                    raise
                time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


PRIVATE_TRIES = 4
PRUNE_MIN_AGE_S = 120  # a network younger than this may be about to get its first container


def _private_create(client, net, ipam):
    import docker.errors

    try:
        return client.networks.create(
            net.network_name,
            check_duplicate=True,  # two starts at once: one network of that name, not two
            driver="bridge",
            internal=True,
            ipam=ipam,
            options={
                "com.docker.network.bridge.name": net.bridge,
                "com.docker.network.bridge.enable_icc": "true",
            },
            labels={"gpurental.managed": "true", LABEL_PRIVATE: str(net.index)},
        )
    except docker.errors.APIError as exc:
        # Another agent on this engine made it first (the subnet is taken: "Pool overlaps").
        if exc.status_code == 409 or "overlaps" in str(exc):
            try:
                return client.networks.get(net.network_name)
            except docker.errors.NotFound:
                raise NetworkSetupError(
                    f"the private network's subnet {net.subnet} is used by another Docker "
                    "network on this host: remove it, or give the control plane another "
                    "PRIVATE_NETWORK_POOL"
                ) from exc
        raise


def private_prune(client, network_names=None) -> None:
    """Remove the private networks named (all of this engine's, without names) that no
    container is on any more, running or stopped: Docker would let a network go from under
    a stopped container, which then could not start (a parked replica, say)."""
    import docker.errors

    # A sweep leaves young networks alone: one may be about to get its first container
    # (a start between its create and its connect). A network named here was the removed
    # container's; a start racing its removal makes it again (private_join tries twice).
    min_age = 0.0
    if network_names is None:
        min_age = PRUNE_MIN_AGE_S
        network_names = [n.name for n in client.networks.list(filters={"label": LABEL_PRIVATE})]
    for name in network_names:
        try:
            network = client.networks.get(name)
            if min_age and _age_s(network.attrs.get("Created", "")) < min_age:
                continue
            if client.containers.list(all=True, filters={"network": name}):
                continue
            network.remove()
        except docker.errors.APIError:  # gone already, or joined again meanwhile
            continue


def _age_s(created: str) -> float:
    """Seconds since Docker's ``Created`` (RFC 3339 with nanoseconds); 0 when unreadable."""
    import re
    from datetime import UTC, datetime

    match = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$", created)
    if match is None:
        return 0.0
    fraction = (match.group(2) or ".0")[:7]  # Python reads microseconds, Docker writes nanoseconds
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    stamp = datetime.fromisoformat(match.group(1) + fraction + zone)
    return (datetime.now(UTC) - stamp).total_seconds()
