"""Volume snapshots on this Docker Engine and a real S3 API server (moto's, on 127.0.0.1):
a volume of N GB of random files is snapshotted and restored the way a host agent does it
(``gpurental/agent/volumesnap.py``: the tar through the engine's archive API into $TMPDIR,
its SHA-256, a PUT to a presigned URL; then a GET, the digest checked, the tar unpacked
into a new volume), against ``cp -a`` of the same files on the same disk.

    python bench/snapshot.py [--size-gb 5] [--smoke]

What it prints: each step's seconds and MB/s, and the whole snapshot and restore against
``cp``. moto keeps the objects in this process's memory, so the storage side is as fast as
this machine's memory; a real object store adds its network.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HELPER_IMAGE = "gpurental/jupyter-cpu:latest"
MB = 1024**2


def rate(nbytes: int, seconds: float) -> str:
    return f"{seconds:7.2f} s  {nbytes / MB / max(seconds, 1e-9):8.1f} MB/s"


class Reporter:
    """Stands in for the agent's reporter: keeps what would go to the control plane."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, dict]] = []

    def volume(self, kind: str, **data) -> None:
        self.reports.append((kind, data))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=5.0)
    parser.add_argument("--files", type=int, default=8, help="the data is split in this many files")
    parser.add_argument("--smoke", action="store_true", help="64 MB, to check it runs")
    args = parser.parse_args()
    size = int((0.0625 if args.smoke else args.size_gb) * 1024 * MB)

    import boto3
    import docker
    from moto.server import ThreadedMotoServer

    from gpurental.agent.runtimes.docker import DockerRuntime

    client = docker.from_env()
    runtime = DockerRuntime(client=client, ready_timeout_s=60)
    source = f"gpurental-vol-{uuid.uuid4()}"
    target = f"gpurental-vol-{uuid.uuid4()}"
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-snapshot-"))
    try:
        host, port = server.get_host_and_port()
        s3 = boto3.client(
            "s3",
            endpoint_url=f"http://{host}:{port}",
            region_name="us-east-1",
            aws_access_key_id="bench",
            aws_secret_access_key="bench-secret",  # noqa: S106 - moto's, in this process
        )
        s3.create_bucket(Bucket="snapshots")

        def url(method: str) -> str:
            return s3.generate_presigned_url(
                method, Params={"Bucket": "snapshots", "Key": "bench.tar"}, ExpiresIn=3600
            )

        # The data: random files written inside a container, as a customer's would be.
        client.volumes.create(source)
        each = size // args.files
        started = time.perf_counter()
        client.containers.run(
            HELPER_IMAGE,
            [
                "sh",
                "-c",
                f"for i in $(seq {args.files}); do head -c {each} /dev/urandom > /v/f$i; done; sync",
            ],
            entrypoint=[],
            volumes={source: {"bind": "/v", "mode": "rw"}},
            network_disabled=True,
            remove=True,
        )
        print(
            f"data: {args.files} files, {each * args.files / MB:.0f} MB written in "
            f"{time.perf_counter() - started:.1f} s"
        )
        data_bytes = each * args.files

        mountpoint = client.volumes.get(source).attrs["Mountpoint"]
        copy_dir = work / "cp"
        started = time.perf_counter()
        subprocess.run(["cp", "-a", mountpoint, str(copy_dir)], check=True)  # noqa: S603,S607
        subprocess.run(["sync"], check=True)  # noqa: S603,S607
        cp_s = time.perf_counter() - started
        print(f"cp -a on this disk          {rate(data_bytes, cp_s)}")

        # Snapshot: tar through the engine, digest, upload.
        import requests

        from gpurental.agent.volumesnap import upload
        from gpurental.volumes import objectstore

        with tempfile.TemporaryFile(dir=work) as tar:
            started = time.perf_counter()
            runtime.volume_archive(source, HELPER_IMAGE, tar)
            tar_s = time.perf_counter() - started
            tar_bytes = tar.tell()
            tar.seek(0)
            started = time.perf_counter()
            digest = hashlib.sha256()
            while chunk := tar.read(MB):
                digest.update(chunk)
            sha_s = time.perf_counter() - started
            tar.seek(0)
            started = time.perf_counter()
            plan = objectstore.presign_upload(
                s3,
                "snapshots",
                "bench.tar",
                most_bytes=tar_bytes,
                part_min_bytes=64 * objectstore.MiB,
            )
            upload(tar, tar_bytes, plan, lambda *a: None)
            put_s = time.perf_counter() - started
        snap_s = tar_s + sha_s + put_s
        print(f"snapshot: tar via the engine {rate(tar_bytes, tar_s)}")
        print(f"          sha256            {rate(tar_bytes, sha_s)}")
        print(
            f"          upload (parts)    {rate(tar_bytes, put_s)}  ({len(plan['parts'])} × {plan['part_size'] // MB} MB presigned)"
        )
        print(f"          whole             {rate(data_bytes, snap_s)}  ({snap_s / cp_s:.1f}× cp)")

        # Restore: download, digest, unpack into a new volume.
        with tempfile.TemporaryFile(dir=work) as tar:
            started = time.perf_counter()
            check = hashlib.sha256()
            with requests.get(url("get_object"), stream=True, timeout=600) as answer:
                answer.raise_for_status()
                for chunk in answer.iter_content(MB):
                    tar.write(chunk)
                    check.update(chunk)
            get_s = time.perf_counter() - started
            assert check.hexdigest() == digest.hexdigest(), "the digest changed on the way"
            tar.seek(0)
            started = time.perf_counter()
            runtime.volume_unarchive(target, str(uuid.uuid4()), HELPER_IMAGE, tar)
            untar_s = time.perf_counter() - started
        restore_s = get_s + untar_s
        print(f"restore:  download+sha256   {rate(tar_bytes, get_s)}")
        print(f"          unpack via engine {rate(tar_bytes, untar_s)}")
        print(
            f"          whole             {rate(data_bytes, restore_s)}  ({restore_s / cp_s:.1f}× cp)"
        )

        same = (
            client.containers.run(
                HELPER_IMAGE,
                [
                    "sh",
                    "-c",
                    "cd /a && sha256sum f* > /tmp/s && cd /b && sha256sum -c /tmp/s >/dev/null && echo same",
                ],
                entrypoint=[],
                volumes={
                    source: {"bind": "/a", "mode": "ro"},
                    target: {"bind": "/b", "mode": "ro"},
                },
                network_disabled=True,
                remove=True,
            )
            .decode()
            .strip()
        )
        print(f"restored files: {same or 'DIFFERENT'}")
        return 0 if same == "same" else 1
    finally:
        server.stop()
        for name in (source, target):
            with contextlib.suppress(docker.errors.NotFound):
                client.volumes.get(name).remove(force=True)
        subprocess.run(["rm", "-rf", str(work)], check=False)  # noqa: S603,S607


if __name__ == "__main__":
    sys.exit(main())
