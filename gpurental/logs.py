"""Structured logs that let one launch be followed across web, worker and agent.

Django-free, beside ``protocol``: the agent imports it too (it imports no Django app).
The ids of what a line is about live in context variables (a request, a task, an agent
command sets them); a logging filter copies them onto every record, and ``JsonFormatter``
writes one JSON object a line. Celery carries the request id and instance id from the
process that sends a task to the one that runs it in two message headers, set by
``before_task_publish`` and read back by ``task_prerun`` (both sides connect
``connect_celery``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import time
import uuid
from collections.abc import Iterator

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
instance_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "instance_id", default=None
)
host_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("host_id", default=None)
FIELDS = {"request_id": request_id, "instance_id": instance_id, "host": host_id}
# Ids true for the whole process (an agent's host): threads start with an empty context.
_process_ids: dict[str, str] = {}

# Message headers (a contract between every process that sends or runs tasks).
HEADER_REQUEST_ID = "gpurental_request_id"
HEADER_INSTANCE_ID = "gpurental_instance_id"
HEADER_SENT_AT = "gpurental_sent_at"  # epoch seconds: the queue's oldest-message age

REQUEST_ID_HEADER = "X-Request-Id"
FORMATS = ("text", "json")


def new_request_id() -> str:
    return uuid.uuid4().hex


def clean_request_id(value: str | None) -> str | None:
    """An incoming X-Request-Id worth keeping (a proxy's), else None: short, printable."""
    if value and len(value) <= 64 and all(c.isalnum() or c in "-_.:" for c in value):
        return value
    return None


@contextlib.contextmanager
def bound(**ids: str | None) -> Iterator[None]:
    """Within the block, log lines carry these ids (request_id, instance_id, host)."""
    tokens = [(FIELDS[name], FIELDS[name].set(value)) for name, value in ids.items()]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def bind_process(**ids: str) -> None:
    """Ids every line of this process carries unless its context says otherwise."""
    _process_ids.update(ids)


def current(name: str) -> str | None:
    value = FIELDS[name].get()
    return _process_ids.get(name) if value is None else value


def bind(**ids: str | None) -> None:
    """Set ids for the rest of the current context (a task, a request's thread)."""
    for name, value in ids.items():
        FIELDS[name].set(value)


class ContextFilter(logging.Filter):
    """Copies the current ids onto each record (``record.request_id`` …; None if unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name in FIELDS:
            if getattr(record, name, None) is None:
                setattr(record, name, current(name))
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the known ids, the exception."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "process": record.processName if record.processName != "MainProcess" else None,
            "pid": record.process,
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is None:
                value = current(name)
            if value is not None:
                line[name] = str(value)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps({k: v for k, v in line.items() if v is not None}, default=str)


class TextFormatter(logging.Formatter):
    """The plain format, with whichever ids are known appended as key=value."""

    def __init__(self):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        ids = [f"{n}={getattr(record, n)}" for n in FIELDS if getattr(record, n, None)]
        return f"{text} [{' '.join(ids)}]" if ids else text


def formatter_for(log_format: str) -> logging.Formatter:
    if log_format not in FORMATS:
        raise ValueError(f"LOG_FORMAT={log_format!r}: use one of {', '.join(FORMATS)}")
    return JsonFormatter() if log_format == "json" else TextFormatter()


def configure(*, log_format: str, level: str = "INFO") -> None:
    """The root logger, for processes without Django's LOGGING (the agent)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter_for(log_format))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


# --- Celery: ids travel in message headers ------------------------------------


log = logging.getLogger("gpurental.tasks")


def message_instance_id(kwargs) -> str | None:
    """The instance a task message is about: ``instance_id`` (reports, stop, remove) or
    the spec's (start, restart)."""
    if not isinstance(kwargs, dict):
        return None
    spec = kwargs.get("spec")
    found = kwargs.get("instance_id") or (
        spec.get("instance_id") if isinstance(spec, dict) else None
    )
    return str(found) if found else None


def _on_publish(sender=None, body=None, headers=None, routing_key=None, **kwargs) -> None:
    if headers is None:
        return
    headers.setdefault(HEADER_SENT_AT, time.time())
    if (rid := request_id.get()) is not None:
        headers.setdefault(HEADER_REQUEST_ID, rid)
    # Message protocol 2: the body is (args, kwargs, embed).
    task_kwargs = body[1] if isinstance(body, list | tuple) and len(body) > 1 else None
    iid = message_instance_id(task_kwargs) or instance_id.get()
    if iid is not None:
        headers.setdefault(HEADER_INSTANCE_ID, iid)
        log.info("sent %s to %s", sender, routing_key, extra={"instance_id": iid})


def _header(request, name: str):
    # A worker puts a message's own headers on the request; an eager call keeps them apart.
    return getattr(request, name, None) or (getattr(request, "headers", None) or {}).get(name)


def _on_prerun(task=None, kwargs=None, **extra) -> None:
    req = getattr(task, "request", None)
    iid = _header(req, HEADER_INSTANCE_ID) or message_instance_id(kwargs)
    bind(request_id=_header(req, HEADER_REQUEST_ID), instance_id=iid)
    if iid is not None:
        log.info("running %s", getattr(task, "name", task))


def _on_postrun(task=None, state=None, **kwargs) -> None:
    if instance_id.get() is not None:
        log.info("%s: %s", getattr(task, "name", task), state)
    # A worker thread runs task after task: the next one starts with no ids.
    bind(request_id=None, instance_id=None)


def connect_celery() -> None:
    """Carry the ids through Celery messages (connect once per process; repeats are no-ops)."""
    from celery.signals import before_task_publish, task_postrun, task_prerun

    before_task_publish.connect(_on_publish, weak=False, dispatch_uid="gpurental-logs-publish")
    task_prerun.connect(_on_prerun, weak=False, dispatch_uid="gpurental-logs-prerun")
    task_postrun.connect(_on_postrun, weak=False, dispatch_uid="gpurental-logs-postrun")
