"""Presigned multipart uploads to S3-compatible object storage, with boto3 and nothing of
Django (the benches use it as the control plane does).

S3 takes at most 5 GiB in one PUT, and parts of 5 MiB to 5 GiB, at most 10,000 of them.
An upload is planned for the most it may carry: parts of ``part_min_bytes``, made larger
rather than more than ``PARTS_PLANNED``, each presigned ahead, so that the host that
uploads never holds the storage's keys."""

from __future__ import annotations

MiB = 1024**2
GiB = 1024**3
PART_MAX = 5 * GiB  # S3's largest part
PARTS_PLANNED = 1000  # more parts than this are made larger instead
URL_EXPIRES_S = 6 * 3600  # a 5 GiB upload at 1 MB/s still fits
URL_EXPIRES_MAX_S = 7 * 24 * 3600  # the longest a SigV4 presigned URL lives
SLOWEST_BYTES_S = 10 * 1000**2  # the parts presigned at the start must last at this rate


class TooLarge(ValueError):
    pass


def upload_plan(most_bytes: int, part_min_bytes: int) -> tuple[int, int]:
    """(part size, parts) for an upload of at most ``most_bytes``."""
    part = max(part_min_bytes, -(-most_bytes // PARTS_PLANNED))
    part = -(-part // MiB) * MiB
    if part > PART_MAX:
        raise TooLarge(f"{most_bytes} bytes need parts over 5 GiB")
    return part, max(1, -(-most_bytes // part))


def url_lifetime(most_bytes: int) -> int:
    """Seconds the presigned URLs of an upload of at most ``most_bytes`` live: 6 h, or as
    long as it takes at ``SLOWEST_BYTES_S``, at most 7 days."""
    return min(URL_EXPIRES_MAX_S, max(URL_EXPIRES_S, most_bytes // SLOWEST_BYTES_S))


def abort_uploads(s3, bucket: str, key: str) -> int:
    """Abort whatever multipart uploads of ``key`` are unfinished (their parts are paid
    for until then); how many."""
    uploads = s3.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", [])
    for upload in uploads:
        if upload["Key"] == key:
            s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"])
    return len([u for u in uploads if u["Key"] == key])


def presign_upload(s3, bucket: str, key: str, *, most_bytes: int, part_min_bytes: int) -> dict:
    """Start a multipart upload of ``key`` and presign its parts, its completion and its
    abort: {"part_size", "parts": [url, …], "complete", "abort"} (what
    ``gpurental.agent.volumesnap.upload`` takes)."""
    part, count = upload_plan(most_bytes, part_min_bytes)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    expires = url_lifetime(most_bytes)
    params = {"Bucket": bucket, "Key": key, "UploadId": upload_id}

    def sign(method: str, **more) -> str:
        return s3.generate_presigned_url(method, Params={**params, **more}, ExpiresIn=expires)

    return {
        "part_size": part,
        "parts": [sign("upload_part", PartNumber=n) for n in range(1, count + 1)],
        "complete": sign("complete_multipart_upload"),
        "abort": sign("abort_multipart_upload"),
    }
