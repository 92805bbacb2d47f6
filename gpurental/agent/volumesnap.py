"""A volume's files to and from the operator's object storage (``protocol.VOLUME_SNAPSHOT``,
``VOLUME_RESTORE``): the runtime tars or untars the volume through the engine; this moves
the tar over the presigned URL the control plane sealed for this host, checks its SHA-256,
and reports how it went (``protocol.VOLUME_KINDS``). The tar waits in a temporary file
($TMPDIR) between the engine and the storage: S3 takes an upload of a known length."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
import time

import requests

from gpurental import protocol
from gpurental.agent.runtimes import ContainerRuntimeError

log = logging.getLogger(__name__)
CHUNK = 1024 * 1024
TIMEOUT = (10, 300)  # connect, then seconds without a byte


class _Progress:
    """At most one progress report a second."""

    def __init__(self, report, **ids) -> None:
        self.report, self.ids, self.last = report, ids, 0.0

    def __call__(self, message: str, done: int, total: int | None = None) -> None:
        now = time.monotonic()
        if now - self.last >= 1.0:
            self.last = now
            percent = round(100 * done / total, 1) if total else None
            self.report("progress", **self.ids, message=message, percent=percent)


def _runtime_method(agent, name: str):
    method = getattr(agent.runtime, name, None)
    if method is None:
        raise ContainerRuntimeError(
            "this host runs instances as processes, without a Docker Engine: it has no volumes"
        )
    return method


def _url(agent, payload: dict) -> str:
    secrets = protocol.secrets_open(agent.reporter.keys.spec, payload.get("sealed", ""))
    url = str(secrets.get("object_url", ""))
    if not url.startswith(("https://", "http://")):
        raise ValueError("no object storage URL came with the request")
    return url


class _Upload:
    """The tar file as a request body of a known length (S3 refuses chunked uploads),
    reporting progress as it is read."""

    def __init__(self, f, size: int, progress) -> None:
        self.f, self.size, self.progress, self.done = f, size, progress, 0

    def __len__(self) -> int:
        return self.size

    def read(self, n: int = -1) -> bytes:
        chunk = self.f.read(CHUNK if n is None or n < 0 else n)
        self.done += len(chunk)
        self.progress("uploading", self.done, self.size)
        return chunk


def volume_snapshot_command(agent, payload: dict) -> None:
    snapshot_id = str(payload.get("snapshot_id", ""))
    report = agent.reporter.volume
    try:
        archive = _runtime_method(agent, "volume_archive")
        url = _url(agent, payload)
        progress = _Progress(report, snapshot_id=snapshot_id)
        with tempfile.TemporaryFile(prefix="gpurental-snapshot-") as tar:
            archive(str(payload.get("volume", "")), str(payload.get("helper_image", "")), tar)
            size = tar.tell()
            tar.seek(0)
            digest = hashlib.sha256()
            while chunk := tar.read(CHUNK):
                digest.update(chunk)
            tar.seek(0)
            answer = requests.put(url, data=_Upload(tar, size, progress), timeout=TIMEOUT)
            if answer.status_code >= 300:
                raise ValueError(
                    f"the object storage refused the upload: HTTP {answer.status_code} "
                    f"{answer.text[:300]}"
                )
    except (
        ContainerRuntimeError,
        protocol.SpecRefused,
        ValueError,
        requests.RequestException,
    ) as exc:
        report("snapshot_failed", snapshot_id=snapshot_id, reason=str(exc))
        return
    except Exception as exc:  # noqa: BLE001 - reported, never lost in the worker's log alone
        log.exception("snapshot %s failed", snapshot_id)
        report("snapshot_failed", snapshot_id=snapshot_id, reason=f"the host failed: {exc}")
        return
    report("snapshotted", snapshot_id=snapshot_id, size_bytes=size, sha256=digest.hexdigest())


@contextlib.contextmanager
def fetch_verified(url: str, sha256: str, progress=None):
    """The object at ``url`` in a temporary file (rewound), once its SHA-256 is
    ``sha256``; ValueError otherwise."""
    progress = progress or (lambda *args: None)
    with tempfile.TemporaryFile(prefix="gpurental-restore-") as tar:
        digest = hashlib.sha256()
        with requests.get(url, stream=True, timeout=TIMEOUT) as answer:
            if answer.status_code != 200:
                raise ValueError(
                    f"the object storage refused the download: HTTP {answer.status_code}"
                )
            total = int(answer.headers.get("Content-Length") or 0) or None
            done = 0
            for chunk in answer.iter_content(CHUNK):
                tar.write(chunk)
                digest.update(chunk)
                done += len(chunk)
                progress("downloading", done, total)
        if digest.hexdigest() != sha256:
            raise ValueError(
                "the snapshot's SHA-256 does not match what was uploaded: nothing restored"
            )
        tar.seek(0)
        yield tar


def volume_restore_command(agent, payload: dict) -> None:
    volume_id = str(payload.get("volume_id", ""))
    name = str(payload.get("volume", ""))
    report = agent.reporter.volume
    try:
        unarchive = _runtime_method(agent, "volume_unarchive")
        url = _url(agent, payload)
        progress = _Progress(report, volume_id=volume_id)
        with fetch_verified(url, str(payload.get("sha256", "")), progress) as tar:
            progress("unpacking", 0)
            unarchive(name, volume_id, str(payload.get("helper_image", "")), tar)
    except (
        ContainerRuntimeError,
        protocol.SpecRefused,
        ValueError,
        requests.RequestException,
    ) as exc:
        _drop(agent, name)
        report("restore_failed", volume_id=volume_id, reason=str(exc))
        return
    except Exception as exc:  # noqa: BLE001
        log.exception("restore into %s failed", name)
        _drop(agent, name)
        report("restore_failed", volume_id=volume_id, reason=f"the host failed: {exc}")
        return
    report("restored", volume_id=volume_id)


def _drop(agent, name: str) -> None:
    """A failed restore leaves nothing behind."""
    remove = getattr(agent.runtime, "volume_remove", None)
    if remove is not None and name.startswith("gpurental-vol-"):
        try:
            remove(name)
        except Exception:  # noqa: BLE001 - the failure is what gets reported
            log.warning("could not remove %s after a failed restore", name, exc_info=True)
