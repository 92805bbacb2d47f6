"""The contract between the control plane and the host agents. Django-free: both sides
import it, and ``tests/test_protocol.py`` holds both sides to it.

- Commands go to the host's queue ``host.<name>``: start and restart carry a versioned
  start spec, stop and remove carry an instance id.
- Reports go to the ``control`` queue, each with the host's name and token: the
  heartbeat (liveness, with the latest inventory and container list when the agent has
  them), an instance report of one of ``REPORT_KINDS``, and telemetry rollups.
- Redis keys the agent's sampler writes and the web tier reads.

A spec of a version the agent does not know is refused with a reason the customer sees,
never half-understood.

Every message is signed: an HMAC-SHA256 over its canonical JSON, keyed with the
SHA-256 of the host's join token. The agent derives the key from its token; the control
plane keeps only that hash (``Host.token_hash``), and the token itself never travels.
A message with a wrong signature, or naming another host, is refused on either side.
"""

from __future__ import annotations

import hashlib
import hmac
import json

# --- signing ------------------------------------------------------------------


class Forged(ValueError):
    """A message whose signature does not match, or that names another host."""


def host_key(token: str) -> str:
    """The signing key of a host: what the control plane stores of its token."""
    return hashlib.sha256(token.encode()).hexdigest()


def _mac(key: str, payload: dict) -> str:
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


def sign(key: str, payload: dict) -> dict:
    """The payload with its signature, ready to be sent as a task's keyword arguments."""
    return {**payload, "sig": _mac(key, payload)}


def verify(key: str, message: dict, *, host: str) -> dict:
    """The payload of a message signed with ``key`` for ``host``, or Forged."""
    payload = {k: v for k, v in message.items() if k != "sig"}
    sig = message.get("sig")
    if not isinstance(sig, str) or not key or not hmac.compare_digest(sig, _mac(key, payload)):
        raise Forged("bad signature")
    if payload.get("host") != host:
        raise Forged(f"signed for host {payload.get('host')!r}, not {host!r}")
    return payload


# --- queues -----------------------------------------------------------------

CONTROL_QUEUE = "control"


def host_queue(host_name: str) -> str:
    return f"host.{host_name}"


def report_route(broker_url: str) -> dict:
    """How an agent addresses the control queue. On RabbitMQ through the ``control``
    exchange, which a host's account may write to (the default exchange, which would
    reach every queue by name, it may not); elsewhere (the single-box Redis) by name."""
    if broker_url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return {"exchange": CONTROL_QUEUE, "routing_key": CONTROL_QUEUE}
    return {"queue": CONTROL_QUEUE}


# --- commands: control plane → agent ------------------------------------------

START = "gpurental.agent.instance_start"
RESTART = "gpurental.agent.instance_restart"
STOP = "gpurental.agent.instance_stop"
REMOVE = "gpurental.agent.instance_remove"
# The host acceptance benchmark (gpurental/acceptance): run id, image, the host's GPUs,
# sizes and iperf3 peers in; ACCEPTANCE_REPORT's "started", "finished" or "failed" out.
ACCEPTANCE_RUN = "gpurental.agent.acceptance_run"
# The host's shared Hugging Face cache (gpurental/modelcache): {"action": "fill", "source",
# "repo_id"} | {"action": "evict", "repo_id"} | {"action": "list"}, with a request_id;
# MODELCACHE_REPORT's kinds out. "source" names a file in the agent's import directory.
MODELCACHE = "gpurental.agent.modelcache"
AGENT_TASKS = (START, RESTART, STOP, REMOVE, ACCEPTANCE_RUN, MODELCACHE)

SPEC_VERSION = 3
# Every field of a version-3 start spec (version 1 carried a host path to mount; version 2
# had no extra ports and no SSH); ``spec_version`` says which set it is.
SPEC_FIELDS = frozenset(
    {
        "spec_version",
        "instance_id",
        "image",
        "token",
        "gpu_indices",
        "gpu_uuids",
        "gpu_source",
        "cpu_count",
        "memory_mb",
        "pids_limit",
        "container_port",
        "http_ports",  # other HTTP ports the image declares, reached through the gateway
        "ssh",  # None, or {"port", "host_key", "authorized_keys"}: sshd inside, for the SSH gateway
        "env",
        "mount_model_cache",
        "command",
    }
)


# Optional fields: a spec may leave them out, and an agent that knows them reads them.
# ``dedicated``: None, or for an instance on a leased whole host (gpurental/baremetal/)
# {"shm_size_mb": int, "host_network": bool}: a large /dev/shm, memlock and stack
# ulimits, /dev/infiniband when the host has it (the agent looks), host networking
# when the operator allows it on that host.
OPTIONAL_SPEC_FIELDS = frozenset({"dedicated"})


class SpecRefused(ValueError):
    """A start spec the agent cannot act on; the message is for the customer."""


def spec_check(spec: dict) -> dict:
    """The spec without its version, or SpecRefused saying why it cannot be run."""
    version = spec.get("spec_version")
    if version != SPEC_VERSION:
        raise SpecRefused(
            f"the host agent speaks start spec version {SPEC_VERSION}, but this launch "
            f"was sent as version {version!r}: the agent and the control plane are out of "
            "step (upgrade the agent on this host); nothing was started"
        )
    missing = sorted(SPEC_FIELDS - spec.keys())
    unknown = sorted(spec.keys() - SPEC_FIELDS - OPTIONAL_SPEC_FIELDS)
    if missing or unknown:
        raise SpecRefused(
            f"malformed start spec (missing {missing or 'nothing'}, unknown {unknown or 'nothing'}); "
            "nothing was started"
        )
    return {k: v for k, v in spec.items() if k != "spec_version"}


# --- reports: agent → control plane -------------------------------------------

HEARTBEAT = "gpurental.fleet.tasks.host_heartbeat"
INSTANCE_REPORT = "gpurental.rentals.tasks.instance_report"
TELEMETRY = "gpurental.telemetry.tasks.telemetry_record"
ACCEPTANCE_REPORT = "gpurental.acceptance.tasks.acceptance_report"
MODELCACHE_REPORT = "gpurental.modelcache.tasks.modelcache_report"
CONTROL_TASKS = (HEARTBEAT, INSTANCE_REPORT, TELEMETRY, ACCEPTANCE_REPORT, MODELCACHE_REPORT)
# What a model cache report may say, and the data each kind carries. Every request ends
# with a "listing": what the cache holds now, which the control plane's catalog follows.
MODELCACHE_KINDS = {
    "filled": ("request_id", "repos"),
    "evicted": ("request_id", "repo_id", "found"),
    "failed": ("request_id", "repo_id", "reason"),
    "listing": ("request_id", "repos"),
}
# What an acceptance report may say, and the data each kind carries.
ACCEPTANCE_KINDS = {
    "started": (),
    "finished": ("result", "network", "seconds"),
    "failed": ("reason",),
}

# What an instance report may say, and the data each kind carries.
REPORT_KINDS = {
    "progress": ("step", "message"),
    # ready_s and ports ({container port: host port}, every published port): optional
    "running": ("port", "host", "container_id", "ready_s", "ports"),
    "failed": ("reason",),
    "stopped": (),
    "removed": (),
    "error": ("action", "reason"),
}

# A heartbeat is worth something as long as it can still tell the host is alive: it is
# recorded with the time the agent sent it, however late the control worker gets to it.
HEARTBEAT_EXPIRES_S = 600

# Live samples over HTTP: each a signed {"host", "sent_at", "sample"} POSTed here, on the
# web tier's public URL. Refused when older than this (a replayed sample is no sample).
TELEMETRY_INGEST_PATH = "agent/telemetry"
TELEMETRY_INGEST_MAX_AGE_S = 30

# --- Redis keys (telemetry) ---------------------------------------------------


def latest_key(host_name: str) -> str:
    """The host's newest sample (expires when its sampler goes quiet)."""
    return f"gpurental:telemetry:latest:{host_name}"


def recent_key(host_name: str) -> str:
    """The host's last few minutes of samples, newest last."""
    return f"gpurental:telemetry:recent:{host_name}"
