"""The SSH gateway's fixtures: OpenSSH's client, key pairs, and the gateway process on the
test database (tests/gateway/test_ssh_gateway.py, test_file_transfer.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest
from django.conf import settings as django_settings

from gpurental.testing.agent_process import wait_for
from tests.stack import _free_port, database_url

SSH = shutil.which("ssh") or "/usr/bin/ssh"


def keypair(directory, name) -> tuple[str, str]:
    """(private key path, public key line), made by ssh-keygen."""
    path = directory / name
    subprocess.run(  # noqa: S603
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],  # noqa: S607
        check=True,
    )
    return str(path), (directory / f"{name}.pub").read_text().strip()


@pytest.fixture
def ssh_keys_dir(tmp_path, settings):
    if not os.path.exists(SSH):
        pytest.skip("no OpenSSH client (apt-get install openssh-client)")
    directory = tmp_path / "ssh"
    directory.mkdir(mode=0o700)
    # The platform (the control worker, in this process) and the gateway process must share
    # the gateway's client key: its public half goes into each container's authorized_keys.
    settings.SSH_GATEWAY_CLIENT_KEY = str(directory / "gateway_client")
    return directory


@pytest.fixture
def ssh_gateway(ssh_keys_dir, agent, tmp_path):
    """The SSH gateway process on a free port of 127.0.0.1; yields the port."""
    from django.db import connection

    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "REDIS_URL": django_settings.REDIS_URL,
        "SSH_GATEWAY_CLIENT_KEY": str(ssh_keys_dir / "gateway_client"),
        "SSH_GATEWAY_HOST_KEY": str(ssh_keys_dir / "gateway_host"),
    }
    log_path = tmp_path / "sshd.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(  # noqa: S603
        [
            sys.executable,
            "-m",
            "gpurental.gateway.sshd",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def listening():
        assert proc.poll() is None, log_path.read_text()
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        wait_for(listening, 60, "the SSH gateway to listen")
        proc.log_path = log_path
        yield port
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def ssh(port, user, key, *args, known_hosts, auth="publickey", timeout=60):
    """Run OpenSSH's client with no config of its own; returns the CompletedProcess."""
    command = [
        SSH,
        "-F",
        "/dev/null",
        "-p",
        str(port),
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        f"PreferredAuthentications={auth}",
        "-o",
        "ConnectTimeout=20",
    ]
    if key:
        command += ["-i", key]
    command += [f"{user}@127.0.0.1", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)  # noqa: S603
