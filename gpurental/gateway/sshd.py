"""The SSH gateway: ``ssh -p 2222 <instance id>@<gateway>`` reaches the instance's sshd.

    python -m gpurental.gateway.sshd [--host H] [--port P]

- Customers log in with a public key only (no password, no keyboard-interactive), as the
  instance's id; a key is accepted if it is one of the instance owner's and the instance
  runs (``sshroutes.ssh_login``). Every other case is the same refusal. A connection may
  try MAX_AUTH_TRIES keys, then it is closed.
- The gateway then logs in to the container's sshd, published on the instance's host
  (bind address, never public), as the container's user (``sshroutes.container_user``,
  root) with its own client key, and trusts only this run's host key. Customers' keys never reach a host.
- Sessions (shell with a pty, exec, sftp and other subsystems) are relayed channel to
  channel, with window changes, signals and exit statuses. ``ssh -L`` (direct-tcpip) is
  opened by the container's sshd, inside the container's network: never from the gateway
  host itself. Remote forwarding (``ssh -R``), agent and X11 forwarding are refused.
- Access is asked again whenever the instance's state channel speaks (a state change, a
  team's membership change: ``teams.services``, a person's credentials revoked:
  ``accounts.services.account_credentials_revoke``): a connection whose key ``ssh_login``
  now refuses (a member removed or demoted below member, the instance stopped), or whose
  key holder's credentials generation has moved on since it logged in, is closed.
- One person may hold at most SSH_GATEWAY_MAX_CONNECTIONS_PER_USER logged-in connections
  through this gateway process at once, and one instance at most
  SSH_GATEWAY_MAX_CONNECTIONS_PER_INSTANCE; past either, the new one is disconnected with a
  message naming the cap (as the HTTP gateway's ``limits``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import os
from collections import defaultdict
from pathlib import Path

import asyncssh

log = logging.getLogger("gpurental.gateway.ssh")

UPSTREAM_CONNECT_TIMEOUT = 15  # seconds; the host is on the platform's own network
LOGIN_TIMEOUT = 60
MAX_AUTH_TRIES = 10  # (user name, key) pairs per connection, as OpenSSH's MaxAuthTries
STATE_PATTERN = "gpurental:instance-state:*"  # rentals.events.state_channel
LISTEN_READY_TIMEOUT = 3  # seconds serve() waits for the state feed before answering anyway

# Open, logged-in connections by instance id: what a state change asks about again.
_open: dict[str, set[GatewayServer]] = defaultdict(set)
_followers: set[asyncio.Task] = set()


def key_line(key: asyncssh.SSHKey) -> str:
    """``<algorithm> <base64>``, the form SSHKey.public_key is stored in."""
    return f"{key.algorithm.decode()} {base64.b64encode(key.public_data).decode()}"


def gateway_host_key(path: Path) -> asyncssh.SSHKey:
    """The gateway's own host key, made on first use (mode 0600)."""
    from gpurental.gateway import sshkeys

    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another gateway process made it first
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(sshkeys.new_private_key())
    return asyncssh.import_private_key(path.read_text())


def _login(instance_id: str, line: str):
    from django.db import close_old_connections

    from gpurental.gateway.sshroutes import ssh_login

    close_old_connections()
    try:
        return ssh_login(instance_id=instance_id, public_key_line=line)
    finally:
        close_old_connections()


# --- sessions ----------------------------------------------------------------------------


class _UpstreamSession(asyncssh.SSHClientSession):
    """The container's side of a relayed session: what it says goes to the customer."""

    def __init__(self, down: _DownstreamSession):
        self._down = down
        self._exit: tuple | None = None

    def data_received(self, data, datatype):
        self._down.chan.write(data, datatype)

    def eof_received(self):
        self._down.chan.write_eof()
        return True

    def exit_status_received(self, status):
        self._exit = ("status", status)

    def exit_signal_received(self, signal, core_dumped, msg, lang):
        self._exit = ("signal", signal, core_dumped, msg, lang)

    def pause_writing(self):
        self._down.chan.pause_reading()

    def resume_writing(self):
        self._down.chan.resume_reading()

    def connection_lost(self, exc):
        chan = self._down.chan
        if self._exit and self._exit[0] == "status":
            chan.exit(self._exit[1])
        elif self._exit:
            chan.exit_with_signal(*self._exit[1:])
        else:
            chan.close()


class _DownstreamSession(asyncssh.SSHServerSession):
    """The customer's side of a session: collects what they ask for (pty, command,
    subsystem), then opens the same on the container's sshd and relays both ways."""

    def __init__(self, gateway: GatewayServer):
        self._gateway = gateway
        self.chan: asyncssh.SSHServerChannel | None = None
        self._up: asyncssh.SSHClientChannel | None = None
        self._pending: list[tuple] = []  # what the customer sent before upstream was open
        self._pty: tuple | None = None
        self._command: str | None = None
        self._subsystem: str | None = None

    def connection_made(self, chan):
        self.chan = chan

    def pty_requested(self, term_type, term_size, term_modes):
        self._pty = (term_type, term_size, term_modes)
        return True

    def shell_requested(self):
        return True

    def exec_requested(self, command):
        self._command = command
        return True

    def subsystem_requested(self, subsystem):
        self._subsystem = subsystem
        return True

    def session_started(self):
        asyncio.ensure_future(self._open_upstream())

    async def _open_upstream(self):
        kwargs = {}
        if self._pty is not None:
            term_type, term_size, term_modes = self._pty
            kwargs.update(term_type=term_type, term_size=term_size, term_modes=term_modes)
        env = self.chan.get_environment()
        try:
            upstream = await self._gateway.upstream()
            self._up, _ = await upstream.create_session(
                lambda: _UpstreamSession(self),
                command=self._command,
                subsystem=self._subsystem,
                env=dict(env) if env else (),
                encoding=None,
                **kwargs,
            )
        except (OSError, asyncssh.Error) as exc:
            log.warning("ssh session on %s failed upstream: %s", self._gateway.instance_id, exc)
            self.chan.write_stderr(b"gpurental: the instance's sshd does not answer; try again\r\n")
            self.chan.exit(255)
            return
        for action, *args in self._pending:
            getattr(self, action)(*args)
        self._pending.clear()

    def data_received(self, data, datatype):
        if self._up is None:
            self._pending.append(("data_received", data, datatype))
        else:
            self._up.write(data, datatype)

    def eof_received(self):
        if self._up is None:
            self._pending.append(("eof_received",))
        else:
            self._up.write_eof()
        return True

    def terminal_size_changed(self, width, height, pixwidth, pixheight):
        if self._up is None:
            self._pty = self._pty and (
                self._pty[0],
                (width, height, pixwidth, pixheight),
                self._pty[2],
            )
        else:
            self._up.change_terminal_size(width, height, pixwidth, pixheight)

    def signal_received(self, signal):
        if self._up is not None:
            self._up.send_signal(signal)

    def break_received(self, msec):
        if self._up is not None:
            self._up.send_break(msec)
        return True

    def pause_writing(self):
        if self._up is not None:
            self._up.pause_reading()

    def resume_writing(self):
        if self._up is not None:
            self._up.resume_reading()

    def connection_lost(self, exc):
        if self._up is not None:
            self._up.close()


# --- connections -------------------------------------------------------------------------


def _over_a_cap(target) -> str:
    """Why a new login of ``target`` would be one too many ("" when it is not)."""
    from django.conf import settings

    per_instance = settings.SSH_GATEWAY_MAX_CONNECTIONS_PER_INSTANCE
    if len(_open.get(target.instance_id, ())) >= per_instance:
        return (
            f"too many SSH connections to this instance: at most {per_instance} at once "
            "(SSH_GATEWAY_MAX_CONNECTIONS_PER_INSTANCE); close some and try again"
        )
    per_user = settings.SSH_GATEWAY_MAX_CONNECTIONS_PER_USER
    held = sum(
        1 for servers in _open.values() for s in servers if s._target.holder_id == target.holder_id
    )
    if held >= per_user:
        return (
            f"too many SSH connections of yours: at most {per_user} at once per person "
            "(SSH_GATEWAY_MAX_CONNECTIONS_PER_USER); close some and try again"
        )
    return ""


class GatewayServer(asyncssh.SSHServer):
    """One customer connection: authentication, then channels relayed to one upstream."""

    def __init__(self, client_key: asyncssh.SSHKey):
        self._client_key = client_key
        self._conn: asyncssh.SSHServerConnection | None = None
        self._peer = "?"
        self._username = ""
        self._target = None  # sshroutes.Upstream, once a key is accepted
        self._upstream: asyncio.Task | None = None
        self._tried: dict[tuple[str, str], asyncio.Future] = {}  # (user name, key) → lookup
        self._line = ""  # the key it logged in with
        self.instance_id = ""
        self._capped = False  # refused past a cap after its key was accepted (logged then)

    def connection_made(self, conn):
        self._conn = conn
        peer = conn.get_extra_info("peername") or ("?", 0)
        self._peer = f"{peer[0]}:{peer[1]}"

    def connection_lost(self, exc):
        if self._capped:
            pass
        elif self._target is None:
            log.info(
                "ssh refused: user %r from %s (no key of the owner of a running instance)",
                self._username[:64],
                self._peer,
            )
        else:
            log.info("ssh closed: %s from %s", self.instance_id, self._peer)
            _open.get(self.instance_id, set()).discard(self)
            if not _open.get(self.instance_id, True):
                _open.pop(self.instance_id, None)
        if self._upstream is not None:
            self._upstream.cancel()
            if (
                self._upstream.done()
                and not self._upstream.cancelled()
                and not self._upstream.exception()
            ):
                self._upstream.result().close()

    # Authentication: public keys, nothing else.
    def begin_auth(self, username):
        self._username = username
        return True

    def password_auth_supported(self):
        return False

    def kbdint_auth_supported(self):
        return False

    def host_based_auth_supported(self):
        return False

    def public_key_auth_supported(self):
        return True

    async def validate_public_key(self, username, key):
        # Each new (user name, key) is one lookup, made once (a key is offered, then signed
        # with) and counted before it is awaited: a client that cancels its own attempts
        # by sending the next cannot have more running.
        line = key_line(key)
        lookup = self._tried.get((username, line))
        if lookup is None:
            if len(self._tried) >= MAX_AUTH_TRIES:
                self._conn.disconnect(
                    asyncssh.DISC_NO_MORE_AUTH_METHODS_AVAILABLE, "too many authentication attempts"
                )
                return False
            lookup = asyncio.ensure_future(asyncio.to_thread(_login, username, line))
            self._tried[(username, line)] = lookup
        target = await asyncio.shield(lookup)
        if target is None:
            return False
        self._target, self._line = target, line
        return True

    def auth_completed(self):
        target = self._target
        refusal = _over_a_cap(target)
        if refusal:
            log.info("ssh refused: %s by %s from %s: %s", target.instance_id,
                     target.user_email, self._peer, refusal)  # fmt: skip
            self._target, self._capped = None, True  # nothing was opened: nothing to give back
            self._conn.disconnect(asyncssh.DISC_TOO_MANY_CONNECTIONS, refusal)
            return
        self.instance_id = target.instance_id
        log.info(
            "ssh login: %s by %s with %s from %s",
            target.instance_id,
            target.user_email,
            target.key_fingerprint,
            self._peer,
        )
        self._upstream = asyncio.ensure_future(self._connect_upstream())
        _open[target.instance_id].add(self)

    async def recheck(self) -> None:
        """Ask ``ssh_login`` again with the key this connection logged in with; close the
        connection if it now refuses, or if its holder's credentials were revoked since."""
        target = await asyncio.to_thread(_login, self._username, self._line)
        then = self._target
        revoked = target is not None and (target.holder_id, target.generation) != (
            then.holder_id,
            then.generation,
        )
        if (target is None or revoked) and self._conn is not None:
            log.info("ssh access ended: %s from %s", self.instance_id, self._peer)
            self._conn.close()

    async def _connect_upstream(self) -> asyncssh.SSHClientConnection:
        target = self._target
        conn = await asyncio.wait_for(
            asyncssh.connect(
                target.address,
                target.port,
                username=target.container_user,
                client_keys=[self._client_key],
                known_hosts=([asyncssh.import_public_key(target.host_public_key)], [], []),
                agent_path=None,
                config=None,
                preferred_auth="publickey",
                password=None,
                gss_auth=False,
            ),
            UPSTREAM_CONNECT_TIMEOUT,
        )
        return conn

    async def upstream(self) -> asyncssh.SSHClientConnection:
        try:
            return await asyncio.shield(self._upstream)
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            if self._conn is not None:
                self._conn.close()
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_CONNECT_FAILED, f"the instance's sshd does not answer ({exc})"
            ) from exc

    # Channels.
    def session_requested(self):
        return (self._conn.create_server_channel(encoding=None), _DownstreamSession(self))

    def connection_requested(self, dest_host, dest_port, orig_host, orig_port):
        # Opened by the container's sshd, so "localhost" is the container itself.
        return self._forward(dest_host, dest_port)

    async def _forward(self, dest_host, dest_port):
        upstream = await self.upstream()
        log.info("ssh forward: %s to %s:%s", self.instance_id, dest_host, dest_port)
        return await self._conn.forward_tunneled_connection(upstream, dest_host, dest_port)

    def server_requested(self, listen_host, listen_port):
        return False  # ssh -R: refused


async def _recheck_on_state_changes(listening: asyncio.Event) -> None:
    """Follow every instance's state channel; each message asks again about the open
    connections into that instance. Without Redis, sessions end as before: when the
    instance stops and its sshd goes."""
    import redis.asyncio as aioredis

    from gpurental.telemetry.selectors import layer_redis_url

    client = aioredis.Redis.from_url(
        await asyncio.to_thread(layer_redis_url), socket_connect_timeout=2
    )
    delay = 0.5
    while True:
        try:
            async with client.pubsub() as pubsub:
                await pubsub.psubscribe(STATE_PATTERN)
                listening.set()
                delay = 0.5
                async for message in pubsub.listen():
                    if message.get("type") != "pmessage":
                        continue
                    channel = message["channel"]
                    if isinstance(channel, bytes):
                        channel = channel.decode()
                    for server in list(_open.get(channel.rsplit(":", 1)[-1], ())):
                        await server.recheck()
        except asyncio.CancelledError:
            await client.aclose()
            raise
        except Exception:  # noqa: BLE001 - keep following, whatever Redis did
            listening.clear()
            log.warning("instance state feed lost; retrying in %.1f s", delay, exc_info=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10)


async def serve(*, host: str, port: int, host_key: Path) -> asyncssh.SSHAcceptor:
    from gpurental.gateway import sshkeys

    listening = asyncio.Event()
    follower = asyncio.ensure_future(_recheck_on_state_changes(listening))
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(listening.wait(), LISTEN_READY_TIMEOUT)

    client_key = asyncssh.import_private_key(await asyncio.to_thread(sshkeys.client_private_key))
    server_key = gateway_host_key(host_key)
    acceptor = await asyncssh.create_server(
        lambda: GatewayServer(client_key),
        host,
        port,
        server_host_keys=[server_key],
        password_auth=False,
        kbdint_auth=False,
        gss_host=None,
        agent_forwarding=False,
        x11_forwarding=False,
        login_timeout=LOGIN_TIMEOUT,
        encoding=None,
    )
    _followers.add(follower)  # asyncio keeps only a weak reference to a task
    follower.add_done_callback(_followers.discard)
    return acceptor


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpurental.settings")
    import django

    django.setup()
    from django.conf import settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=settings.SSH_GATEWAY_HOST)
    parser.add_argument("--port", type=int, default=settings.SSH_GATEWAY_PORT)
    args = parser.parse_args(argv)
    # asyncssh logs every channel at INFO; our own lines say who logged in and who was refused.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)

    async def run() -> None:
        server = await serve(
            host=args.host, port=args.port, host_key=Path(settings.SSH_GATEWAY_HOST_KEY)
        )
        log.info("SSH gateway listening on %s:%s", args.host, args.port)
        await server.wait_closed()

    asyncio.run(run())


if __name__ == "__main__":
    main()
