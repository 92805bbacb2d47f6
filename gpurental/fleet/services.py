"""Hosts: joining with a token, heartbeats, inventory. Status changes: ``fleet.lifecycle``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import secrets
from datetime import UTC, datetime

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

from gpurental import protocol
from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.agent.sampler import telemetry_url_from_broker
from gpurental.catalog.models import GPUModel
from gpurental.fleet import broker, drivers, hostlink, signals
from gpurental.fleet.lifecycle import host_mark_online
from gpurental.fleet.models import GPU, GPUSource, Host, HostStatus

log = logging.getLogger(__name__)

# An HGX board's topology with a dozen NICs is ~3 KB; far more is not a topology.
TOPOLOGY_MAX_BYTES = 64 * 1024


def host_token_matches(*, host: Host, token: str) -> bool:
    return hostlink.token_matches(host=host, token=token)


def host_join_command(*, host: Host, token: str) -> str:
    """The command an operator runs on the GPU server to start its agent."""
    if broker.accounts_enabled():
        # Production: the host's own broker account, Docker by name, and nothing else.
        url = broker.agent_broker_url(host_name=host.name, password=token)
        ingest = f"{settings.PUBLIC_URL.rstrip('/')}/{protocol.TELEMETRY_INGEST_PATH}"
        # amqps://: the agent checks the broker against the same CA (copied to the host).
        ca = settings.AGENT_BROKER_CA_FILE or settings.BROKER_SSL_CA_FILE
        ca = ca if url.startswith("amqps://") else ""
        ca = f"GPURENTAL_BROKER_CA_FILE='{ca}' " if ca else ""
        return (
            f"GPURENTAL_BROKER_URL='{url}' {ca}GPURENTAL_TELEMETRY_URL='{ingest}' "
            f"GPURENTAL_HOST_NAME='{host.name}' GPURENTAL_HOST_TOKEN='{token}' "
            "GPURENTAL_RUNTIME='docker' python -m gpurental.agent"
        )
    broker_url = settings.CELERY_BROKER_URL
    # The agent derives the channel layer (live telemetry) from a Redis broker; when that
    # is not the web's channel layer (a RabbitMQ broker, another Redis), it is told.
    layer = settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0]
    layer = layer["address"] if isinstance(layer, dict) else layer
    derived = telemetry_url_from_broker(broker_url)
    telemetry = "" if derived == layer else f"GPURENTAL_TELEMETRY_URL='{layer}' "
    return (
        f"GPURENTAL_BROKER_URL='{broker_url}' {telemetry}GPURENTAL_HOST_NAME='{host.name}' "
        f"GPURENTAL_HOST_TOKEN='{token}' python -m gpurental.agent"
    )


@transaction.atomic
def host_create(
    *,
    name: str,
    address: str = "127.0.0.1",
    gpu_source: str = GPUSource.SIMULATED,
    actor: User | None = None,
) -> tuple[Host, str]:
    """Create a host; returns it and its join token (shown once, stored hashed)."""
    token = secrets.token_urlsafe(32)
    host = Host.objects.create(
        name=name, address=address, gpu_source=gpu_source, **hostlink.host_credentials(token)
    )
    audit_record(action="host.create", actor=actor, obj=host)
    if broker.accounts_enabled():  # refused by the broker: no host either (rolled back)
        broker.broker_account_ensure(host_name=host.name, password=token)
    return host, token


@transaction.atomic
def host_rotate_token(*, host: Host, actor: User | None = None) -> str:
    token = secrets.token_urlsafe(32)
    credentials = hostlink.host_credentials(token)
    Host.objects.filter(pk=host.pk).update(**credentials)
    for key, value in credentials.items():
        setattr(host, key, value)
    audit_record(action="host.rotate_token", actor=actor, obj=host)
    if broker.accounts_enabled():
        broker.broker_account_ensure(host_name=host.name, password=token)
    return token


@transaction.atomic
def host_simulated_gpus_ensure(*, host: Host, model: GPUModel, count: int) -> list[GPU]:
    """Give a simulated host ``count`` GPUs of ``model`` (fully NVLink-connected, like an SXM board)."""
    gpus = []
    for index in range(count):
        peers = [i for i in range(count) if i != index]
        gpu, _ = GPU.objects.update_or_create(
            host=host,
            index=index,
            defaults={
                "uuid": f"GPU-sim-{host.name}-{index}",
                "model": model,
                "memory_mb": model.memory_gb * 1024,
                "nvlink_peers": peers if model.nvlink_bandwidth_gbs else [],
            },
        )
        gpus.append(gpu)
    return gpus


def host_heartbeat_receive(*, message: dict, now: datetime) -> Host:
    """A heartbeat as it comes off the control queue: verified, then recorded."""
    host, beat = hostlink.receive(message=message, what="heartbeat", now=now)
    inventory, containers = beat.get("inventory"), beat.get("containers")
    topology = beat.get("topology")
    if not isinstance(topology, dict) or len(json.dumps(topology)) > TOPOLOGY_MAX_BYTES:
        topology = None  # a host is less trusted than the control plane: bounded, or not kept
    return host_heartbeat_record(
        host=host,
        inventory=None if inventory is None else list(inventory),
        topology=topology,
        containers=None if containers is None else dict(containers),
        containers_listed_at=beat.get("containers_listed_at"),
        workspaces=beat.get("workspaces"),
        images=beat.get("images"),
        volumes=beat.get("volumes"),
        runtime=str(beat.get("runtime", "")),
        gpu_source=str(beat.get("gpu_source", "")),
        agent_version=str(beat.get("agent_version", "")),
        sent_at=beat.get("sent_at"),
        now=now,
    )


def _gpu_models_by_nvml_name() -> dict[str, GPUModel]:
    mapping = {}
    for model in GPUModel.objects.all():
        for nvml_name in model.nvml_names or []:
            mapping[nvml_name] = model
    return mapping


def host_inventory_sync(*, host: Host, inventory: list[dict]) -> None:
    """Make the host's GPU rows match what the agent reports (only what changed is written)."""
    models = _gpu_models_by_nvml_name()
    existing = {gpu.index: gpu for gpu in host.gpus.all()}
    seen = set()
    for item in inventory:
        model = models.get(item["name"])
        if model is None:
            log.warning(
                "host %s reports unknown GPU model %r: add it to a GPU model's NVML names",
                host.name,
                item["name"],
            )
            continue
        seen.add(item["index"])
        wanted = {
            "uuid": item["uuid"],
            "model_id": model.pk,  # the id: comparing `gpu.model` would read each GPU's model
            "memory_mb": item["memory_mb"],
            "nvlink_peers": list(item.get("nvlink_peers") or []),
        }
        gpu = existing.get(item["index"])
        if gpu is None:
            GPU.objects.create(host=host, index=item["index"], **wanted)
        elif any(getattr(gpu, k) != v for k, v in wanted.items()):
            for key, value in wanted.items():
                setattr(gpu, key, value)
            gpu.save(update_fields=list(wanted))
    gone = [index for index, gpu in existing.items() if index not in seen and gpu.is_enabled]
    if gone and inventory:
        GPU.objects.filter(host=host, index__in=gone).update(is_enabled=False)
        audit_record(action="host.gpus_missing", obj=host, changes={"indices": gone})


def host_heartbeat_record(
    *,
    host: Host,
    inventory: list[dict] | None,
    containers: dict[str, str] | None,
    runtime: str,
    gpu_source: str,
    agent_version: str,
    sent_at: float | None,
    now: datetime,
    containers_listed_at: float | None = None,
    workspaces: dict[str, int] | None = None,
    topology: dict | None = None,
    images: list | None = None,
    volumes: dict | None = None,
) -> Host:
    """Record a verified heartbeat: sync GPUs; reconcile the host's containers.

    The beat's own time (when the agent sent it) is the host's liveness, however late it is
    read. The inventory and container list come when the agent has them (None otherwise),
    each judged by the time it was taken. What the beat means for instances (their
    containers, their workspaces) and for a joining host's benchmark is decided by the
    receivers of ``signals.heartbeat_recorded`` (rentals, acceptance)."""
    observed_at = _agent_time(sent_at, now) if sent_at else now
    status = _liveness_record(
        host,
        observed_at=observed_at,
        runtime=runtime[:16],
        agent_version=agent_version[:32],
        gpu_source=gpu_source if gpu_source in GPUSource.values else None,
    )
    if status is None:
        return host  # an older beat overtaken by a newer one: nothing to learn
    if status == HostStatus.OFFLINE:
        host = host_mark_online(host=host)
    if topology is not None and topology != host.topology:
        with transaction.atomic():
            host = Host.objects.select_for_update().get(pk=host.pk)
            if topology != host.topology:
                old_fabric = (host.topology or {}).get("fabric")
                host.topology = topology
                host.driver_version, host.driver_cuda = drivers.driver_of(topology)
                host.save(update_fields=["topology", "driver_version", "driver_cuda"])
                audit_record(
                    action="host.topology",
                    obj=host,
                    changes={"fabric": [old_fabric, topology.get("fabric")]},
                )
    if inventory is not None and _inventory_changed(host, inventory):
        with transaction.atomic():
            host = Host.objects.select_for_update().get(pk=host.pk)  # one sync at a time
            host_inventory_sync(host=host, inventory=inventory)
        _inventory_synced(host, inventory)
    listed_at = _agent_time(containers_listed_at, now) if containers_listed_at else observed_at
    signals.heartbeat_recorded.send(
        sender=Host,
        host=host,
        inventory=inventory,
        containers=containers,
        containers_listed_at=listed_at,
        workspaces=workspaces if isinstance(workspaces, dict) else None,
        images=images if isinstance(images, list) else None,
        volumes=volumes if isinstance(volumes, dict) else None,
        now=now,
    )
    return host


def _liveness_record(
    host: Host, *, observed_at: datetime, runtime: str, agent_version: str, gpu_source: str | None
) -> str | None:
    """The beat's liveness in one statement (no lock held for the rest of the beat): the
    host's status, or None when a newer beat was recorded already. The update's row lock
    orders it with reconciliation, which judges silence under the host's lock."""
    table = Host._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET last_heartbeat_at = %s, runtime = %s, agent_version = %s, "  # noqa: S608 - the model's own table name
            "gpu_source = COALESCE(%s, gpu_source) "
            "WHERE id = %s AND (last_heartbeat_at IS NULL OR last_heartbeat_at <= %s) "
            "RETURNING status",
            [observed_at, runtime, agent_version, gpu_source, host.pk, observed_at],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    host.last_heartbeat_at, host.runtime, host.agent_version = observed_at, runtime, agent_version
    if gpu_source:
        host.gpu_source = gpu_source
    return row[0]


# An inventory the host sent before, unchanged, is not compared with the GPU rows again on
# every beat: its digest is kept this long (then the next beat syncs it once more, which
# also puts back what someone changed in the rows by hand).
INVENTORY_RECHECK_S = 600


def _inventory_key(host: Host) -> str:
    return f"fleet:inventory:{host.pk}"


def _inventory_digest(inventory: list[dict]) -> str:
    return hashlib.sha256(json.dumps(inventory, sort_keys=True).encode()).hexdigest()


def _inventory_changed(host: Host, inventory: list[dict]) -> bool:
    try:
        return cache.get(_inventory_key(host)) != _inventory_digest(inventory)
    except Exception:  # noqa: BLE001 - without the cache, every beat syncs as before
        return True


def _inventory_synced(host: Host, inventory: list[dict]) -> None:
    with contextlib.suppress(Exception):  # the next beat syncs again: no harm
        cache.set(_inventory_key(host), _inventory_digest(inventory), INVENTORY_RECHECK_S)


def _agent_time(timestamp: float, now: datetime) -> datetime:
    """A time the agent sent, never later than now (its clock may run ahead)."""
    return min(datetime.fromtimestamp(timestamp, tz=UTC), now)
