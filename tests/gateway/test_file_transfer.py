"""Files in and out through the SSH gateway, with the same keys as SSH: scp (over SFTP, and
the legacy protocol), sftp and rsync -e ssh, to /workspace and to a volume."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess

import pytest

from gpurental.accounts.services import ssh_key_add
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.testing.agent_process import wait_for
from gpurental.volumes.services import volume_create
from tests.gateway.conftest import keypair, ssh

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_scp_sftp_and_rsync_move_files_to_the_workspace_and_a_volume(
    agent, catalog, alice, ssh_gateway, ssh_keys_dir, tmp_path
):
    for tool in ("scp", "sftp", "rsync"):
        if shutil.which(tool) is None:
            pytest.skip(f"no {tool} here (apt-get install openssh-client rsync)")
    model, image = catalog
    key, public = keypair(ssh_keys_dir, "alice")
    ssh_key_add(user=alice, public_key=public)
    volume_create(account=alice, name="data", size_gb=1, host=agent.host, actor=alice)
    instance = lc.instance_launch(
        user=alice, image=image, gpu_model=model, gpu_count=1, volumes=[("data", "/data")]
    )
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == InstanceStatus.RUNNING,
        90,
        "the instance to run",
        agent,
    )
    iid, known = str(instance.pk), tmp_path / "known_hosts"
    ssh_opts = [
        "-F", "/dev/null", "-i", key, "-o", f"UserKnownHostsFile={known}",
        "-o", "StrictHostKeyChecking=accept-new", "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
    ]  # fmt: skip
    source = tmp_path / "payload.bin"
    source.write_bytes(os.urandom(3 * 1024 * 1024))

    def run(*command):
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)  # noqa: S603
        assert done.returncode == 0, done
        return done

    # scp over SFTP (OpenSSH's default) into /workspace, legacy scp into the volume.
    run("scp", *ssh_opts, "-P", str(ssh_gateway), str(source), f"{iid}@127.0.0.1:/workspace/in.bin")
    run(
        "scp", "-O", *ssh_opts, "-P", str(ssh_gateway), str(source), f"{iid}@127.0.0.1:/data/in.bin"
    )
    sums = ssh(ssh_gateway, iid, key, "sha256sum /workspace/in.bin /data/in.bin", known_hosts=known)
    assert [line.split()[0] for line in sums.stdout.splitlines()] == [sha256(source)] * 2, sums

    # sftp gets it back.
    batch = tmp_path / "batch"
    batch.write_text(f"get /data/in.bin {tmp_path / 'back.bin'}\n")
    run("sftp", *ssh_opts, "-P", str(ssh_gateway), "-b", str(batch), f"{iid}@127.0.0.1")
    assert sha256(tmp_path / "back.bin") == sha256(source)

    # rsync -e ssh, a folder both ways.
    folder = tmp_path / "folder"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.txt").write_text("a\n")
    (folder / "b.txt").write_text("b\n")
    rsh = " ".join(["ssh", *ssh_opts, "-p", str(ssh_gateway)])
    run("rsync", "-a", "-e", rsh, f"{folder}/", f"{iid}@127.0.0.1:/data/folder/")
    run("rsync", "-a", "-e", rsh, f"{iid}@127.0.0.1:/data/folder/", str(tmp_path / "again"))
    assert (tmp_path / "again" / "sub" / "a.txt").read_text() == "a\n"
    assert (tmp_path / "again" / "b.txt").read_text() == "b\n"
