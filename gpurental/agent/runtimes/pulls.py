"""Pulling a customer's own image: progress the console shows, the operator's size and time
limits, and the registry's reason in words when it fails.

The engine streams one JSON line per layer event (``Pulling fs layer``, ``Downloading``
with ``progressDetail`` {current, total}, ``Download complete``, ``Pull complete``,
``Already exists``) or an ``error``. The docker SDK's ``pull`` reads that stream with no
timeout and no way to close it, so this reads the same endpoint through the SDK's client
directly and closes the response at the deadline or the size limit; the engine then
cancels the pull.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import docker.auth
import docker.errors
import requests.exceptions

from gpurental import imagerefs

from .base import PullPolicy, RuntimeFailure

REPORT_EVERY_S = 1.0  # at most one progress line a second (and the last one)
_DONE = ("Pull complete", "Already exists")
# The lines about one layer; the others ("Pulling from …", "Digest: …", "Status: …") are
# about the image as a whole.
_LAYER_STATUSES = frozenset(
    {
        "Pulling fs layer",
        "Waiting",
        "Downloading",
        "Verifying Checksum",
        "Download complete",
        "Extracting",
        "Retrying",
        *_DONE,
    }
)


@dataclass
class PullState:
    """Each layer's bytes so far and its size (compressed, as the registry sends it)."""

    layers: dict[str, list[int]] = field(default_factory=dict)  # id → [current, total]
    done: set[str] = field(default_factory=set)

    def read(self, line: dict) -> None:
        layer, status = line.get("id"), line.get("status", "")
        if not layer or status.split(" in ")[0] not in _LAYER_STATUSES:  # "Retrying in 5 seconds"
            return
        entry = self.layers.setdefault(layer, [0, 0])
        detail = line.get("progressDetail") or {}
        if status == "Downloading" and detail.get("total"):
            entry[0], entry[1] = int(detail.get("current", 0)), int(detail["total"])
        elif status in ("Download complete", *_DONE):
            entry[0] = entry[1] = max(entry)
        if status in _DONE:
            self.done.add(layer)

    @property
    def figures(self) -> dict:
        got = sum(current for current, _ in self.layers.values())
        total = sum(size for _, size in self.layers.values())
        percent = round(100 * got / total, 1) if total else 0.0
        if self.layers and len(self.done) == len(self.layers):
            percent = 100.0
        return {
            "layers": len(self.layers),
            "layers_done": len(self.done),
            "bytes": got,
            "total": total,
            "percent": percent,
        }

    def line(self, reference: str) -> str:
        f = self.figures
        if not f["layers"]:
            return f"pulling {reference}: the image here is up to date"
        return (
            f"pulling {reference}: {f['layers_done']}/{f['layers']} layers, "
            f"{f['bytes'] / 1e6:.1f}/{f['total'] / 1e6:.1f} MB ({f['percent']:.0f}%)"
        )


def _in_words(reference: imagerefs.Reference, message: str, *, with_login: bool) -> str:
    """The engine's error, and what it means for the customer."""
    lowered = message.lower()
    if "unauthorized" in lowered or "no basic auth" in lowered or "denied" in lowered:
        hint = (
            f"the registry {reference.registry} refused the login saved for it: save the "
            f"right one (gpurental registry login {reference.registry})"
            if with_login
            else f"the registry {reference.registry} asks for a login, and none is saved "
            f"for it: save one (gpurental registry login {reference.registry})"
        )
    elif "manifest unknown" in lowered or "not found" in lowered:
        hint = f"{reference.registry} has no image {reference.repository}:{reference.pull_tag}"
    elif "connection refused" in lowered or "no such host" in lowered or "timeout" in lowered:
        hint = f"the registry {reference.registry} does not answer"
    else:
        hint = "the registry refused the pull"
    return f"could not pull {reference}: {hint} (registry said: {message.strip()[:400]})"


def pull(
    api: docker.APIClient,
    reference: imagerefs.Reference,
    policy: PullPolicy,
    progress: Callable[..., None],
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Pull ``reference`` under ``policy``, reporting progress; RuntimeFailure in words when
    the registry refuses, the image is larger than allowed, or the time runs out."""
    headers = {}
    if policy.auth:
        headers["X-Registry-Auth"] = docker.auth.encode_header(policy.auth)
    params = {"fromImage": reference.pull_name, "tag": reference.pull_tag}
    state, name = PullState(), str(reference)
    deadline = clock() + policy.timeout_s
    progress(f"pulling {name} from {reference.registry}", pull=state.figures)
    try:
        # The timeout bounds each wait for the engine (its first answer included); the
        # watchdog below, the pull as a whole.
        response = api._post(  # noqa: SLF001 - the SDK's pull keeps the response from us
            api._url("/images/create"),
            params=params,
            headers=headers,
            stream=True,
            timeout=policy.timeout_s,
        )
    except requests.exceptions.Timeout as exc:
        raise RuntimeFailure(_too_slow(name, policy.timeout_s, state)) from exc
    except requests.exceptions.ConnectionError as exc:
        raise RuntimeFailure(f"no Docker Engine answers to pull {name} ({exc})") from exc
    # The stream may stall (a registry that stops sending): the watchdog closes it then.
    watchdog = threading.Timer(policy.timeout_s, response.close)
    watchdog.daemon = True
    watchdog.start()
    reported_at = clock()
    try:
        try:
            api._raise_for_status(response)  # noqa: SLF001
        except docker.errors.APIError as exc:
            raise RuntimeFailure(
                _in_words(reference, str(exc.explanation or exc), with_login=bool(policy.auth))
            ) from exc
        for line in api._stream_helper(response, decode=True):  # noqa: SLF001
            if "error" in line:
                detail = (line.get("errorDetail") or {}).get("message") or line["error"]
                raise RuntimeFailure(
                    _in_words(reference, str(detail), with_login=bool(policy.auth))
                )
            state.read(line)
            if state.figures["total"] > policy.max_bytes:
                raise RuntimeFailure(too_large(name, state.figures["total"], policy.max_bytes))
            if clock() > deadline:
                raise RuntimeFailure(_too_slow(name, policy.timeout_s, state))
            if clock() - reported_at >= REPORT_EVERY_S:
                reported_at = clock()
                progress(state.line(name), pull=state.figures)
    except (requests.exceptions.RequestException, AttributeError, ValueError) as exc:
        # The watchdog closed the response under the reader, or a read timed out.
        if clock() >= deadline:
            raise RuntimeFailure(_too_slow(name, policy.timeout_s, state)) from exc
        raise RuntimeFailure(f"the pull of {name} broke off: {exc}") from exc
    finally:
        watchdog.cancel()
        response.close()
    if clock() >= deadline and len(state.done) < len(state.layers):
        raise RuntimeFailure(_too_slow(name, policy.timeout_s, state))
    progress(state.line(name), pull=state.figures)


def too_large(name: str, size: int, limit: int) -> str:
    return (
        f"could not pull {name}: it is larger than this platform allows "
        f"({size / 1e9:.2f} GB, the limit is {limit / 1e9:.2f} GB)"
    )


def _too_slow(name: str, timeout_s: float, state: PullState) -> str:
    return (
        f"could not pull {name}: the pull took longer than this platform allows "
        f"({timeout_s:.0f} s; {state.figures['percent']:.0f}% done)"
    )
