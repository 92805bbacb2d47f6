"""The customer is root in their container, and that root is not the host's: the engine
remaps user namespaces (scripts/docker-engine.sh), and the container keeps only the few
capabilities that package managers and chown need."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from gpurental.agent.runtimes.base import ignore_progress
from gpurental.agent.runtimes.docker import container_name, volume_name
from tests.agent.conftest import skip_unless_ci

pytestmark = pytest.mark.docker


def run(container, command: str) -> tuple[int, str]:
    code, output = container.exec_run(["bash", "-lc", command])
    return code, output.decode(errors="replace").strip()


def put(container, path: Path, into: str = "/tmp") -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(path), arcname=path.name)
    container.put_archive(into, buffer.getvalue())


def a_deb(tmp_path: Path) -> Path:
    """A package of one script, hello-gpr, built here with dpkg-deb."""
    root = tmp_path / "hello-gpr"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: hello-gpr\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: tests <tests@example.com>\nDescription: a test package\n"
    )
    script = root / "usr" / "local" / "bin" / "hello-gpr"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\necho hello from a package\n")
    script.chmod(0o755)
    subprocess.run(  # noqa: S603 - Debian's own tool on our own folder
        ["dpkg-deb", "--build", "--root-owner-group", str(root), str(tmp_path / "hello-gpr.deb")],
        check=True,
        capture_output=True,
    )
    return tmp_path / "hello-gpr.deb"


def a_wheel(tmp_path: Path) -> Path:
    """A pure-Python wheel (gprhello 1.0), written here as the wheel format has it: a zip of
    the package and its .dist-info (METADATA, WHEEL, RECORD)."""
    files = {
        "gprhello/__init__.py": "WHO = 'installed system-wide'\n",
        "gprhello-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: gprhello\nVersion: 1.0\n",
        "gprhello-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + "gprhello-1.0.dist-info/RECORD,,\n"
    path = tmp_path / "gprhello-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
        wheel.writestr("gprhello-1.0.dist-info/RECORD", record)
    return path


def subordinate_start(user: str = "dockremap") -> int:
    for line in Path("/etc/subuid").read_text().splitlines():
        name, start, _ = line.split(":")
        if name == user:
            return int(start)
    raise AssertionError(f"no {user} range in /etc/subuid")


@pytest.fixture(scope="module")
def remapping_engine(docker_runtime):
    if not docker_runtime.remaps_users():
        skip_unless_ci(
            "the Docker Engine does not remap user namespaces: restart it with "
            "--userns-remap=default (scripts/docker-engine.sh does), then make images"
        )
    return docker_runtime


def test_root_inside_is_an_unprivileged_uid_on_the_host(
    remapping_engine, make_spec, cleanup, tmp_path
):
    runtime = remapping_engine
    spec = make_spec()
    runtime.start(spec, ignore_progress)
    cleanup(runtime, spec.instance_id)
    container = runtime.client.containers.get(container_name(spec.instance_id))

    assert run(container, "id -u; id -un") == (0, "0\nroot")
    # On the host, the same process belongs to the remapped range, not to root.
    pid = container.attrs["State"]["Pid"]
    uids = next(
        line.split()[1:]
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Uid:")
    )
    assert {int(uid) for uid in uids} == {subordinate_start()}

    # apt-get installs a package system-wide, and the package works.
    put(container, a_deb(tmp_path))
    code, output = run(container, "apt-get install -y /tmp/hello-gpr.deb && hello-gpr")
    assert code == 0, output
    assert output.endswith("hello from a package")
    assert run(container, "dpkg-query -W -f='${Status}' hello-gpr")[1] == "install ok installed"

    # pip installs into the image's own Python, not a user's site.
    put(container, a_wheel(tmp_path))
    code, output = run(
        container,
        "pip install --no-index -q /tmp/gprhello-*.whl && cd / && "
        "python -c 'import gprhello, sys; print(gprhello.WHO, gprhello.__file__.startswith(sys.prefix))'",
    )
    assert code == 0, output
    assert output.endswith("installed system-wide True")

    # chown works inside; on the host, the file belongs to the remapped range.
    code, output = run(
        container, "touch /workspace/f && chown 4242:4242 /workspace/f && stat -c %u /workspace/f"
    )
    assert (code, output) == (0, "4242")
    volume = runtime.client.volumes.get(volume_name(spec.instance_id))
    assert os.stat(Path(volume.attrs["Mountpoint"]) / "f").st_uid == subordinate_start() + 4242


def test_root_inside_has_no_raw_sockets_mounts_or_network_admin(
    remapping_engine, make_spec, cleanup
):
    runtime = remapping_engine
    spec = make_spec()
    runtime.start(spec, ignore_progress)
    cleanup(runtime, spec.instance_id)
    container = runtime.client.containers.get(container_name(spec.instance_id))
    code, output = run(
        container,
        "python -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'",
    )
    assert code != 0 and "Operation not permitted" in output
    code, output = run(container, "mkdir -p /mnt/x && mount -t tmpfs none /mnt/x")
    assert code != 0 and "permission denied" in output.lower()
    code, output = run(container, "ip link add dummy0 type dummy 2>&1 || echo refused")
    assert output.endswith("refused") or "not permitted" in output.lower() or "not found" in output
    code, output = run(container, "grep CapEff /proc/self/status")
    # Effective: CHOWN (0), DAC_OVERRIDE (1), FOWNER (3), FSETID (4), KILL (5), SETGID (6),
    # SETUID (7), SYS_CHROOT (18), and nothing else (capability numbers of linux/capability.h).
    wanted = sum(1 << bit for bit in (0, 1, 3, 4, 5, 6, 7, 18))
    assert int(output.split()[1], 16) == wanted, output
