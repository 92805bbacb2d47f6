"""A real HTTP server that answers like Stripe's ``POST /v1/checkout/sessions``, for the
``stripe`` library to talk to (``STRIPE_API_BASE``); it records what it was sent."""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl


class StripeLikeServer:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                form = dict(parse_qsl(body, keep_blank_values=True))
                outer.requests.append(
                    {
                        "path": self.path,
                        "form": form,
                        "authorization": self.headers.get("Authorization", ""),
                        "idempotency_key": self.headers.get("Idempotency-Key", ""),
                    }
                )
                if self.path != "/v1/checkout/sessions":
                    return self._answer(404, {"error": {"type": "invalid_request_error"}})
                session_id = "cs_test_" + secrets.token_hex(12)
                self._answer(
                    200,
                    {
                        "id": session_id,
                        "object": "checkout.session",
                        "url": f"https://checkout.stripe.test/c/pay/{session_id}",
                        "mode": "payment",
                        "status": "open",
                        "payment_status": "unpaid",
                        "client_reference_id": form.get("client_reference_id"),
                        "currency": form.get("line_items[0][price_data][currency]"),
                        "amount_total": int(form.get("line_items[0][price_data][unit_amount]", 0)),
                        "metadata": {"payment_id": form.get("metadata[payment_id]")},
                    },
                )

            def _answer(self, status: int, data: dict) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.send_header("Request-Id", "req_test")
                self.end_headers()
                self.wfile.write(raw)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> StripeLikeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def sessions(self) -> list[dict]:
        return [r for r in self.requests if r["path"] == "/v1/checkout/sessions"]
