"""What the SDK hands back: an ``Instance`` with methods, and its events; a ``Reservation``."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Self

from gpurental.client.errors import GpuRentalError, InvalidState, LaunchFailed, Timeout

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpurental.client.client import Client

STATUSES = (
    "pending",
    "provisioning",
    "running",
    "stopping",
    "stopped",
    "terminating",
    "terminated",
    "failed",
    "unreachable",
    "lost",
)
# Statuses an instance never leaves on its own: waiting for anything else is over.
FAILED_STATUSES = ("failed", "lost")
TERMINATED = "terminated"
# Per request: under the read timeouts of common proxies (nginx and cloud load balancers
# default to 60 s, some routers to 30 s); the server allows up to 120.
LONG_POLL_SECONDS = 25.0


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _gpu_model_name(value: Any) -> str | None:
    # The API may name the model by a string or nest the model object.
    if isinstance(value, dict):
        return value.get("short_name") or value.get("slug") or value.get("name")
    return value


class _Bound:
    """An API object that remembers the Client it came from (``.client``) and refreshes
    its fields from a new API answer (``_update``)."""

    _client: Client | None
    raw: dict[str, Any]

    @classmethod
    def _fields_from(cls, data: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _update(self, data: dict[str, Any]) -> Self:
        for name, value in self._fields_from(data).items():
            setattr(self, name, value)
        self.raw = data
        return self

    @property
    def client(self) -> Client:
        if self._client is None:
            raise GpuRentalError(f"this {type(self).__name__} is not bound to a Client")
        return self._client


@dataclass
class InstanceEvent:
    """One transition of an instance, as the API's detail view lists it."""

    at: datetime | None
    kind: str
    from_status: str | None
    to_status: str | None
    step: str
    reason: str

    @classmethod
    def from_api(cls, data: dict[str, Any]) -> InstanceEvent:
        return cls(
            at=_parse_time(data.get("at")),
            kind=data.get("kind") or "",
            from_status=data.get("from_status"),
            to_status=data.get("to_status"),
            step=data.get("step") or "",
            reason=data.get("reason") or "",
        )


@dataclass
class Instance(_Bound):
    """A rented GPU container. ``raw`` keeps the API's dict, fields the SDK knows aside.

    Methods call the server through the client that fetched the instance and update
    this object in place.
    """

    id: Any
    name: str
    status: str
    status_reason: str
    gpu_model: str | None
    gpu_count: int
    plan: str | None
    image: str | None
    host: str | None
    gpu_indices: list[int]
    without_gpus: bool  # the current (or last) run has no GPU: no-GPU mode
    created_at: datetime | None
    running_since: datetime | None
    stopped_at: datetime | None
    jupyter_url: str | None
    events: list[InstanceEvent]
    idle_stop_minutes: int | None  # stopped after this many idle minutes; 0 = never
    usage: dict[str, Any] | None  # paid vs used: paid_hours, avg_util (%), coverage …
    raw: dict[str, Any] = field(repr=False)
    _client: Client | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_api(cls, data: dict[str, Any], client: Client | None = None) -> Instance:
        return cls(**cls._fields_from(data), raw=data, _client=client)

    @staticmethod
    def _fields_from(data: dict[str, Any]) -> dict[str, Any]:
        plan = data.get("plan")
        image = data.get("image")
        host = data.get("host")
        return {
            "id": data.get("id"),
            "name": data.get("name") or "",
            "status": data.get("status") or "",
            "status_reason": data.get("status_reason") or "",
            "gpu_model": _gpu_model_name(data.get("gpu_model")),
            "gpu_count": data.get("gpu_count") or 0,
            "plan": plan.get("slug") if isinstance(plan, dict) else plan,
            "image": image.get("slug") if isinstance(image, dict) else image,
            "host": host.get("name") if isinstance(host, dict) else host,
            "gpu_indices": list(data.get("gpu_indices") or []),
            "without_gpus": bool(data.get("without_gpus")),
            "created_at": _parse_time(data.get("created_at")),
            "running_since": _parse_time(data.get("running_since")),
            "stopped_at": _parse_time(data.get("stopped_at")),
            "jupyter_url": data.get("jupyter_url") or None,
            "events": [InstanceEvent.from_api(e) for e in data.get("events") or []],
            "idle_stop_minutes": data.get("idle_stop_minutes"),
            "usage": data.get("usage"),
        }

    def set_idle_policy(self, minutes: int) -> Instance:
        """Stop after ``minutes`` idle (never delete); 0 turns the auto-stop off."""
        return self._update(self.client.set_idle_policy(self.id, minutes).raw)

    @property
    def latest_step(self) -> str:
        """What the platform is doing now, from the newest event ("pulling image")."""
        for event in reversed(self.events):
            if event.step or event.reason:
                return event.step or event.reason
        return ""

    def refresh(self) -> Instance:
        return self._update(self.client._get_json(f"instances/{self.client._quote(self.id)}/"))

    def stop(self) -> Instance:
        return self._update(self.client._action(self.id, "stop"))

    def start(self, *, without_gpus: bool = False) -> Instance:
        """Start again on its host; ``without_gpus``: in no-GPU mode (see ``Client.start``)."""
        return self._update(self.client.start(self.id, without_gpus=without_gpus).raw)

    def restart(self) -> Instance:
        return self._update(self.client._action(self.id, "restart"))

    def terminate(self) -> Instance:
        return self._update(self.client._action(self.id, "terminate"))

    def save_image(self, name: str, *, wait: bool = True, timeout: float = 1800):
        """Save this running or stopped instance as your image ``name`` (``client.saved_images``);
        launch it later, on any host, with ``create_instance(image=saved.reference)``."""
        return self.client.saved_images.save(self, name, wait=wait, timeout=timeout)

    def wait_until(
        self,
        status: str,
        timeout: float = 600,
        poll: float = 1.0,
        on_progress: Callable[[Instance], None] | None = None,
    ) -> Instance:
        """Wait until the instance reaches ``status``; return it.

        Asks the server to answer the moment the status changes (a long-poll, at most
        ``LONG_POLL_SECONDS`` per request); an older server that cannot is polled every
        ``poll`` seconds instead. Raises ``LaunchFailed`` when the instance ends ``failed``
        or ``lost`` instead (with the server's reason), ``InvalidState`` when it is
        ``terminated`` instead, and ``Timeout`` after ``timeout`` seconds.
        ``on_progress(instance)`` is called after every answer, at least every ``poll``
        seconds while it waits.
        """
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r}; one of {', '.join(STATUSES)}")
        client = self.client
        deadline = client._clock() + timeout
        while True:
            remaining = deadline - client._clock()
            long_polled = False
            if remaining > 0 and client._long_poll is not False:
                # With on_progress the caller shows steps: come back at least every poll s.
                wait = min(remaining, LONG_POLL_SECONDS, poll if on_progress else remaining)
                data, long_polled = client._wait_instance(self.id, status, wait)
                self._update(data)
            else:
                self.refresh()
            if on_progress is not None:
                on_progress(self)
            if self.status == status:
                return self
            if self.status in FAILED_STATUSES:
                reason = self.status_reason or "no reason given"
                raise LaunchFailed(f"instance {self.id} is {self.status}: {reason}", instance=self)
            if self.status == TERMINATED:
                raise InvalidState(
                    f"instance {self.id} was terminated while waiting for {status}",
                    code="invalid_state",
                )
            remaining = deadline - client._clock()
            if remaining <= 0:
                raise Timeout(
                    f"instance {self.id} is still {self.status} after {timeout:g}s "
                    f"(waited for {status})",
                    instance=self,
                )
            if not long_polled:
                client._sleep(min(poll, remaining))

    def connect(
        self,
        timeout: float = 600,
        poll: float = 1.0,
        on_progress: Callable[[Instance], None] | None = None,
        port: int | None = None,
    ) -> str:
        """Wait until the instance runs and return a link into it: it logs its holder in
        once at the instance's own origin (JupyterLab, or another HTTP ``port`` its image
        declares) and expires within a minute. Ask again for a new one.

        Without ``on_progress``, one request asks the server to make the link the moment
        the instance runs (at most ``LONG_POLL_SECONDS`` per request, asked again until
        ``timeout``). With it, or against an older server that does not wait, it waits
        as ``wait_until`` does (raising as it does), then asks for the link.
        """
        client = self.client
        deadline = client._clock() + timeout
        while on_progress is None and client._long_poll is not False:
            remaining = max(0.0, deadline - client._clock())
            try:
                link = client.connect(self.id, port=port, wait=min(remaining, LONG_POLL_SECONDS))
            except InvalidState as refused:
                if refused.headers.get("Wait-Outcome") != "timeout":
                    # Ended (wait_until raises with the reason), or an older server that
                    # did not wait (no Wait-Outcome): wait as it can.
                    break
                if client._clock() < deadline:
                    continue
                self.refresh()
                raise Timeout(
                    f"instance {self.id} is still {self.status} after {timeout:g}s "
                    "(waited for running)",
                    instance=self,
                ) from None
            self.status = link.get("status") or "running"
            return Link(link["url"])
        remaining = max(0.0, deadline - client._clock())
        self.wait_until("running", timeout=remaining, poll=poll, on_progress=on_progress)
        return Link(client.connect(self.id, port=port)["url"])


class Link(str):
    """A link into an instance: a ``str``, shown bare in a REPL (``instance.connect()`` as a
    statement prints it) and as a link to click in a notebook."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        href = html.escape(str(self), quote=True)
        return f'<a href="{href}" target="_blank" rel="noopener">Open JupyterLab</a> ({href})'


def _decimal(value: Any) -> Decimal | None:
    # Amounts arrive as strings ("7.48"): Decimal keeps them exact.
    if value is None or value == "":
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


@dataclass
class Reservation(_Bound):
    """GPUs booked for [start, end), paid at booking. ``raw`` keeps the API's dict.

    ``refund_if_cancelled_now`` is what ``cancel()`` would pay back now (``None`` once
    the reservation has started); ``instance_id`` is the instance launched for it at
    the start.
    """

    id: Any
    status: str
    gpu_model: str | None
    gpu_count: int
    plan: str | None
    image: str | None
    start: datetime | None
    end: datetime | None
    price: Decimal | None
    refunded: Decimal | None
    refund_if_cancelled_now: Decimal | None
    currency: str
    host: str | None
    gpu_indices: list[int]
    instance_id: Any
    created_at: datetime | None
    cancelled_at: datetime | None
    raw: dict[str, Any] = field(repr=False)
    _client: Client | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_api(cls, data: dict[str, Any], client: Client | None = None) -> Reservation:
        return cls(**cls._fields_from(data), raw=data, _client=client)

    @staticmethod
    def _fields_from(data: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": data.get("id"),
            "status": data.get("status") or "",
            "gpu_model": _gpu_model_name(data.get("gpu_model")),
            "gpu_count": data.get("gpu_count") or 0,
            "plan": data.get("plan"),
            "image": data.get("image"),
            "start": _parse_time(data.get("start")),
            "end": _parse_time(data.get("end")),
            "price": _decimal(data.get("price")),
            "refunded": _decimal(data.get("refunded")),
            "refund_if_cancelled_now": _decimal(data.get("refund_if_cancelled_now")),
            "currency": data.get("currency") or "",
            "host": data.get("host"),
            "gpu_indices": list(data.get("gpu_indices") or []),
            "instance_id": data.get("instance"),
            "created_at": _parse_time(data.get("created_at")),
            "cancelled_at": _parse_time(data.get("cancelled_at")),
        }

    def refresh(self) -> Reservation:
        return self._update(self.client._reservation_data(self.id))

    def cancel(self) -> Reservation:
        """Cancel before the start; ``refunded`` then says what was paid back."""
        return self._update(self.client._reservation_cancel_data(self.id))

    def relaunch(self) -> Instance:
        """A new instance on the reserved GPUs, once its instance was terminated."""
        return self.client.relaunch_reservation(self.id)
