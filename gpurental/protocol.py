"""The contract between the control plane and the host agents. Django-free: both sides
import it, and ``tests/test_protocol.py`` holds both sides to it.

- Commands go to the host's queue ``host.<name>``: start and restart carry a versioned
  start spec, stop and remove carry an instance id.
- Reports go to the ``reports`` queue (on RabbitMQ through the ``reports`` topic
  exchange, routing key ``report.<host>``, the only one a host's account may write), each
  with the host's name, the time it was sent and a nonce: the heartbeat (liveness, with
  the latest inventory and container list when the agent has them), an instance report
  of one of ``REPORT_KINDS``, and telemetry rollups. The control worker runs only the
  tasks of ``CONTROL_TASKS`` from there, each once (``gpurental/fleet/hostlink.py``).
- Redis keys the agent's sampler writes and the web tier reads.

A spec of a version the agent does not know is refused with a reason the customer sees,
never half-understood.

Keys. Both sides start from the host's root, the SHA-256 of its join token: the agent
computes it from its token, the control plane keeps it encrypted (never the token). From
the root, HKDF derives two keys with distinct labels (``host_keys``): the signing key,
an HMAC-SHA256 over each message's canonical JSON, both ways; and the spec key, a
Fernet key that seals a start spec's secrets (the JupyterLab token, the sshd host key)
for that host alone. A message with a wrong signature, or naming another host, is
refused on either side.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
from dataclasses import dataclass

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

# --- signing ------------------------------------------------------------------


class Forged(ValueError):
    """A message whose signature does not match, or that names another host."""


def host_root(token: str) -> str:
    """The secret both sides derive a host's keys from: the SHA-256 of its join token."""
    return hashlib.sha256(token.encode()).hexdigest()


def _derive(root: str, label: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(root.encode())


@dataclass(frozen=True)
class HostKeys:
    sign: str  # HMAC key of every message between the control plane and the host
    spec: bytes  # Fernet key of the secrets in the host's start specs


def host_keys(root: str) -> HostKeys:
    """A host's keys from its root (``host_root``); each label gives an unrelated key."""
    return HostKeys(
        sign=_derive(root, b"gpurental host signing key v1").hex(),
        spec=base64.urlsafe_b64encode(_derive(root, b"gpurental host spec key v1")),
    )


def host_key(token: str) -> str:
    """The signing key of the host whose join token this is (what its agent signs with)."""
    return host_keys(host_root(token)).sign


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
# Where every host's reports go. On RabbitMQ a topic exchange: a host's account may write
# only there, and a topic permission limits it to its own routing key ``report.<name>``.
REPORTS_QUEUE = "reports"
REPORTS_EXCHANGE = "reports"


def host_queue(host_name: str) -> str:
    return f"host.{host_name}"


def report_routing_key(host_name: str) -> str:
    return f"report.{host_name}"


def is_amqp(broker_url: str) -> bool:
    return broker_url.startswith(("amqp://", "amqps://", "pyamqp://"))


def report_route(broker_url: str, host_name: str) -> dict:
    """How an agent addresses the reports queue. On RabbitMQ through the ``reports``
    exchange with its own routing key (the only publishing its account may do); elsewhere
    (the single-box Redis, where there are no accounts) by the queue's name."""
    if is_amqp(broker_url):
        return {"exchange": REPORTS_EXCHANGE, "routing_key": report_routing_key(host_name)}
    return {"queue": REPORTS_QUEUE}


def broker_ssl(*, ca_file: str = "", cert_file: str = "", key_file: str = "") -> dict:
    """The TLS options of an ``amqps://`` broker (Celery's ``broker_use_ssl``): the broker's
    certificate checked against ``ca_file`` (the system's CAs without one) and its name
    against the URL's host; a client certificate when RabbitMQ asks for one."""
    if bool(cert_file) != bool(key_file):
        raise ValueError("a client certificate needs both its certificate and its key file")
    options = {
        "ca_certs": ca_file or ssl.get_default_verify_paths().openssl_cafile,
        "cert_reqs": ssl.CERT_REQUIRED,
        "server_hostname": None,  # kombu puts the URL's host here: the name is checked
    }
    if cert_file:
        options.update(certfile=cert_file, keyfile=key_file)
    return options


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
# Save an instance's container as an image (gpurental/images/): {"saved_image_id",
# "instance_id", "reference", "sealed"} in, the push's login sealed ({"registry_auth"}) for
# that host; IMAGE_REPORT's kinds out.
IMAGE_SAVE = "gpurental.agent.image_save"
# Remove a deleted volume's data (gpurental/volumes/): {"volume": "gpurental-vol-<id>"}.
VOLUME_REMOVE = "gpurental.agent.volume_remove"
# A volume's files to and from the operator's object storage (gpurental/volumes/snapshots.py):
# {"snapshot_id", "volume", "helper_image", "sealed"} with a presigned multipart upload
# sealed ({"upload": {"part_size", "parts", "complete", "abort"}}) for the host; {"volume_id", "volume", "sha256", "helper_image", "sealed"}
# with the download URL to restore one into a new volume. VOLUME_REPORT's kinds out.
VOLUME_SNAPSHOT = "gpurental.agent.volume_snapshot"
VOLUME_RESTORE = "gpurental.agent.volume_restore"
AGENT_TASKS = (
    START,
    RESTART,
    STOP,
    REMOVE,
    ACCEPTANCE_RUN,
    MODELCACHE,
    IMAGE_SAVE,
    VOLUME_REMOVE,
    VOLUME_SNAPSHOT,
    VOLUME_RESTORE,
)

SPEC_VERSION = 4
# Every field of a version-4 start spec (version 1 carried a host path to mount; version 2
# had no extra ports and no SSH; version 3 carried its secrets in clear); ``spec_version``
# says which set it is.
SPEC_FIELDS = frozenset(
    {
        "spec_version",
        "instance_id",
        "image",
        "sealed",  # the secrets (SPEC_SECRETS), sealed with the host's spec key (spec_seal)
        "gpu_indices",
        "gpu_uuids",
        "gpu_source",
        "cpu_count",
        "memory_mb",
        "pids_limit",
        "container_port",
        "http_ports",  # other HTTP ports the image declares, reached through the gateway
        "ssh",  # None, or {"port", "authorized_keys"}: sshd inside, for the SSH gateway
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
# ``pull``: None, or for a customer's own image (gpurental/imagerefs.py) the operator's
# policy {"max_bytes": int, "timeout_s": int}: the agent pulls it (with the account's
# login, the sealed "registry_auth", when one was saved), reports the pull's progress,
# and refuses an image larger than max_bytes.
# ``volumes``: the customer's volumes to mount, [{"name": "gpurental-vol-<id>", "path",
# "volume": id}]; the agent makes each Docker volume the first time.
# ``workspace_from``: {"sha256"} of a snapshot (gpurental/volumes/snapshots.py) to unpack
# into the instance's /workspace when the host makes it (its first start there); the
# download URL comes sealed ("object_url").
# ``private_network``: the account's private network (gpurental/networks), {"index": int,
# "subnet": "10.192.3.0/24", "names": ["train-0.internal", "<id>.internal"]}: the agent
# joins the container to that bridge under those names.
OPTIONAL_SPEC_FIELDS = frozenset(
    {"dedicated", "pull", "volumes", "workspace_from", "private_network"}
)


class SpecRefused(ValueError):
    """A start spec the agent cannot act on; the message is for the customer."""


# A spec's secrets travel only inside its "sealed" field: "token" (JupyterLab's) always,
# "ssh_host_key" (the private key of the container's sshd) when it has SSH,
# "registry_auth" ({"username", "password", "serveraddress"}) for a customer's image from
# a registry the account saved a login for. Outside a spec, the same seal carries a
# snapshot's presigned URLs: "object_url" (a download), "upload" (a multipart upload).
SPEC_SECRETS = ("token", "ssh_host_key", "registry_auth", "object_url", "upload")


def spec_seal(key: bytes, secrets: dict) -> str:
    """The secrets of a start spec, readable only with the host's spec key."""
    unknown = set(secrets) - set(SPEC_SECRETS)
    if unknown:
        raise ValueError(f"not a spec secret: {sorted(unknown)}")
    return Fernet(key).encrypt(json.dumps(secrets).encode()).decode()


def spec_open(key: bytes, spec: dict) -> dict:
    """The spec with its secrets unsealed in place: ``token``, ``ssh["host_key"]`` when it
    has SSH, ``pull["auth"]`` (None without a login) for a customer's image; SpecRefused when this host's key cannot open them."""
    try:
        secrets = json.loads(Fernet(key).decrypt(str(spec.get("sealed", "")).encode()))
    except (InvalidToken, ValueError) as exc:
        raise SpecRefused(
            "the start spec's secrets are not sealed for this host (its join token changed?): "
            "nothing was started"
        ) from exc
    opened = {k: v for k, v in spec.items() if k != "sealed"}
    opened["token"] = str(secrets.get("token", ""))
    if opened.get("ssh"):
        opened["ssh"] = {**opened["ssh"], "host_key": str(secrets.get("ssh_host_key", ""))}
    if opened.get("pull"):
        auth = secrets.get("registry_auth")
        opened["pull"] = {**opened["pull"], "auth": auth if isinstance(auth, dict) else None}
    if opened.get("workspace_from"):
        url = str(secrets.get("object_url", ""))
        opened["workspace_from"] = {**opened["workspace_from"], "url": url}
    return opened


def secrets_open(key: bytes, sealed: str) -> dict:
    """Secrets sealed for this host (``spec_seal``) outside a start spec; SpecRefused when
    this host's key cannot open them."""
    try:
        secrets = json.loads(Fernet(key).decrypt(str(sealed).encode()))
    except (InvalidToken, ValueError) as exc:
        raise SpecRefused("the secrets are not sealed for this host") from exc
    return secrets if isinstance(secrets, dict) else {}


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
# Every report carries "sent_at" (the agent's clock) and a "nonce": the control plane
# refuses one sent more than REPORT_MAX_AGE_S ago or REPORT_MAX_AHEAD_S ahead of its
# clock, and one it has seen before (a replay).
REPORT_MAX_AGE_S = 3600
REPORT_MAX_AHEAD_S = 300

HEARTBEAT = "gpurental.fleet.tasks.host_heartbeat"
INSTANCE_REPORT = "gpurental.rentals.tasks.instance_report"
TELEMETRY = "gpurental.telemetry.tasks.telemetry_record"
ACCEPTANCE_REPORT = "gpurental.acceptance.tasks.acceptance_report"
MODELCACHE_REPORT = "gpurental.modelcache.tasks.modelcache_report"
IMAGE_REPORT = "gpurental.rentals.tasks.image_report"
VOLUME_REPORT = "gpurental.volumes.tasks.volume_report"
# The only tasks the control plane runs from a host: the allow-list of the reports queue.
CONTROL_TASKS = (
    HEARTBEAT,
    INSTANCE_REPORT,
    TELEMETRY,
    ACCEPTANCE_REPORT,
    MODELCACHE_REPORT,
    IMAGE_REPORT,
    VOLUME_REPORT,
)
# What a report about saving an image (IMAGE_SAVE) may say, and the data each carries.
IMAGE_KINDS = {
    "progress": ("saved_image_id", "message", "percent"),
    "saved": ("saved_image_id", "size_bytes", "digest"),
    "failed": ("saved_image_id", "reason"),
}
# What a report about a snapshot or a restore (VOLUME_SNAPSHOT, VOLUME_RESTORE) may say.
VOLUME_KINDS = {
    "progress": ("snapshot_id", "volume_id", "message", "percent"),
    "snapshotted": ("snapshot_id", "size_bytes", "sha256"),
    "snapshot_failed": ("snapshot_id", "reason"),
    "restored": ("volume_id",),
    "restore_failed": ("volume_id", "reason"),
}
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
    # pull: while a customer's image is pulled, {"layers", "layers_done", "bytes", "total",
    # "percent"} (optional)
    "progress": ("step", "message", "pull"),
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
