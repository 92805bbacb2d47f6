"""The instance gateway end to end: a real instance (Docker, the host agent, JupyterLab)
behind the real gateway process, reached at its own origin ``<id>.gw.localhost``.

Requests go to 127.0.0.1 with the instance's Host header: that is what a browser sends
for ``http://<id>.gw.localhost:<port>/`` (Chromium resolves *.localhost itself; the
browser test does it that way). Cookies are handled by hand, so each test says exactly
which cookie goes where.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import aiohttp
import pytest
import requests

from gpurental.gateway import routes, tickets
from gpurental.rentals.models import Instance
from gpurental.rentals.services import lifecycle
from gpurental.testing.agent_process import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]


class Origin:
    """One instance origin as a browser would use it, through the gateway on loopback."""

    def __init__(self, base: str, instance_id, port: int | None = None):
        self.base = base
        self.instance_id = str(instance_id)
        self.origin = routes.origin(instance_id, port)
        self.host = self.origin.split("://", 1)[1]

    def request(self, method: str, path: str, *, cookie: str | None = None, **kwargs):
        headers = {"Host": self.host, **kwargs.pop("headers", {})}
        if cookie:
            headers["Cookie"] = cookie
        return requests.request(
            method,
            f"{self.base}{path}",
            headers=headers,
            allow_redirects=False,
            timeout=15,
            **kwargs,
        )

    def enter(self, link: str) -> str:
        """Spend a one-time link; the cookie it sets, as a Cookie header."""
        path = link.split(self.host, 1)[1]
        answer = self.request("GET", path)
        assert answer.status_code == 302, answer.text
        assert answer.headers["Location"] in ("/lab", "/")
        set_cookie = answer.headers["Set-Cookie"]
        assert "HttpOnly" in set_cookie and "Domain" not in set_cookie, set_cookie
        assert "SameSite=Lax" in set_cookie
        return set_cookie.split(";", 1)[0]


def launch_running(user, image, gpu_model) -> Instance:
    instance = lifecycle.instance_launch(user=user, image=image, gpu_model=gpu_model, gpu_count=1)
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status in ("running", "failed"),
        90,
        "the instance to run",
    )
    instance.refresh_from_db()
    assert instance.status == "running", instance.status_reason
    return instance


def link_for(user, instance) -> str:
    return tickets.connect(user=user, instance=instance).url


async def kernel_round_trip(origin: Origin, cookie: str, kernel_id: str, code: str) -> dict:
    """Run ``code`` on the kernel through the gateway's websocket; the execute_result."""
    url = f"{origin.base.replace('http', 'ws', 1)}/api/kernels/{kernel_id}/channels"
    headers = {"Host": origin.host, "Cookie": cookie, "Origin": origin.origin}
    msg_id = uuid.uuid4().hex
    request = {
        "header": {
            "msg_id": msg_id,
            "username": "test",
            "session": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "content": {"code": code, "silent": False, "store_history": False},
        "channel": "shell",
    }
    async with aiohttp.ClientSession() as session, session.ws_connect(url, headers=headers) as ws:
        await ws.send_str(json.dumps(request))
        async with asyncio.timeout(30):
            async for message in ws:
                data = json.loads(message.data)
                if (
                    data.get("parent_header", {}).get("msg_id") == msg_id
                    and data.get("msg_type") == "execute_result"
                ):
                    return data["content"]
    raise AssertionError("the kernel socket closed before the result")


def test_the_owner_gets_in_with_a_one_time_link_and_runs_a_cell_over_the_gateway(
    gateway, agent, catalog, alice
):
    gpu_model, image = catalog
    instance = launch_running(alice, image, gpu_model)
    site = Origin(gateway, instance.pk)

    link = link_for(alice, instance)
    assert instance.jupyter_token not in link
    cookie = site.enter(link)
    # One use only: the same link again finds nothing.
    assert site.request("GET", link.split(site.host, 1)[1]).status_code == 404

    status = site.request("GET", "/api/status", cookie=cookie)
    assert status.status_code == 200, status.text
    lab = site.request("GET", "/lab", cookie=cookie)
    assert lab.status_code == 200 and "JupyterLab" in lab.text
    assert instance.jupyter_token not in lab.text  # the token never reaches the browser

    # Changing requests must come from this very origin (the injected token turns off
    # JupyterLab's own XSRF check): none, or a sibling's, is refused.
    sibling = routes.origin(uuid.uuid4())
    assert site.request("POST", "/api/kernels", cookie=cookie, json={}).status_code == 403
    refused = site.request(
        "POST", "/api/kernels", cookie=cookie, json={}, headers={"Origin": sibling}
    )
    assert refused.status_code == 403
    kernel = site.request(
        "POST", "/api/kernels", cookie=cookie, json={}, headers={"Origin": site.origin}
    )
    assert kernel.status_code == 201, kernel.text

    result = asyncio.run(kernel_round_trip(site, cookie, kernel.json()["id"], "1+1"))
    assert result["data"]["text/plain"] == "2"


@pytest.mark.backend
def test_nobody_else_gets_in_and_a_stop_closes_the_door_at_once(
    gateway, agent, catalog, alice, bob
):
    gpu_model, image = catalog
    instance = launch_running(alice, image, gpu_model)
    site = Origin(gateway, instance.pk)
    cookie = site.enter(link_for(alice, instance))

    # Anonymous: 404, and JupyterLab's own token does not open the door either.
    assert site.request("GET", "/api/status").status_code == 404
    token = {"Authorization": f"token {instance.jupyter_token}"}
    assert site.request("GET", "/api/status", headers=token).status_code == 404
    assert site.request("GET", f"/api/status?token={instance.jupyter_token}").status_code == 404
    # Bob with a session cookie for his own instance's origin: 404 at alice's.
    bobs = launch_running(bob, image, gpu_model)
    bobs_cookie = Origin(gateway, bobs.pk).enter(link_for(bob, bobs))
    assert site.request("GET", "/api/status", cookie=bobs_cookie).status_code == 404
    # Even a correctly signed cookie for alice's origin does not let bob in.
    name = tickets.cookie_name(secure=False)
    forged = tickets.cookie_value(
        user_id=bob.pk, label=str(instance.pk), run=routes.run_of(instance.jupyter_token)
    )
    assert site.request("GET", "/api/status", cookie=f"{name}={forged}").status_code == 404
    # A link is bound to its origin: alice's link at bob's origin is refused (and spent).
    assert (
        Origin(gateway, bobs.pk)
        .request("GET", link_for(alice, instance).split(site.host, 1)[1])
        .status_code
        == 404
    )

    # A cookie of the same name tossed at the parent domain by a sibling's page does not
    # shadow the real one (and does not let its holder in).
    tossed = f"{name}={bobs_cookie.split('=', 1)[1]}; {cookie}"
    assert site.request("GET", "/api/status", cookie=tossed).status_code == 200

    # What a client sends in the token's place is replaced, not passed on.
    spoofed = site.request(
        "GET",
        "/api/status?token=nonsense",
        cookie=cookie,
        headers={"Authorization": "token nonsense"},
    )
    assert spoofed.status_code == 200

    # Stop: an open kernel socket is closed, and the very next request is refused, long
    # before any cache could expire.
    kernel = site.request(
        "POST", "/api/kernels", cookie=cookie, json={}, headers={"Origin": site.origin}
    )
    closed_after = asyncio.run(
        socket_closed_after_stop(site, cookie, kernel.json()["id"], instance, alice)
    )
    assert closed_after < 2
    started = time.monotonic()
    wait_for(
        lambda: site.request("GET", "/api/status", cookie=cookie).status_code == 404,
        5,
        "the gateway to refuse",
    )
    assert time.monotonic() - started < 2
    # Started again: a new token for JupyterLab; the old cookie is void, a new link works.
    old_token = instance.jupyter_token
    wait_for(lambda: Instance.objects.get(pk=instance.pk).status == "stopped", 60, "stopped")
    lifecycle.instance_start(instance=Instance.objects.get(pk=instance.pk), actor=alice)
    instance = launch_wait(instance)
    assert instance.jupyter_token != old_token
    assert site.request("GET", "/api/status", cookie=cookie).status_code == 404
    fresh = site.enter(link_for(alice, instance))
    assert site.request("GET", "/api/status", cookie=fresh).status_code == 200


def stop_in_thread(instance, user) -> None:
    from django.db import connection

    try:
        lifecycle.instance_stop(instance=Instance.objects.get(pk=instance.pk), actor=user)
    finally:
        connection.close()  # this thread's own connection, or the test database stays in use


async def socket_closed_after_stop(origin: Origin, cookie: str, kernel_id: str, instance, user):
    """Open the kernel's socket through the gateway, stop the instance: seconds until the
    gateway closed the socket."""
    url = f"{origin.base.replace('http', 'ws', 1)}/api/kernels/{kernel_id}/channels"
    headers = {"Host": origin.host, "Cookie": cookie, "Origin": origin.origin}
    async with aiohttp.ClientSession() as session, session.ws_connect(url, headers=headers) as ws:
        await asyncio.to_thread(stop_in_thread, instance, user)
        started = time.monotonic()
        async with asyncio.timeout(10):
            async for _ in ws:
                pass
        assert ws.closed
        return time.monotonic() - started


def launch_wait(instance: Instance) -> Instance:
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status in ("running", "failed", "stopped"),
        90,
        "the instance to run again",
    )
    instance.refresh_from_db()
    assert instance.status == "running", instance.status_reason
    return instance
