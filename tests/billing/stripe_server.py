"""A real HTTP server that answers like Stripe's API, for the ``stripe`` library to talk to
(``STRIPE_API_BASE``); it records what it was sent. It knows ``POST /v1/checkout/sessions``
(payment and setup mode), ``POST /v1/customers``, ``GET /v1/payment_methods/<id>`` and
``POST /v1/payment_intents`` (off-session charges: ``decline`` makes the next ones fail
as Stripe's 402 card_error does, ``down`` drops the connection unanswered). A repeated
Idempotency-Key gets the first answer again, as at Stripe."""

from __future__ import annotations

import json
import secrets
import socket
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
                if outer.down:
                    # No answer at all (as a timeout or a reset would look): nothing is
                    # recorded against the idempotency key, as at Stripe.
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                key = self.headers.get("Idempotency-Key", "")
                if key and key in outer.answered:
                    return self._answer(*outer.answered[key])
                status, data = outer.answer_post(self.path, form)
                if key:
                    outer.answered[key] = (status, data)
                self._answer(status, data)

            def do_GET(self):
                outer.requests.append({"path": self.path, "form": {}, "method": "GET"})
                if self.path.startswith("/v1/payment_methods/"):
                    method = self.path.rsplit("/", 1)[-1]
                    return self._answer(
                        200,
                        {
                            "id": method,
                            "object": "payment_method",
                            "type": "card",
                            "card": {"brand": "visa", "last4": "4242"},
                        },
                    )
                self._answer(404, {"error": {"type": "invalid_request_error"}})

            def _answer(self, status: int, data: dict) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.send_header("Request-Id", "req_test")
                self.end_headers()
                self.wfile.write(raw)

        self.answered: dict[str, tuple[int, dict]] = {}
        self.decline = ""  # e.g. "card_declined" or "authentication_required"
        self.down = False
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

    @property
    def intents(self) -> list[dict]:
        return [r for r in self.requests if r["path"] == "/v1/payment_intents"]

    def answer_post(self, path: str, form: dict) -> tuple[int, dict]:
        if path == "/v1/customers":
            return 200, {"id": "cus_" + secrets.token_hex(8), "object": "customer"}
        if path == "/v1/payment_intents":
            return self._intent(form)
        if path != "/v1/checkout/sessions":
            return 404, {"error": {"type": "invalid_request_error"}}
        session_id = "cs_test_" + secrets.token_hex(12)
        session = {
            "id": session_id,
            "object": "checkout.session",
            "url": f"https://checkout.stripe.test/c/pay/{session_id}",
            "mode": form.get("mode", "payment"),
            "status": "open",
            "client_reference_id": form.get("client_reference_id"),
            "customer": form.get("customer"),
        }
        if session["mode"] == "setup":
            session["setup_intent"] = "seti_" + secrets.token_hex(8)
            return 200, session
        session.update(
            payment_status="unpaid",
            currency=form.get("line_items[0][price_data][currency]"),
            amount_total=int(form.get("line_items[0][price_data][unit_amount]", 0)),
            metadata={"payment_id": form.get("metadata[payment_id]")},
        )
        return 200, session

    def _intent(self, form: dict) -> tuple[int, dict]:
        intent = {
            "id": "pi_" + secrets.token_hex(12),
            "object": "payment_intent",
            "amount": int(form.get("amount", 0)),
            "currency": form.get("currency"),
            "customer": form.get("customer"),
            "payment_method": form.get("payment_method"),
            "metadata": {
                "payment_id": form.get("metadata[payment_id]"),
                "purpose": form.get("metadata[purpose]"),
            },
        }
        if self.decline:
            intent.update(status="requires_payment_method", amount_received=0)
            error = {
                "type": "card_error",
                "code": self.decline,
                "message": "Your card was declined."
                if self.decline == "card_declined"
                else "This payment requires authentication by the cardholder.",
                "payment_intent": intent,
            }
            if self.decline == "card_declined":
                error["decline_code"] = "insufficient_funds"
            return 402, {"error": error}
        intent.update(status="succeeded", amount_received=intent["amount"])
        return 200, intent
