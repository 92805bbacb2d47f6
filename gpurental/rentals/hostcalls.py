"""Commands from the control plane to host agents (Celery queue ``host.<name>``), sent
through the host link (``fleet.hostlink.send``: signed, on commit)."""

from __future__ import annotations

import logging

from django.conf import settings

from gpurental import imagerefs, protocol
from gpurental.celery_app import app  # noqa: F401 - the app hostlink sends with (tests patch it)
from gpurental.fleet import hostlink
from gpurental.gateway import sshkeys
from gpurental.images.selectors import (
    is_saved_image,
    platform_registry_auth,
    registry_auth,
)
from gpurental.networks.services import PoolExhausted, private_spec
from gpurental.rentals.models import Instance
from gpurental.rentals.selectors import instance_gpus
from gpurental.rentals.services.clusters import cluster_env
from gpurental.volumes.selectors import volumes_mounted
from gpurental.volumes.snapshots import workspace_source_url

log = logging.getLogger(__name__)


def _send_spec(instance: Instance, task: str) -> None:
    # A start that waited longer than the launch timeout is stale: reconciliation has
    # failed that launch by then, so the agent must not act on it.
    instance_id, host_name = str(instance.id), instance.host.name

    def unsent(error: str) -> None:
        # No agent will hear of this launch: fail it now, not after LAUNCH_TIMEOUT.
        from gpurental.rentals.services.lifecycle import instance_fail_unsent

        instance_fail_unsent(instance_id=instance_id, host_name=host_name, error=error)

    hostlink.send(
        instance.host,
        task,
        expires=settings.LAUNCH_TIMEOUT,
        on_unsent=unsent,
        spec=container_spec(instance),
    )


def _vcpus(instance: Instance) -> int:
    plan = instance.plan
    return min(plan.vcpus, settings.NO_GPU_VCPUS) if instance.without_gpus else plan.vcpus


def _memory_gb(instance: Instance) -> int:
    plan = instance.plan
    return (
        min(plan.memory_gb, settings.NO_GPU_MEMORY_GB) if instance.without_gpus else plan.memory_gb
    )


def container_spec(instance: Instance) -> dict:
    gpus = instance_gpus(instance)
    image, host = instance.image, instance.host
    env = {str(k): str(v) for k, v in (image.env or {}).items()}
    env.update(cluster_env(instance))
    return {
        "spec_version": protocol.SPEC_VERSION,
        "instance_id": str(instance.id),
        "image": instance.image_ref or image.image_for(host.gpu_source),
        # The secrets, for this host's agent only (protocol.spec_open).
        "sealed": hostlink.seal_secrets(host, _secrets(instance)),
        "gpu_indices": [g.index for g in gpus],
        "gpu_uuids": [g.uuid for g in gpus],
        "gpu_source": host.gpu_source,
        "cpu_count": float(_vcpus(instance)),
        "memory_mb": _memory_gb(instance) * 1024,
        "pids_limit": settings.INSTANCE_PIDS_LIMIT,
        "container_port": image.port,
        "http_ports": list(image.http_ports or []),
        "ssh": _ssh(instance),
        "env": env,
        # Whether to mount the host's model cache; the path is the agent's own setting.
        "mount_model_cache": bool(instance.mount_model_cache),
        "command": list(image.command or []),
        **_dedicated(instance),
        **_private_network(instance),
        **_pull(instance),
        **_volumes(instance),
        **_workspace_from(instance),
    }


def _private_network(instance: Instance) -> dict:
    """The account's private network (made at launch; an instance launched before private
    networks gets one here, or runs without it when the pool is spent)."""
    try:
        spec = private_spec(instance)
    except PoolExhausted:
        log.warning("instance %s starts without a private network: the pool is spent", instance.pk)
        return {}
    return {"private_network": spec} if spec else {}


def _volumes(instance: Instance) -> dict:
    mounted = volumes_mounted(instance=instance)
    return {"volumes": mounted} if mounted else {}


def _pull(instance: Instance) -> dict:
    """A customer's own image: the operator's pull policy (its login, if the account saved
    one for the registry, is among the sealed secrets)."""
    if not instance.image_ref:
        return {}
    return {
        "pull": {
            "max_bytes": settings.CUSTOM_IMAGE_MAX_GB * 1024**3,
            "timeout_s": settings.CUSTOM_IMAGE_PULL_TIMEOUT,
        }
    }


def _registry_auth(instance: Instance) -> dict | None:
    """The login the host pulls the instance's own image with: the platform's for a saved
    image (its registry), else the one the account saved for that registry, if any."""
    if not instance.image_ref:
        return None
    reference = imagerefs.parse(instance.image_ref)
    if is_saved_image(reference):
        # Good for the pull (and the check of a cached copy) of this one image only.
        return platform_registry_auth(
            reference.repository,
            ("pull",),
            subject=f"host {instance.host.name}",
            ttl_s=settings.CUSTOM_IMAGE_PULL_TIMEOUT + 600,
        )
    return registry_auth(account_id=instance.user_id, registry=reference.registry)


def _dedicated(instance: Instance) -> dict:
    """On a leased whole host: the host's CPUs and memory, and the dedicated options."""
    if instance.lease_id is None:
        return {}
    from gpurental.baremetal.selectors import dedicated_options  # baremetal imports rentals

    options = dedicated_options(instance.lease)
    return {
        "cpu_count": options.pop("cpu_count"),
        "memory_mb": options.pop("memory_mb"),
        "dedicated": options,
    }


def _ssh(instance: Instance) -> dict | None:
    """sshd inside, for the SSH gateway only: the gateway's key (this run's host key is
    one of the sealed secrets)."""
    if not instance.image.ssh_port or not instance.ssh_host_key:
        return None
    return {"port": instance.image.ssh_port, "authorized_keys": sshkeys.client_public_key()}


def _workspace_from(instance: Instance) -> dict:
    """The snapshot its /workspace starts from (the agent unpacks it into a new workspace
    only), its download URL among the sealed secrets."""
    return {"workspace_from": {"sha256": instance.workspace_from.sha256}} if _from(instance) else {}


def _from(instance: Instance) -> bool:
    return instance.workspace_from_id is not None and instance.workspace_from.status == "ready"


def _secrets(instance: Instance) -> dict:
    secrets = {"token": instance.jupyter_token}
    if _from(instance):
        secrets["object_url"] = workspace_source_url(instance.workspace_from)
    if _ssh(instance) is not None:
        secrets["ssh_host_key"] = instance.ssh_host_key
    if (auth := _registry_auth(instance)) is not None:
        secrets["registry_auth"] = auth
    return secrets


def start(instance: Instance) -> None:
    _send_spec(instance, protocol.START)


def restart(instance: Instance) -> None:
    _send_spec(instance, protocol.RESTART)


def stop(instance: Instance, *, park: bool = False) -> None:
    stop_id(instance.host, str(instance.id), park=park)


def remove(instance: Instance) -> None:
    remove_id(instance.host, str(instance.id))


def _send_id(host, task: str, instance_id: str, **extra) -> None:
    hostlink.send(host, task, instance_id=instance_id, **extra)


def stop_id(host, instance_id: str, *, park: bool = False) -> None:
    """The container stops and stays created, its filesystem as the customer left it, so
    that a stopped instance can be saved as an image (its next start replaces it with a
    fresh one from the image); /workspace stays. ``park`` (a group's warm replica): its
    network sandbox stays up too, so that the next start of the same run only starts the
    container. An agent from before ``keep_container`` removes the container: saving the
    instance then fails with that reason."""
    extra = {"keep_container": True, **({"park": True} if park else {})}
    _send_id(host, protocol.STOP, instance_id, **extra)


def remove_id(host, instance_id: str) -> None:
    """Container and /workspace go."""
    _send_id(host, protocol.REMOVE, instance_id)
