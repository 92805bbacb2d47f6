import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpurental.celery_app import app


class Receiver:
    """A real HTTP server on 127.0.0.1 that records each POST and answers with the next of
    ``codes`` (200 once they run out)."""

    def __init__(self):
        self.requests: list[dict] = []
        self.codes: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                code = receiver.codes.pop(0) if receiver.codes else 200
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def events(self) -> list[dict]:
        return [json.loads(r["body"]) for r in self.requests]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def notification_settings(settings):
    """Loopback webhooks allowed (the receiver is local), links from a known PUBLIC_URL, and
    Celery tasks run in-process (eagerly), as a worker would run them."""
    settings.WEBHOOKS_ALLOW_PRIVATE = True
    settings.PUBLIC_URL = "https://gpus.example.test"
    settings.WEBHOOKS_RETRY_BASE_S = 10
    settings.WEBHOOKS_MAX_ATTEMPTS = 4
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = eager


@pytest.fixture
def endpoint(alice, receiver):
    from gpurental.notifications.services import endpoint_create

    return endpoint_create(user=alice, url=receiver.url, description="test")


@pytest.fixture
def fire(django_capture_on_commit_callbacks):
    """Run ``fn`` and then what it left for after the commit (e-mails, webhook tasks)."""

    def run(fn, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return run
