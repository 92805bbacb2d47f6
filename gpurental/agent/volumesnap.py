"""A volume's files to and from the operator's object storage (``protocol.VOLUME_SNAPSHOT``,
``VOLUME_RESTORE``): the runtime tars or untars the volume through the engine; this moves
the tar over the presigned URLs the control plane sealed for this host (an upload in parts,
then its completion; its abort on a failure), checks its SHA-256, and reports how it went
(``protocol.VOLUME_KINDS``). The tar waits in a temporary file ($TMPDIR) between the engine
and the storage: S3 takes parts of a known length."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import tempfile
import time
from xml.sax.saxutils import escape

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


def _secrets(agent, payload: dict) -> dict:
    return protocol.secrets_open(agent.reporter.keys.spec, payload.get("sealed", ""))


def _checked_url(url) -> str:
    url = str(url or "")
    if not url.startswith(("https://", "http://")):
        raise ValueError("no object storage URL came with the request")
    return url


def _url(agent, payload: dict) -> str:
    return _checked_url(_secrets(agent, payload).get("object_url"))


class _Part:
    """``length`` bytes of the tar file from where it stands, as a request body of a known
    length (S3 refuses chunked uploads), counting what is read into ``sent``."""

    def __init__(self, f, length: int, sent: list[int], progress, total: int) -> None:
        self.f, self.left, self.sent, self.progress, self.total = f, length, sent, progress, total
        self.length = length

    def __len__(self) -> int:
        return self.length

    def read(self, n: int = -1) -> bytes:
        want = self.left if n is None or n < 0 else min(n, self.left)
        chunk = self.f.read(min(want, CHUNK))
        self.left -= len(chunk)
        self.sent[0] += len(chunk)
        self.progress("uploading", self.sent[0], self.total)
        return chunk


def upload(tar, size: int, plan: dict, progress) -> None:
    """The first ``size`` bytes of ``tar`` up in parts over the plan's presigned URLs
    (``volumes.snapshots._upload_urls``), then the upload completed; aborted on a failure,
    so that no part is left to be paid for."""
    part_size, urls = int(plan.get("part_size") or 0), list(plan.get("parts") or [])
    complete, abort = _checked_url(plan.get("complete")), _checked_url(plan.get("abort"))
    try:
        if part_size <= 0 or not urls:
            raise ValueError("the upload came without its parts")
        needed = max(1, -(-size // part_size))
        if needed > len(urls):
            raise ValueError(
                f"the snapshot is {size / 1024**3:.2f} GB, more than the "
                f"{len(urls) * part_size / 1024**3:.2f} GB its upload was planned for: the "
                "volume holds more than its size"
            )
        sent, etags = [0], []
        for number in range(1, needed + 1):
            tar.seek((number - 1) * part_size)
            length = min(part_size, size - (number - 1) * part_size)
            body = _Part(tar, length, sent, progress, size)
            answer = requests.put(_checked_url(urls[number - 1]), data=body, timeout=TIMEOUT)
            if answer.status_code >= 300 or not answer.headers.get("ETag"):
                raise ValueError(
                    f"the object storage refused part {number} of {needed}: HTTP "
                    f"{answer.status_code} {answer.text[:300]}"
                )
            etags.append(answer.headers["ETag"])
        parts = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(etag)}</ETag></Part>"
            for n, etag in enumerate(etags, 1)
        )
        answer = requests.post(
            complete,
            data=f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode(),
            timeout=TIMEOUT,
        )
        # S3 may answer a completion 200 and put its error in the body.
        if answer.status_code >= 300 or b"<Error>" in answer.content:
            raise ValueError(
                f"the object storage refused to complete the upload: HTTP "
                f"{answer.status_code} {answer.text[:300]}"
            )
    except (ValueError, requests.RequestException):
        with contextlib.suppress(requests.RequestException):
            requests.delete(abort, timeout=TIMEOUT)
        raise


def volume_snapshot_command(agent, payload: dict) -> None:
    snapshot_id = str(payload.get("snapshot_id", ""))
    report = agent.reporter.volume
    try:
        archive = _runtime_method(agent, "volume_archive")
        plan = _secrets(agent, payload).get("upload")
        if not isinstance(plan, dict):
            raise ValueError("no object storage upload came with the request")
        progress = _Progress(report, snapshot_id=snapshot_id)
        with tempfile.TemporaryFile(prefix="gpurental-snapshot-") as tar:
            archive(str(payload.get("volume", "")), str(payload.get("helper_image", "")), tar)
            size = tar.tell()
            tar.seek(0)
            digest = hashlib.sha256()
            while chunk := tar.read(CHUNK):
                digest.update(chunk)
            upload(tar, size, plan, progress)
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
