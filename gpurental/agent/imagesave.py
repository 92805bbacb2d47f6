"""Saving an instance's container as an image (``protocol.IMAGE_SAVE``): the runtime
commits and pushes it (``DockerRuntime.save_image``); this reports how it went
(``protocol.IMAGE_KINDS``), with the push's progress at most once a second."""

from __future__ import annotations

import logging
import time

from gpurental import protocol
from gpurental.agent.runtimes import ContainerRuntimeError
from gpurental.agent.runtimes.base import check_instance_id

log = logging.getLogger(__name__)


def image_save_command(agent, payload: dict) -> None:
    image_id = str(payload.get("saved_image_id", ""))
    report = agent.reporter.image
    try:
        instance_id = check_instance_id(str(payload.get("instance_id", "")))
        secrets = protocol.secrets_open(agent.reporter.keys.spec, payload.get("sealed", ""))
        auth = secrets.get("registry_auth") or None
        save = getattr(agent.runtime, "save_image", None)
        if save is None:
            raise ContainerRuntimeError(
                "this host runs instances as processes, without a Docker Engine: there is "
                "no container to save"
            )
        last = [0.0]

        def progress(message: str, percent: float | None = None) -> None:
            now = time.monotonic()
            if now - last[0] >= 1.0:
                last[0] = now
                report("progress", saved_image_id=image_id, message=message, percent=percent)

        size, digest = save(instance_id, str(payload.get("reference", "")), auth, progress)
    except (ContainerRuntimeError, protocol.SpecRefused, ValueError) as exc:
        report("failed", saved_image_id=image_id, reason=str(exc))
        return
    except Exception as exc:  # noqa: BLE001 - reported, never lost in the worker's log alone
        log.exception("saving image %s failed", image_id)
        report("failed", saved_image_id=image_id, reason=f"the host failed to save it: {exc}")
        return
    report("saved", saved_image_id=image_id, size_bytes=size, digest=digest)
