"""The agent's side of a snapshot's multipart upload (agent/volumesnap.py) against a real
S3 API server (moto's, on 127.0.0.1): parts over presigned URLs, then the completion; a tar
larger than the upload was planned for, or a part the storage refuses, aborts it and
leaves nothing to pay for."""

from __future__ import annotations

import contextlib
import tempfile

import pytest

from gpurental.agent.volumesnap import upload
from gpurental.volumes.objectstore import MiB, presign_upload


@pytest.fixture
def s3(object_storage_s3):
    return object_storage_s3


@contextlib.contextmanager
def a_file(size: int):
    with tempfile.TemporaryFile() as f:
        f.write(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        yield f


def pending(s3, key: str) -> list:
    return s3.list_multipart_uploads(Bucket="snapshots", Prefix=key).get("Uploads", [])


def test_parts_then_the_completion_make_the_object(s3):
    size = 11 * MiB + 3
    plan = presign_upload(s3, "snapshots", "t/ok.tar", most_bytes=20 * MiB, part_min_bytes=5 * MiB)
    assert (plan["part_size"], len(plan["parts"])) == (5 * MiB, 4)
    seen: list[tuple[int, int | None]] = []
    with a_file(size) as tar:
        upload(tar, size, plan, lambda message, done, total=None: seen.append((done, total)))
        tar.seek(0)
        expected = tar.read()
    body = s3.get_object(Bucket="snapshots", Key="t/ok.tar")["Body"].read()
    assert body == expected
    assert s3.head_object(Bucket="snapshots", Key="t/ok.tar")["ETag"].endswith('-3"')
    assert seen[-1] == (size, size) and not pending(s3, "t/ok.tar")


def test_a_tar_larger_than_planned_is_refused_and_the_upload_aborted(s3):
    plan = presign_upload(s3, "snapshots", "t/big.tar", most_bytes=5 * MiB, part_min_bytes=5 * MiB)
    assert pending(s3, "t/big.tar")
    with a_file(6 * MiB) as tar, pytest.raises(ValueError, match="more than the 0.00 GB its"):
        upload(tar, 6 * MiB, plan, lambda *a: None)
    assert not pending(s3, "t/big.tar")


def test_a_refused_part_aborts_the_upload(s3):
    plan = presign_upload(s3, "snapshots", "t/bad.tar", most_bytes=5 * MiB, part_min_bytes=5 * MiB)
    # moto checks no signature; an upload id it does not know it refuses (NoSuchUpload).
    plan["parts"] = [plan["parts"][0].replace("uploadId=", "uploadId=gone")]
    s3_refuses = "refused part 1 of 1"
    with a_file(MiB) as tar, pytest.raises(ValueError, match=s3_refuses):
        upload(tar, MiB, plan, lambda *a: None)
    assert not pending(s3, "t/bad.tar")
