"""Moving files in and out of an instance, as customers do, against a plain copy here:

- JupyterLab's upload (the contents API in 1 MiB base64 chunks, as its file browser sends
  a large file) and download (``GET /files/<name>``), through the instance gateway (the
  one-time link's cookie, ``Host: <id>.gw.localhost``) and direct on the instance's port;
- ``scp``, ``sftp`` and ``rsync -e ssh`` through the SSH gateway, with the customer's key;
- ``cp`` of the same file on this machine's disk, the baseline.

    .venv/bin/python bench/transfer.py [--size-mb 2048] [--smoke]

Needs a Docker Engine and the images; starts the platform as bench/launch.py does, plus
the SSH gateway process. Each transfer's SHA-256 is checked. Prints seconds and MB/s per
way; never a goal, only figures.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import setup_django  # noqa: E402
from bench.gateway import launch_running  # noqa: E402
from bench.launch import Platform, check, free_port, gateway_enter, gateway_env  # noqa: E402

CHUNK = 1024 * 1024  # JupyterLab's upload chunk
MB = 1_000_000


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(4 * CHUNK):
            digest.update(block)
    return digest.hexdigest()


def rate(nbytes: int, seconds: float) -> str:
    return f"{seconds:8.2f} s  {nbytes / MB / max(seconds, 1e-9):8.1f} MB/s"


class Jupyter:
    """JupyterLab's contents and files APIs over one kept-alive connection."""

    def __init__(self, name: str, port: int, headers: dict[str, str], origin: str | None):
        self.name, self.headers = name, headers
        self.changing = {**headers, **({"Origin": origin} if origin else {})}
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def upload(self, source: Path, target: str) -> None:
        """As JupyterLab's file browser uploads a large file: chunk 1, 2, …, then -1."""
        size = source.stat().st_size
        with source.open("rb") as f:
            number, sent = 1, 0
            while True:
                block = f.read(CHUNK)
                sent += len(block)
                last = sent >= size
                body = json.dumps(
                    {
                        "type": "file",
                        "format": "base64",
                        "name": target,
                        "path": target,
                        "chunk": -1 if last else number,
                        "content": base64.b64encode(block).decode(),
                    }
                )
                self.conn.request(
                    "PUT",
                    f"/api/contents/{target}",
                    body=body,
                    headers={**self.changing, "Content-Type": "application/json"},
                )
                answer = self.conn.getresponse()
                text = answer.read()
                check(
                    answer.status in (200, 201),
                    f"upload chunk {number} via {self.name}: {answer.status} {text[:200]!r}",
                )
                if last:
                    return
                number += 1

    def delete(self, name: str) -> None:
        """Room in /workspace for the next transfer (the plan's disk_gb is enforced)."""
        self.conn.request("DELETE", f"/api/contents/{name}", headers=self.changing)
        answer = self.conn.getresponse()
        answer.read()
        check(answer.status == 204, f"delete via {self.name}: {answer.status}")

    def download(self, name: str, out: Path) -> None:
        self.conn.request("GET", f"/files/{name}", headers=self.headers)
        answer = self.conn.getresponse()
        check(answer.status == 200, f"download via {self.name}: {answer.status}")
        with out.open("wb") as f:
            while block := answer.read(4 * CHUNK):
                f.write(block)


def start_ssh_gateway(work: Path, port: int) -> subprocess.Popen:
    log = open(work / "sshd.log", "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen(  # noqa: S603 - our own module
        [
            sys.executable,
            "-m",
            "gpurental.gateway.sshd",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=os.environ.copy(),
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        check(proc.poll() is None, "the SSH gateway exited: see sshd.log")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    raise SystemExit("the SSH gateway did not listen in 60 s")


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)  # noqa: S603
    check(done.returncode == 0, f"{command[0]} failed: {done.stderr[-500:]}")
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=2048)
    parser.add_argument("--smoke", action="store_true", help="16 MB, to check every path works")
    args = parser.parse_args()
    size = (16 if args.smoke else args.size_mb) * MB
    for tool in ("scp", "sftp", "rsync", "ssh-keygen"):
        check(
            shutil.which(tool) is not None, f"no {tool} here (apt-get install openssh-client rsync)"
        )
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-transfer-"))
    keys = work / "ssh"
    keys.mkdir(mode=0o700)
    for name in ("gateway_client", "gateway_host", "customer"):
        subprocess.run(  # noqa: S603
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],  # noqa: S607
            check=True,
        )
    from gpurental import embedded

    platform = sshd = instance_id = None
    try:
        ssh_port = free_port()
        setup_django(
            work / "var",
            **gateway_env(),
            SSH_GATEWAY_CLIENT_KEY=str(keys / "gateway_client"),
            SSH_GATEWAY_HOST_KEY=str(keys / "gateway_host"),
            SSH_GATEWAY_PORT=str(ssh_port),
        )
        from gpurental.accounts.services import ssh_key_add
        from gpurental.gateway import routes, tickets

        platform = Platform(work)
        platform.image.ssh_port = 2222  # sshd in the image, reached through the SSH gateway
        platform.image.save(update_fields=["ssh_port"])
        ssh_key_add(user=platform.user, public_key=(keys / "customer.pub").read_text().strip())
        platform.start()
        sshd = start_ssh_gateway(work, ssh_port)
        instance = launch_running(platform)
        instance_id = str(instance.pk)
        upstream = routes.route_for(instance_id).upstream(None)
        host, cookie = gateway_enter(
            platform.gateway_url, tickets.connect(user=platform.user, instance=instance).url
        )
        ways = [
            Jupyter(
                "gateway",
                platform.gateway_port,
                {"Host": host, "Cookie": cookie},
                routes.origin(instance.pk),
            ),
            Jupyter(
                "direct", upstream[1], {"Authorization": f"token {instance.jupyter_token}"}, None
            ),
        ]

        source = work / "payload.bin"
        with source.open("wb") as f:
            for _ in range(size // CHUNK):
                f.write(os.urandom(CHUNK))
            f.write(os.urandom(size % CHUNK))
        want = sha256_file(source)
        print(f"transfer benchmark: {size / MB:.0f} MB of random data, instance {instance_id}")
        results: list[tuple[str, float]] = []

        started = time.perf_counter()
        shutil.copyfile(source, work / "copy.bin")
        os.sync()
        results.append(("cp on this disk", time.perf_counter() - started))
        (work / "copy.bin").unlink()

        for way in ways:
            name = f"up-{way.name}.bin"
            started = time.perf_counter()
            way.upload(source, name)
            results.append((f"JupyterLab upload, {way.name}", time.perf_counter() - started))
            back = work / f"down-{way.name}.bin"
            started = time.perf_counter()
            way.download(name, back)
            results.append((f"JupyterLab download, {way.name}", time.perf_counter() - started))
            check(sha256_file(back) == want, f"the file came back changed via {way.name}")
            back.unlink()
            way.delete(name)

        opts = [
            "-F", "/dev/null", "-i", str(keys / "customer"),
            "-o", f"UserKnownHostsFile={work / 'known_hosts'}", "-o", "StrictHostKeyChecking=accept-new",
            "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        ]  # fmt: skip
        remote = f"{instance_id}@127.0.0.1"
        results.append(("scp upload, SSH gateway", timed(["scp", *opts, "-P", str(ssh_port), str(source), f"{remote}:/workspace/scp.bin"])))  # fmt: skip
        results.append(("scp download, SSH gateway", timed(["scp", *opts, "-P", str(ssh_port), f"{remote}:/workspace/scp.bin", str(work / "scp.bin")])))  # fmt: skip
        check(sha256_file(work / "scp.bin") == want, "scp changed the file")

        def remove(path: str) -> None:
            timed(["ssh", *opts, "-p", str(ssh_port), remote, f"rm -f {path}"])

        remove("/workspace/scp.bin")
        batch = work / "batch"
        batch.write_text(
            f"put {source} /workspace/sftp.bin\nget /workspace/sftp.bin {work / 'sftp.bin'}\n"
        )
        results.append(("sftp up and down, SSH gateway", timed(["sftp", *opts, "-P", str(ssh_port), "-b", str(batch), remote])))  # fmt: skip
        check(sha256_file(work / "sftp.bin") == want, "sftp changed the file")
        remove("/workspace/sftp.bin")
        rsh = " ".join(["ssh", *opts, "-p", str(ssh_port)])
        results.append(("rsync upload, SSH gateway", timed(["rsync", "-a", "-e", rsh, str(source), f"{remote}:/workspace/rsync.bin"])))  # fmt: skip
        results.append(("rsync download, SSH gateway", timed(["rsync", "-a", "-e", rsh, f"{remote}:/workspace/rsync.bin", str(work / "rsync.bin")])))  # fmt: skip
        check(sha256_file(work / "rsync.bin") == want, "rsync changed the file")
    finally:
        if sshd is not None:
            sshd.terminate()
            sshd.wait(20)
        if platform is not None:
            if instance_id is not None:
                platform.terminate(instance_id)
            platform.stop()
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)

    baseline = results[0][1]
    print(f"{'':<32} {'seconds':>10} {'MB/s':>13}  (× cp, per direction)")
    for name, seconds in results:
        directions = 2 if name.startswith("sftp") else 1
        per = seconds / directions
        print(f"{name:<32} {rate(size * directions, seconds)}  ({per / baseline:5.1f}× cp)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
