"""``Client``: the gpurental REST API (``/api/v1/``) over ``requests``.

Retries are bounded and only where repeating cannot do harm: GETs, and POSTs, which
carry an ``Idempotency-Key`` generated once per call and sent again on every retry,
so the server runs a retried launch (or booking) once.
"""

from __future__ import annotations

import email.utils
import re
import time
import uuid
from collections.abc import Callable, MutableMapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import requests
from requests.structures import CaseInsensitiveDict

from gpurental import __version__
from gpurental.client import config
from gpurental.client.dedicated import DedicatedHosts
from gpurental.client.errors import (
    AuthenticationError,
    Conflict,
    ConnectionError,
    GpuRentalError,
    InvalidState,
    NoCapacity,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    ServerError,
    Timeout,
    ValidationError,
)
from gpurental.client.groups import GroupsMixin
from gpurental.client.models import Instance, Reservation
from gpurental.client.payments import PaymentsMixin
from gpurental.client.registries import RegistryLogins, SavedImages, Snapshots, Volumes
from gpurental.client.sshkeys import SSHKeys
from gpurental.client.webhooks import Webhooks

USER_AGENT = f"gpurental-client/{__version__}"
# Answers that mean "try again shortly": a proxy or the server is restarting or busy.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
IN_PROGRESS = "idempotency_key_in_progress"
CONFLICTS = {
    "no_capacity": NoCapacity,
    "quota_exceeded": QuotaExceeded,
    "invalid_state": InvalidState,
}
ERRORS_BY_STATUS = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: ValidationError,
}


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class Client(GroupsMixin, PaymentsMixin):
    """A connection to one gpurental server with one API key.

    ``api_key`` and ``base_url`` default to ``GPURENTAL_API_KEY`` / ``GPURENTAL_URL``,
    then to what ``gpurental login`` saved. ``timeout`` bounds each HTTP request;
    ``max_retries`` bounds retries after connection errors, 502/503/504 and 429;
    a ``Retry-After`` longer than ``max_retry_wait`` seconds is not waited for
    (``RateLimited`` is raised with ``retry_after`` set).
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_wait: float = 30.0,
        backoff: float = 0.5,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        key, url = config.resolve(api_key, base_url)
        if not key:
            raise AuthenticationError(
                "no API key: pass api_key=, set GPURENTAL_API_KEY or run `gpurental login`"
            )
        self.base_url = url.rstrip("/")
        root = self.base_url if self.base_url.endswith("/api/v1") else f"{self.base_url}/api/v1"
        self._api_root = f"{root}/"
        self._api_key = key
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait
        self.backoff = backoff
        self._session = session or requests.Session()
        self._sleep = sleep or _sleep
        self._clock = clock or time.monotonic
        self._long_poll: bool | None = None  # does the server long-poll? None: not asked yet

    @property
    def dedicated(self) -> DedicatedHosts:
        """Whole hosts: ``.plans()``, ``.book(plan, hours=)``, ``.list()``, ``.launch(id, image)``."""
        return DedicatedHosts(self)

    @property
    def ssh_keys(self) -> SSHKeys:
        """Your SSH public keys: ``.list()``, ``.get(id)``, ``.add(line or Path)``, ``.delete(id)``."""
        return SSHKeys(self)

    @property
    def registry_logins(self) -> RegistryLogins:
        """Your logins to private registries, for launches of your own images."""
        return RegistryLogins(self)

    @property
    def volumes(self) -> Volumes:
        """Your volumes: ``.create(name, size_gb, host)``, ``.list()``, ``.delete``."""
        return Volumes(self)

    @property
    def snapshots(self) -> Snapshots:
        """Your volumes' snapshots: ``.create(volume, name)``, ``.list()``, ``.restore(snapshot,
        host, name)``, ``.delete``."""
        return Snapshots(self)

    @property
    def saved_images(self) -> SavedImages:
        """Your instances saved as images: ``.save(instance, name)``, ``.list()``, ``.delete``."""
        return SavedImages(self)

    @property
    def webhooks(self) -> Webhooks:
        """Outgoing webhooks: ``.list()``, ``.create(url)``, ``.delete(id)``, ``.deliveries()``,
        ``.resend(delivery_id)``."""
        return Webhooks(self)

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r})"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # Instances

    def create_instance(
        self,
        *,
        gpu_type: str | None = None,
        framework: str | None = None,
        image: str | None = None,
        volumes: dict[str, str] | None = None,
        workspace_from: Any = None,
        model_repo: str | None = None,
        model: str | None = None,
        gpu_count: int = 1,
        plan: str | None = None,
        name: str | None = None,
        idle_stop_minutes: int | None = None,
        auto_recover: bool = False,
        zone: str | None = None,
    ) -> Instance:
        """Launch an instance and return it (``pending``); ``connect()`` waits for it.

        ``gpu_type`` is a GPU model's short name or slug ("A10G") and ``gpu_count`` how
        many; or ``plan`` names a plan, which fixes both. ``framework`` is an image
        template's slug ("pytorch-2.1"); or ``image`` is your own image's reference
        ("registry.example.com/team/train:1"), pulled with the login saved for its registry
        (``client.registry_logins.save``). ``volumes`` mounts your volumes, {name or id:
        path} (the instance then runs on their host). ``workspace_from``: a snapshot of
        another instance's /workspace (``client.snapshots.create_workspace``), its files
        in this one's. ``model_repo="huggingface"`` mounts the host's
        shared Hugging Face cache. ``model`` ("sentence-transformers/all-MiniLM-L6-v2")
        asks for a model from the hosts' shared caches: hosts that have it come first
        (``instance.raw["hf_model_cached"]`` says whether this one does; else it downloads
        into the instance's own cache). An alias such as "pytorch-2.1" names the image it
        stands for; ``instance.raw["image_alias"]`` shows it.
        ``idle_stop_minutes`` stops it after that many idle
        minutes (0: never; default: the plan's). ``auto_recover``: if its host is lost, it
        is relaunched on another host from its newest workspace snapshot (see
        ``set_auto_recover``). ``zone`` ("cn-east-1a", from ``gpu_models()``' ``zones``)
        places it only on a host in that zone.
        """
        if plan and gpu_type:
            raise ValueError("pass either gpu_type= (with gpu_count=) or plan=, not both")
        if plan and gpu_count != 1:
            raise ValueError("a plan fixes the GPU count; leave gpu_count= out")
        if not plan and not gpu_type:
            raise ValueError("pass gpu_type= (for example 'A10G') or plan=")
        if bool(framework) == bool(image):
            raise ValueError("pass either framework= (a catalog image) or image= (your own)")
        body: dict[str, Any] = {"image": framework or image}
        if plan:
            body["plan"] = plan
        else:
            body["gpu_model"] = gpu_type
            body["gpu_count"] = gpu_count
        if name:
            body["name"] = name
        if model_repo:
            body["model_repo"] = model_repo
        if model:
            body["model"] = model
        if idle_stop_minutes is not None:
            body["idle_stop_minutes"] = idle_stop_minutes
        if auto_recover:
            body["auto_recover"] = True
        if zone:
            body["zone"] = zone
        if volumes:
            body["volumes"] = [{"volume": v, "mount_path": p} for v, p in volumes.items()]
        if workspace_from is not None:
            body["workspace_from"] = str(getattr(workspace_from, "id", workspace_from))
        return self._instance(self._request("POST", "instances/", json_body=body))

    def create_cluster(
        self,
        *,
        size: int,
        framework: str,
        gpu_type: str | None = None,
        gpu_count: int = 1,
        plan: str | None = None,
        name: str | None = None,
        placement: str = "pack",
    ) -> list[Instance]:
        """Launch ``size`` instances that reach each other on your private network, each
        told its place for ``torchrun`` (``MASTER_ADDR``, ``WORLD_SIZE``, ``RANK``, NCCL's
        and Gloo's interface); returns them by rank, all ``pending``, or raises with none
        launched. ``gpu_type``/``gpu_count`` or ``plan`` are per instance, as for
        ``create_instance``. ``placement="pack"`` puts them on one host."""
        if bool(plan) == bool(gpu_type):
            raise ValueError("pass either gpu_type= (with gpu_count=) or plan=")
        body: dict[str, Any] = {"image": framework, "size": size, "placement": placement}
        if plan:
            body["plan"] = plan
        else:
            body["gpu_model"], body["gpu_count"] = gpu_type, gpu_count
        if name:
            body["name"] = name
        data = self._request("POST", "instances/cluster/", json_body=body)
        return [self._instance(item) for item in data["instances"]]

    def list_instances(self, status: str | None = None) -> list[Instance]:
        params = {"status": status} if status else None
        return [self._instance(data) for data in self._list("instances/", params)]

    def get_instance(self, instance_id: Any) -> Instance:
        return self._instance(self._get_json(f"instances/{self._quote(instance_id)}/"))

    def _wait_instance(self, instance_id: Any, status: str, timeout: float) -> tuple[Any, bool]:
        """The instance as the server answers a long-poll for ``status`` (at most ``timeout``
        seconds; sooner when it gets there, or fails, is lost or terminated), and whether the
        server long-polled. An older server ignores the parameters and answers at once
        without ``Wait-Outcome``; the SDK then polls instead (``_long_poll`` turns False)."""
        headers: CaseInsensitiveDict = CaseInsensitiveDict()  # a proxy may lowercase names
        data = self._request(
            "GET",
            f"instances/{self._quote(instance_id)}/",
            params={"wait_for": status, "timeout": f"{timeout:.3f}"},
            read_timeout=timeout + self.timeout,
            headers_out=headers,
        )
        self._long_poll = "Wait-Outcome" in headers
        return data, self._long_poll

    def set_idle_policy(self, instance_id: Any, minutes: int) -> Instance:
        """Stop the instance after ``minutes`` idle (never delete it); 0 turns it off."""
        path = f"instances/{self._quote(instance_id)}/idle-policy/"
        body = {"idle_stop_minutes": minutes}
        return self._instance(self._request("POST", path, json_body=body))

    def set_auto_recover(self, instance_id: Any, enabled: bool = True) -> Instance:
        """On: when its host is lost, the instance is relaunched on another host (same image
        and plan, /workspace from its newest workspace snapshot, else empty); the new one's
        ``raw["recovered_from"]`` names it. Off: it waits for its host. On-demand only."""
        path = f"instances/{self._quote(instance_id)}/auto-recover/"
        return self._instance(self._request("POST", path, json_body={"enabled": enabled}))

    def connect(
        self, instance_id: Any, port: int | None = None, wait: float | None = None
    ) -> dict[str, Any]:
        """A one-time link into a running instance you own: ``{"url", "expires_at",
        "origin", "status"}``. The url logs its holder in at the instance's origin, once.

        With ``wait``, the server first waits up to ``wait`` seconds for the instance to
        run (a long-poll) and answers the moment it does. When it does not, the
        ``InvalidState`` raised has the ``Wait-Outcome`` header in ``headers``: ``ended``
        (failed, lost or terminated instead) or ``timeout``. An older server does not wait:
        it answers at once, without that header."""
        body = {"port": port} if port is not None else {}
        path = f"instances/{self._quote(instance_id)}/connect/"
        if wait is None:
            data = self._request("POST", path, json_body=body)
        else:
            headers: CaseInsensitiveDict = CaseInsensitiveDict()
            try:
                data = self._request(
                    "POST",
                    path,
                    params={"wait_for": "running", "timeout": f"{wait:.3f}"},
                    json_body=body,
                    read_timeout=wait + self.timeout,
                    headers_out=headers,
                )
            finally:
                if "Wait-Outcome" in headers:  # filled in before an error is raised too
                    self._long_poll = True
        if not isinstance(data, dict) or not data.get("url"):
            raise GpuRentalError(f"the server at {self.base_url} sent no link")
        return data

    def stop(self, instance_id: Any) -> Instance:
        return self._instance(self._action(instance_id, "stop"))

    def start(self, instance_id: Any, *, without_gpus: bool = False) -> Instance:
        """Start a stopped instance again on its host; ``without_gpus``: in no-GPU mode (no
        GPU, a few vCPUs, the plan's ``no_gpu_hourly_rate``), to reach or copy out its data
        while its GPUs are taken."""
        body = {"without_gpus": True} if without_gpus else None
        return self._instance(self._action(instance_id, "start", body))

    def restart(self, instance_id: Any) -> Instance:
        return self._instance(self._action(instance_id, "restart"))

    def terminate(self, instance_id: Any) -> Instance:
        return self._instance(self._action(instance_id, "terminate"))

    # Catalog and account: the API's dicts as they come.

    def gpu_models(self) -> list[dict[str, Any]]:
        return self._list("gpu-models/")

    def plans(self) -> list[dict[str, Any]]:
        return self._list("plans/")

    def images(self) -> list[dict[str, Any]]:
        return self._list("images/")

    def me(self) -> dict[str, Any]:
        return self._get_json("me/")

    # Reservations: GPUs booked ahead, paid at booking at the reserved rate.

    def quote(
        self,
        *,
        start: datetime | str,
        end: datetime | str,
        gpu_model: str | None = None,
        gpu_count: int | None = None,
        plan: str | None = None,
    ) -> dict[str, Any]:
        """What booking would cost (``price``, ``hours``, ``discount``, …), booking nothing."""
        params = {**_gpu_choice(gpu_model, gpu_count, plan), **_period(start, end)}
        return self._get_json("reservations/quote/", params)

    def book(
        self,
        *,
        image: str,
        start: datetime | str,
        end: datetime | str,
        gpu_model: str | None = None,
        gpu_count: int | None = None,
        plan: str | None = None,
    ) -> Reservation:
        """Book ``gpu_count`` GPUs of ``gpu_model`` (or a ``plan``) for [start, end), running
        ``image`` from the start. The price is paid now. ``start`` and ``end`` are aware
        datetimes or ISO 8601 strings with a time zone."""
        body = {"image": image, **_gpu_choice(gpu_model, gpu_count, plan), **_period(start, end)}
        return self._reservation(self._request("POST", "reservations/", json_body=body))

    def reservations(self) -> list[Reservation]:
        return [self._reservation(data) for data in self._list("reservations/")]

    def get_reservation(self, reservation_id: Any) -> Reservation:
        return self._reservation(self._reservation_data(reservation_id))

    def cancel_reservation(self, reservation_id: Any) -> Reservation:
        """Cancel before the start: the refund follows the policy (see ``refunded``)."""
        return self._reservation(self._reservation_cancel_data(reservation_id))

    def relaunch_reservation(self, reservation_id: Any) -> Instance:
        """A new instance (empty /workspace) on the reserved GPUs, for an active reservation
        whose instance was terminated; nothing more is charged."""
        path = f"reservations/{self._quote(reservation_id)}/relaunch/"
        return self._instance(self._request("POST", path))

    def availability(
        self,
        gpu_model: str | None = None,
        hours: int | None = None,
        start: datetime | str | None = None,
    ) -> dict[str, Any]:
        """Free GPUs per hour ahead: ``{"start", "hours", "models": [{"gpu_model", "total",
        "hours": [{"start", "free", "largest_block"}]}]}`` (every model, or ``gpu_model``)."""
        params: dict[str, Any] = {}
        if gpu_model:
            params["gpu_model"] = gpu_model
        if hours is not None:
            params["hours"] = hours
        if start is not None:
            params["start"] = _instant(start, "start")
        return self._get_json("availability/", params or None)

    # Billing

    def usage(self, month: str | None = None) -> dict[str, Any]:
        """GPU-hours and cost per instance per day for ``month`` ("YYYY-MM"; default this
        month), with ``totals``. Amounts are strings: ``Decimal(row["cost"])``."""
        return self._get_json("usage/", {"month": month} if month else None)

    def usage_csv(self, month: str | None = None) -> bytes:
        params = {"month": month} if month else None
        return self._request("GET", "usage/csv/", params=params, accept="text/csv", raw=True)

    def invoices(self) -> list[dict[str, Any]]:
        """Your issued invoices and credit notes, newest first, with their lines."""
        return self._list("invoices/")

    def get_invoice(self, invoice_id: Any) -> dict[str, Any]:
        return self._get_json(f"invoices/{self._quote(invoice_id)}/")

    def invoice_pdf(self, invoice_id: Any) -> bytes:
        path = f"invoices/{self._quote(invoice_id)}/pdf/"
        return self._request("GET", path, accept="application/pdf", raw=True)

    def invoice_csv(self, invoice_id: Any) -> bytes:
        path = f"invoices/{self._quote(invoice_id)}/csv/"
        return self._request("GET", path, accept="text/csv", raw=True)

    # Plumbing

    def _reservation(self, data: Any) -> Reservation:
        if not isinstance(data, dict):
            raise GpuRentalError(f"the server at {self.base_url} sent no reservation")
        return Reservation.from_api(data, client=self)

    def _reservation_data(self, reservation_id: Any) -> Any:
        return self._get_json(f"reservations/{self._quote(reservation_id)}/")

    def _reservation_cancel_data(self, reservation_id: Any) -> Any:
        return self._request("POST", f"reservations/{self._quote(reservation_id)}/cancel/")

    def _instance(self, data: Any) -> Instance:
        if not isinstance(data, dict):
            raise GpuRentalError(f"the server at {self.base_url} sent no instance")
        return Instance.from_api(data, client=self)

    def _action(self, instance_id: Any, action: str, body: dict[str, Any] | None = None) -> Any:
        return self._request(
            "POST", f"instances/{self._quote(instance_id)}/{action}/", json_body=body
        )

    @staticmethod
    def _quote(object_id: Any) -> str:
        if isinstance(object_id, Instance | Reservation):
            object_id = object_id.id
        return quote(str(object_id), safe="")

    def _get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._request("GET", path, params=params)

    def _list(self, path: str, params: dict[str, Any] | None = None) -> list[Any]:
        """A plain list, or every page of a ``{"results": [...], "next": url}`` list."""
        data = self._get_json(path, params)
        if isinstance(data, list):
            return data
        if not isinstance(data, dict) or "results" not in data:
            raise GpuRentalError(f"the server at {self.base_url} sent no list for {path}")
        items = list(data["results"])
        seen: set[str] = set()
        while data.get("next") and data["next"] not in seen:
            seen.add(data["next"])
            data = self._get_json(data["next"])
            items.extend(data.get("results") or [])
        return items

    def _url(self, path: str) -> str:
        if not path.startswith(("http://", "https://")):
            return self._api_root + path.lstrip("/")
        # A "next" link is absolute. Send it to our own origin only: a server behind a
        # proxy may name itself differently, and the API key must not go anywhere else.
        base, link = urlsplit(self._api_root), urlsplit(path)
        return urlunsplit((base.scheme, base.netloc, link.path, link.query, ""))

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        accept: str = "application/json",
        raw: bool = False,
        read_timeout: float | None = None,
        headers_out: MutableMapping[str, str] | None = None,
    ) -> Any:
        """The answer's JSON; with ``raw``, its body as bytes (a download). Errors are JSON
        either way and raise the typed error. ``read_timeout`` overrides ``timeout`` for
        this call (a long-poll); ``headers_out`` receives the answer's headers."""
        read_timeout = read_timeout or self.timeout
        url = self._url(path)
        headers = {
            "Authorization": f"Bearer {self._api_key}",
            "User-Agent": USER_AGENT,
            "Accept": accept,
        }
        if method == "POST":
            # One key per call, the same on every retry: the server does the work once.
            headers["Idempotency-Key"] = str(uuid.uuid4())
        attempt = 0
        while True:
            try:
                response = self._session.request(
                    method,
                    url,
                    params=params,
                    json=json_body,
                    headers=headers,
                    timeout=(min(10.0, self.timeout), read_timeout),
                )
            except requests.exceptions.SSLError as exc:
                raise ConnectionError(
                    f"TLS failed with the gpurental server at {self.base_url}: {exc}"
                ) from exc
            except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
                if attempt < self.max_retries:
                    self._sleep(self._backoff(attempt))
                    attempt += 1
                    continue
                if isinstance(exc, requests.exceptions.ReadTimeout):
                    raise Timeout(
                        f"the gpurental server at {self.base_url} did not answer "
                        f"{method} {path} within {read_timeout:g}s"
                    ) from exc
                raise ConnectionError(
                    f"cannot reach the gpurental server at {self.base_url}: {_reason(exc)} "
                    "(another server: pass base_url=, set GPURENTAL_URL or run "
                    "`gpurental login --url URL`)"
                ) from exc
            if attempt < self.max_retries and _retryable(response):
                wait = _retry_after(response)
                if wait is None:
                    wait = self._backoff(attempt)
                if wait <= self.max_retry_wait:
                    self._sleep(wait)
                    attempt += 1
                    continue
            if headers_out is not None:
                headers_out.update(response.headers)
            return self._answer(response, raw=raw)

    def _backoff(self, attempt: int) -> float:
        return min(self.backoff * 2**attempt, 8.0)

    def _answer(self, response: requests.Response, *, raw: bool = False) -> Any:
        status = response.status_code
        if 200 <= status < 300:
            if raw:
                return response.content
            if status == 204 or not response.content:
                return None
            try:
                return response.json()
            except ValueError:
                raise GpuRentalError(
                    f"{response.url} answered {status} with something other than JSON; "
                    f"is {self.base_url} a gpurental server?",
                    status=status,
                ) from None
        raise _error_from(response)


def _gpu_choice(gpu_model: str | None, gpu_count: int | None, plan: str | None) -> dict[str, Any]:
    if plan and (gpu_model or gpu_count):
        raise ValueError("pass either gpu_model= (with gpu_count=) or plan=, not both")
    if plan:
        return {"plan": plan}
    if not gpu_model:
        raise ValueError("pass gpu_model= (for example 'A100') or plan=")
    return {"gpu_model": gpu_model, "gpu_count": gpu_count or 1}


def _instant(value: datetime | str, name: str) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            # A wall-clock time alone is ambiguous; the server refuses to guess, and so do we.
            raise ValueError(f"{name} needs a time zone, e.g. datetime(..., tzinfo=UTC)")
        return value.isoformat()
    return str(value)


def _period(start: datetime | str, end: datetime | str) -> dict[str, str]:
    return {"start": _instant(start, "start"), "end": _instant(end, "end")}


def _retryable(response: requests.Response) -> bool:
    if response.status_code in RETRY_STATUSES:
        return True
    # A retried POST whose first try the server is still running (our read timed out):
    # the server answers this and the first try's result once it is done.
    return response.status_code == 409 and _error_code(response) == IN_PROGRESS


def _error_code(response: requests.Response) -> str | None:
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("code") if isinstance(error, dict) else None


def _error_from(response: requests.Response) -> GpuRentalError:
    """The typed error for an API error answer ``{"error": {code, message, fields}}``."""
    status = response.status_code
    code = message = None
    fields: dict[str, list[str]] = {}
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            message = error.get("message")
            fields = _fields(error.get("fields"))
        elif "detail" in body:  # DRF's default shape, should a view bypass ours
            message = str(body["detail"])
        else:
            fields = _fields(body)
    if not message:
        message = f"{response.request.method} {response.url} answered {status} {response.reason}"
    kwargs: dict[str, Any] = {
        "status": status,
        "code": code,
        "fields": fields,
        "headers": response.headers,  # case-insensitive, as a proxy may lowercase names
    }
    if status == 429:
        return RateLimited(message, retry_after=_retry_after(response), **kwargs)
    if status == 409:
        return CONFLICTS.get(code or "", Conflict)(message, **kwargs)
    if status >= 500:
        return ServerError(message, **kwargs)
    return ERRORS_BY_STATUS.get(status, GpuRentalError)(message, **kwargs)


def _fields(value: Any) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        return {}
    return {
        str(name): [str(m) for m in messages] if isinstance(messages, list) else [str(messages)]
        for name, messages in value.items()
    }


def _retry_after(response: requests.Response) -> float | None:
    """Seconds from a ``Retry-After`` header (seconds or an HTTP date), else ``None``."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _reason(exc: Exception) -> str:
    # urllib3 buries the useful part ("Connection refused") deep in a long repr.
    match = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
    if match:
        return match.group(1).strip()
    return "connection timed out" if isinstance(exc, requests.exceptions.Timeout) else str(exc)
