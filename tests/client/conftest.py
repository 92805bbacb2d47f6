"""A stand-in for the remote gpurental API, served over real HTTP on 127.0.0.1.

It is a test double, not the server: it answers canned JSON per method and path,
in order (the last answer repeats), and records every request it received. The SDK
talks to it through its real ``requests`` stack: sockets, headers, retries.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpurental.client import Client
from gpurental.client import client as client_module

API_KEY = "gpr_test_key"


@dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None  # sent as is, for non-JSON answers


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


class FakeAPI:
    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Answer]] = {}
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                api._serve(self)

            def do_POST(self) -> None:
                api._serve(self)

            def do_DELETE(self) -> None:
                api._serve(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll interval keeps shutdown (once per test) quick.
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def reply(self, method: str, path: str, *answers: Answer | tuple) -> None:
        """Answer ``method path`` (``path`` may include ``?query``) with these, in order."""
        self.routes[(method, path)] = [a if isinstance(a, Answer) else Answer(*a) for a in answers]

    def received(self, method: str | None = None, path: str | None = None) -> list[Received]:
        return [
            r
            for r in self.requests
            if (method is None or r.method == method) and (path is None or r.path == path)
        ]

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw_body = handler.rfile.read(length) if length else b""
        with self._lock:
            self.requests.append(
                Received(
                    method=handler.command,
                    path=parts.path,
                    query=parse_qs(parts.query),
                    headers=dict(handler.headers.items()),
                    body=json.loads(raw_body) if raw_body else None,
                )
            )
            answers = self.routes.get((handler.command, handler.path)) or self.routes.get(
                (handler.command, parts.path)
            )
            if answers:
                answer = answers.pop(0) if len(answers) > 1 else answers[0]
            else:
                answer = Answer(
                    404,
                    {"error": {"code": "not_found", "message": f"no route {handler.path}"}},
                )
        if answer.delay:
            time.sleep(answer.delay)
        payload = answer.raw if answer.raw is not None else json.dumps(answer.body).encode()
        try:
            handler.send_response(answer.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            for name, value in answer.headers.items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up waiting (the timeout test): expected

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def error(status: int, code: str, message: str, **fields: list[str]) -> Answer:
    """An answer in the API's one error shape."""
    return Answer(status, {"error": {"code": code, "message": message, "fields": fields}})


def instance(id: int = 7, status: str = "pending", **extra: Any) -> dict[str, Any]:
    data = {
        "id": id,
        "name": "notebook",
        "status": status,
        "status_reason": "",
        "gpu_model": "A10G",
        "gpu_count": 1,
        "plan": "a10g-x1",
        "image": "pytorch-2.1",
        "host": "gpu-01",
        "gpu_indices": [0],
        "created_at": "2025-03-01T10:00:00Z",
        "running_since": None,
        "stopped_at": None,
        "jupyter_url": None,
        "events": [],
    }
    data.update(extra)
    return data


@pytest.fixture(autouse=True)
def no_user_config(tmp_path, monkeypatch):
    """Tests never read the developer's key or config."""
    monkeypatch.delenv("GPURENTAL_API_KEY", raising=False)
    monkeypatch.delenv("GPURENTAL_URL", raising=False)
    monkeypatch.setenv("GPURENTAL_CONFIG", str(tmp_path / "config" / "config.json"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.fixture
def api():
    fake = FakeAPI()
    yield fake
    fake.close()


@pytest.fixture
def sleeps(monkeypatch) -> list[float]:
    """Waits the SDK asked for, recorded instead of slept (also for clients the CLI makes)."""
    waited: list[float] = []
    monkeypatch.setattr(client_module, "_sleep", waited.append)
    return waited


@pytest.fixture
def client(api, sleeps) -> Client:
    with Client(api_key=API_KEY, base_url=api.url) as c:
        yield c


@pytest.fixture
def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: connecting is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def logged_in(api, sleeps, monkeypatch):
    """The CLI configured for the stand-in API (its key and URL), with nothing on stdin."""
    import io

    monkeypatch.setenv("GPURENTAL_API_KEY", API_KEY)
    monkeypatch.setenv("GPURENTAL_URL", api.url)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    return api
