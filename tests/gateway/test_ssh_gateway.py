"""The SSH gateway for real: OpenSSH's client → gateway process → the instance's sshd in a
container launched by a real agent on a real Docker Engine.

The gateway runs as its own process on the test database, as in production.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest

from gpurental.accounts.services import ssh_key_add
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.testing.agent_process import wait_for
from tests.gateway.conftest import SSH, keypair, ssh
from tests.stack import _free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_owner_runs_commands_and_forwards_ports_others_are_refused(
    agent, catalog, alice, bob, ssh_gateway, ssh_keys_dir, tmp_path
):
    model, image = catalog
    alice_key, alice_pub = keypair(ssh_keys_dir, "alice")
    bob_key, bob_pub = keypair(ssh_keys_dir, "bob")
    stranger_key, _ = keypair(ssh_keys_dir, "stranger")
    ssh_key_add(user=alice, public_key=alice_pub)
    ssh_key_add(user=bob, public_key=bob_pub)
    instance = lc.instance_launch(user=alice, image=image, gpu_model=model, gpu_count=1)
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == InstanceStatus.RUNNING,
        90,
        "the instance to run",
        agent,
    )
    instance.refresh_from_db()
    iid = str(instance.pk)
    known_hosts = tmp_path / "known_hosts"

    # The owner's key: a command runs in the container, as root, with its exit status.
    done = ssh(
        ssh_gateway,
        iid,
        alice_key,
        "echo hello from $(hostname); id -un; echo oops >&2; exit 7",
        known_hosts=known_hosts,
    )
    assert done.returncode == 7, done
    assert done.stdout.splitlines() == [f"hello from gpurental-{iid[:8]}", "root"], done
    assert "oops" in done.stderr
    assert "127.0.0.1" in known_hosts.read_text()  # the gateway's own host key, kept

    # stdin reaches the command.
    piped = subprocess.run(  # noqa: S603
        [
            SSH, "-F", "/dev/null", "-p", str(ssh_gateway), "-i", alice_key,
            "-o", f"UserKnownHostsFile={known_hosts}", "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", f"{iid}@127.0.0.1", "wc -c",
        ],
        input="x" * 100_000,
        capture_output=True,
        text=True,
        timeout=60,
    )  # fmt: skip
    assert piped.returncode == 0 and piped.stdout.strip() == "100000", piped

    # A shell with a pty.
    tty = ssh(ssh_gateway, iid, alice_key, "-tt", "tty; echo $TERM", known_hosts=known_hosts)
    assert tty.returncode == 0, tty
    assert "/dev/pts/" in tty.stdout

    # Another customer's key, an unknown key and no key at all are refused alike.
    for key in (bob_key, stranger_key):
        refused = ssh(ssh_gateway, iid, key, "true", known_hosts=known_hosts)
        assert refused.returncode == 255 and "Permission denied" in refused.stderr, refused
    # Bob's key on a made-up instance id: the same answer, nothing tells what exists.
    made_up = ssh(
        ssh_gateway, "00000000-0000-4000-8000-000000000000", bob_key, "true",
        known_hosts=known_hosts,
    )  # fmt: skip
    assert made_up.returncode == 255 and "Permission denied" in made_up.stderr

    # Passwords and keyboard-interactive are not offered at all.
    password = ssh(
        ssh_gateway, iid, None, "true",
        known_hosts=known_hosts, auth="password,keyboard-interactive",
    )  # fmt: skip
    assert password.returncode == 255, password
    assert "Permission denied (publickey)" in password.stderr, password.stderr

    # ssh -L: a port inside the container (JupyterLab's 8888, on the container's loopback)
    # reached through the gateway and the container's sshd.
    local = _free_port()
    forward = subprocess.Popen(  # noqa: S603
        [
            SSH, "-F", "/dev/null", "-p", str(ssh_gateway), "-i", alice_key, "-N",
            "-o", f"UserKnownHostsFile={known_hosts}", "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes", "-o", "ExitOnForwardFailure=yes",
            "-L", f"127.0.0.1:{local}:localhost:8888", f"{iid}@127.0.0.1",
        ],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        def jupyter_answers():
            assert forward.poll() is None, forward.stderr.read()
            request = urllib.request.Request(
                f"http://127.0.0.1:{local}/api/status",
                headers={"Authorization": f"token {instance.jupyter_token}"},
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310
                    return answer.status == 200 and b"started" in answer.read()
            except OSError:
                return False

        wait_for(jupyter_answers, 30, "JupyterLab through ssh -L")
    finally:
        forward.terminate()
        forward.wait(10)

    # ssh -R is refused.
    remote = ssh(
        ssh_gateway, iid, alice_key, "-o", "ExitOnForwardFailure=yes",
        "-R", "127.0.0.1:0:127.0.0.1:22", "true", known_hosts=known_hosts,
    )  # fmt: skip
    assert remote.returncode == 255, remote

    log = ssh_gateway_log(tmp_path)
    assert f"ssh login: {iid} by alice@example.com" in log
    assert "ssh refused" in log

    # Once stopped, the owner's key is refused too.
    lc.instance_stop(instance=instance)
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == InstanceStatus.STOPPED,
        60,
        "the instance to stop",
        agent,
    )
    stopped = ssh(ssh_gateway, iid, alice_key, "true", known_hosts=known_hosts)
    assert stopped.returncode == 255 and "Permission denied" in stopped.stderr


def ssh_gateway_log(tmp_path) -> str:
    time.sleep(0.5)  # the last lines are written as connections close
    return (tmp_path / "sshd.log").read_text()
