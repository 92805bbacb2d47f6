"""The host link: everything that passes between the control plane and its hosts' agents.

- Keys. A host's root (``protocol.host_root``: the SHA-256 of its join token) is kept
  sealed with a key derived from ``SECRET_KEY`` (``Host.keys_sealed``); its signing and
  spec keys are derived from the root (``protocol.host_keys``). ``Host.token_hash`` is a
  different hash, for checking a join token only: reading it (or a database dump without
  ``SECRET_KEY``) is not enough to sign as a host or to read its specs' secrets.
- Commands: signed for their host and sent to its queue once the transaction commits
  (``send``); a start spec's secrets sealed with the host's spec key (``seal_secrets``).
- Reports: a host may have only the tasks of ``protocol.CONTROL_TASKS`` run from the
  reports queue (``ControlTask``, every control task's class, refuses the rest before it
  runs); each report is checked for its host's signature, its age and replay
  (``receive``). Every refusal is audited (``refuse_message``) and the message dropped.

On RabbitMQ the broker enforces the first line: a host's account may publish only to
the ``reports`` exchange with its own routing key (``fleet/broker.py``). On the single-box
Redis there are no accounts: there, a host that misbehaves on the broker is trusted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime, timedelta
from functools import lru_cache

import kombu.exceptions
from celery import Task
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from gpurental import protocol
from gpurental.accounts.models import AuditEvent
from gpurental.celery_app import app
from gpurental.fleet.models import Host

log = logging.getLogger(__name__)

REPORT_TASKS = frozenset(protocol.CONTROL_TASKS)  # the allow-list of the reports queue


# --- keys ---------------------------------------------------------------------------


def _at_rest_key(secret: str) -> Fernet:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"gpurental host keys at rest v1"
    ).derive(secret.encode())
    return Fernet(base64.urlsafe_b64encode(derived))


def _at_rest() -> MultiFernet:
    """Seals with SECRET_KEY; opens with it or any of SECRET_KEY_FALLBACKS (a rotation)."""
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([_at_rest_key(s) for s in secrets])


def seal_root(root: str) -> str:
    return _at_rest().encrypt(root.encode()).decode()


def open_root(sealed: str) -> str:
    return _at_rest().decrypt(sealed.encode()).decode()


def token_check_hash(root: str) -> str:
    """What ``Host.token_hash`` holds: enough to check a join token, no key."""
    return hashlib.sha256(b"gpurental join token check v1\0" + root.encode()).hexdigest()


def host_credentials(token: str) -> dict[str, str]:
    """The fields a host keeps of a new join token (the token itself is never stored)."""
    root = protocol.host_root(token)
    return {"token_hash": token_check_hash(root), "keys_sealed": seal_root(root)}


def token_matches(*, host: Host, token: str) -> bool:
    expected = token_check_hash(protocol.host_root(token or ""))
    return bool(host.token_hash) and hmac.compare_digest(host.token_hash, expected)


class NoKeys(Exception):
    pass


@lru_cache(maxsize=4096)
def _keys(sealed: str, secrets: tuple[str, ...]) -> protocol.HostKeys:
    try:
        root = open_root(sealed)
    except InvalidToken as exc:
        raise NoKeys("its keys do not open with SECRET_KEY (rotate its token)") from exc
    return protocol.host_keys(root)


def keys_of(sealed: str) -> protocol.HostKeys:
    """The keys of the host whose ``keys_sealed`` this is; NoKeys if it has none."""
    if not sealed:
        raise NoKeys("it has no keys (rotate its token)")
    return _keys(sealed, (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])))


# --- commands: control plane → host -------------------------------------------------


def command(host: Host, **payload) -> dict:
    """A command's keyword arguments, signed for ``host``: its agent acts only on these."""
    return protocol.sign(keys_of(host.keys_sealed).sign, {"host": host.name, **payload})


def send(
    host: Host,
    task: str,
    *,
    expires: float | None = None,
    on_unsent: Callable[[str], None] | None = None,
    **payload,
) -> None:
    """Sign and send a command to the host's queue, once the transaction commits (an agent
    must never act on a row that may yet roll back).

    A broker that cannot take the message (down, restarting) does not turn the committed
    request into an error: the failure is logged and ``on_unsent`` is called with what
    went wrong (a start fails its launch at once, rather than after LAUNCH_TIMEOUT).
    Without one, reconciliation settles the command's row (a stop or removal the host
    never confirmed times out; a container it still lists is stopped then)."""
    message = command(host, **payload)
    queue, name = host.queue, host.name

    def publish() -> None:
        try:
            app.send_task(task, kwargs=message, queue=queue, expires=expires)
        except (kombu.exceptions.OperationalError, OSError) as exc:
            log.warning("%s for host %s was not sent: %s", task, name, exc)
            if on_unsent is not None:
                on_unsent(f"{type(exc).__name__}: {exc}")

    transaction.on_commit(publish)


def seal_secrets(host: Host, secrets: dict) -> str:
    """A start spec's secrets, readable only by that host's agent."""
    return protocol.spec_seal(keys_of(host.keys_sealed).spec, secrets)


# --- reports: host → control plane --------------------------------------------------


class MessageRefused(Exception):
    pass


def refuse_message(*, name: str, what: str, why: str, now: datetime) -> None:
    """Record a refused message from a host (in the audit log) and raise MessageRefused."""
    # A misconfigured agent beats every few seconds: record it once a minute, not 720 times an hour.
    action = f"host.{what}_refused"
    recent = AuditEvent.objects.filter(
        action=action, object_repr=name[:200], created_at__gte=now - timedelta(minutes=1)
    )
    if not recent.exists():
        AuditEvent.objects.create(
            action=action, object_type="fleet.host", object_repr=name[:200], changes={"why": why}
        )
    raise MessageRefused(f"{what} from {name!r} refused: {why}")


def receive(*, message: dict, what: str, now: datetime) -> tuple[Host, dict]:
    """The host that sent ``message`` and its payload, when it is signed by that host, was
    sent within ``protocol.REPORT_MAX_AGE_S`` and is seen for the first time; otherwise
    refused (and audited)."""
    name = str(message.get("host", ""))[:63]
    host = Host.objects.filter(name=name).first()
    if host is None:
        refuse_message(name=name, what=what, why="no host of that name", now=now)
    try:
        payload = protocol.verify(keys_of(host.keys_sealed).sign, message, host=host.name)
    except (protocol.Forged, NoKeys) as exc:
        refuse_message(name=name, what=what, why=str(exc), now=now)
    sent_at = payload.get("sent_at")
    if isinstance(sent_at, bool) or not isinstance(sent_at, int | float):
        refuse_message(name=name, what=what, why="no sent_at", now=now)
    age = now.timestamp() - sent_at
    if age > protocol.REPORT_MAX_AGE_S or age < -protocol.REPORT_MAX_AHEAD_S:
        refuse_message(
            name=name,
            what=what,
            why=f"sent {age:.0f} s ago, outside [-{protocol.REPORT_MAX_AHEAD_S}, "
            f"{protocol.REPORT_MAX_AGE_S}] s",
            now=now,
        )
    # The signature is unique to the message: seen once, it is a replay the second time.
    seen = f"hostlink:seen:{message['sig']}"
    if not cache.add(seen, 1, timeout=protocol.REPORT_MAX_AGE_S + protocol.REPORT_MAX_AHEAD_S):
        refuse_message(name=name, what=what, why="a replay of a message already received", now=now)
    _received.set((*_received.get(), seen))
    return host, payload


# The messages the running task has received: forgotten again when it fails, so that its
# retry (the same message, sent again by the control worker) is not taken for a replay.
_received: ContextVar[tuple[str, ...]] = ContextVar("hostlink_received", default=())


def from_host(delivery_info: dict | None) -> str | None:
    """The host a task message came from, by the route it took (None: not from a host).
    On RabbitMQ the broker sets these and a host can only use its own routing key."""
    info = delivery_info or {}
    key = str(info.get("routing_key") or "")
    if info.get("exchange") == protocol.REPORTS_EXCHANGE or key.startswith("report."):
        return key.removeprefix("report.")[:63]
    if key == protocol.REPORTS_QUEUE:  # Redis: the agent names the queue
        return ""
    return None


class ControlTask(Task):
    """Every control-plane task: one that arrived by a host's route runs only when it is
    on the allow-list (it then checks its own message with ``receive``)."""

    def __call__(self, *args, **kwargs):
        host = from_host(getattr(self.request, "delivery_info", None))
        if host is not None and self.name not in REPORT_TASKS:
            from django.utils import timezone

            name = host or str(kwargs.get("host", ""))[:63]
            try:
                refuse_message(
                    name=name,
                    what="task",
                    why=f"{self.name[:200]!r} is not a report task: not run",
                    now=timezone.now(),
                )
            except MessageRefused as exc:
                log.warning("%s", exc)
            return None
        token = _received.set(())
        try:
            return super().__call__(*args, **kwargs)
        except BaseException:
            cache.delete_many(list(_received.get()))
            raise
        finally:
            _received.reset(token)
