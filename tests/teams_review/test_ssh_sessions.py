"""An SSH session through the gateway into a team's instance, after its member is removed.

The SSH gateway runs in this process (``sshd.serve``) in front of a stand-in for the
container's sshd (asyncssh, running ``cat``); who may log in is ``sshroutes.ssh_login``,
replaced here by a switch, as the team's membership would answer it."""

import asyncio
import contextlib
import uuid

import asyncssh
import pytest

from gpurental.gateway import sshd, sshkeys
from gpurental.gateway.sshroutes import Upstream
from gpurental.rentals.events import state_channel, state_redis


class Cat(asyncssh.SSHServer):
    def begin_auth(self, username):
        return True


async def _cat(process):
    async for line in process.stdin:
        process.stdout.write(line)
    process.exit(0)


@pytest.mark.backend
def test_a_removed_members_open_ssh_session_ends(tmp_path, monkeypatch, settings):
    """Found by this review (fixed in bb0ebad), a leak: the SSH gateway asks ``ssh_login`` (the
    owner's keys, and for a team's instance the keys of its members with role member or
    higher) once, at login. Nothing asks again: a member removed from the team, or demoted
    to viewer, keeps every SSH session (a shell in the team's container, port forwards) they
    have open, for as long as they keep it open. The HTTP gateway closes such websockets now
    (42e9aa9), woken on the instance's state channel; the SSH gateway does not listen to it."""
    settings.SSH_GATEWAY_CLIENT_KEY = str(tmp_path / "client")
    instance_id = str(uuid.uuid4())
    allowed = {"now": True}
    container_key = asyncssh.generate_private_key("ssh-ed25519")
    member_key = asyncssh.generate_private_key("ssh-ed25519")

    async def scenario():
        gateway_client = asyncssh.import_private_key(sshkeys.client_private_key())
        container = await asyncssh.create_server(
            Cat,
            "127.0.0.1",
            0,
            server_host_keys=[container_key],
            authorized_client_keys=asyncssh.import_authorized_keys(
                gateway_client.export_public_key().decode()
            ),
            process_factory=_cat,
        )
        upstream = Upstream(
            instance_id=instance_id,
            user_email="erin@example.com",
            key_id=uuid.uuid4(),
            key_fingerprint="SHA256:x",
            address="127.0.0.1",
            port=container.sockets[0].getsockname()[1],
            host_public_key=container_key.export_public_key().decode(),
        )
        monkeypatch.setattr(sshd, "_login", lambda user, line: upstream if allowed["now"] else None)
        gateway = await sshd.serve(host="127.0.0.1", port=0, host_key=tmp_path / "host")
        port = gateway.sockets[0].getsockname()[1]
        try:
            async with asyncssh.connect(
                "127.0.0.1",
                port,
                username=instance_id,
                client_keys=[member_key],
                known_hosts=None,
                agent_path=None,
                config=None,
            ) as conn:
                process = await conn.create_process("cat")
                process.stdin.write("hello\n")
                assert await asyncio.wait_for(process.stdout.readline(), 10) == "hello\n"

                allowed["now"] = False  # removed from the team (or demoted to viewer)
                await asyncio.to_thread(state_redis().publish, state_channel(instance_id), "x")
                ended = False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait_closed(), 5)
                    ended = True
                assert ended, "the session into the team's instance is still open"
        finally:
            gateway.close()
            container.close()

    asyncio.run(scenario())
