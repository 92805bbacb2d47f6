"""Behind a reverse proxy the client is the address the trusted proxies name, not the
proxy's: logins lock out, throttles count and the audit log records the real client. A
header from anyone else is ignored (gpurental/addresses.py)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from gpurental.accounts.models import AuditEvent
from gpurental.addresses import client_address, forwarded_for, trusted_networks

PROXY = "10.0.0.2"
TRUSTED = trusted_networks(("10.0.0.0/24", "2001:db8:1::/48"))


@pytest.mark.parametrize(
    ("peer", "chain", "client"),
    [
        ("198.51.100.7", "", "198.51.100.7"),  # straight in, no proxy
        ("198.51.100.7", "203.0.113.66", "198.51.100.7"),  # a header from a client: ignored
        (PROXY, "198.51.100.7", "198.51.100.7"),
        # The client wrote the left part itself; the proxy appended what it saw.
        (PROXY, "1.2.3.4, 198.51.100.7", "198.51.100.7"),
        (PROXY, "1.2.3.4, 198.51.100.7, 10.0.0.9", "198.51.100.7"),  # two proxies
        (PROXY, "10.0.0.8, 10.0.0.9", "10.0.0.8"),  # all proxies: the first
        (PROXY, "", PROXY),  # a proxy that names nobody
        (PROXY, "nonsense, 10.0.0.9", "10.0.0.9"),  # the walk stops at what is no address
        ("::ffff:10.0.0.2", "198.51.100.7", "198.51.100.7"),  # dual-stack socket
        ("2001:db8:1::5", "[2001:db8:2::7]:4431", "2001:db8:2::7"),
        (PROXY, "198.51.100.7:5123", "198.51.100.7"),
    ],
)
def test_the_client_is_the_right_most_address_no_trusted_proxy_wrote(peer, chain, client):
    assert client_address(peer=peer, forwarded_for=chain, trusted=TRUSTED) == client


def test_without_trusted_proxies_the_header_is_never_read():
    assert client_address(peer=PROXY, forwarded_for="198.51.100.7", trusted=()) == PROXY


def test_the_gateway_appends_to_a_trusted_proxys_chain_and_replaces_anyone_elses():
    assert forwarded_for(peer=PROXY, incoming="198.51.100.7", trusted=TRUSTED) == (
        "198.51.100.7, 10.0.0.2"
    )
    assert forwarded_for(peer="198.51.100.7", incoming="1.2.3.4", trusted=TRUSTED) == (
        "198.51.100.7"
    )
    assert forwarded_for(peer=PROXY, incoming=None, trusted=TRUSTED) == PROXY


def test_a_trusted_proxies_entry_that_is_no_address_is_named():
    with pytest.raises(ValueError, match=r"TRUSTED_PROXIES: 'proxy\.internal' is not an IP"):
        trusted_networks(("10.0.0.1", "proxy.internal"))


# --- through the proxy: logins and throttles ------------------------------------------------


@pytest.fixture
def behind_proxy(settings):
    settings.TRUSTED_PROXIES = ["10.0.0.0/24"]
    settings.AXES_FAILURE_LIMIT = 3


def login(client, email, password, *, via=PROXY, forwarded="198.51.100.1"):
    return client.post(
        "/login/",
        {"username": email, "password": password},
        REMOTE_ADDR=via,
        HTTP_X_FORWARDED_FOR=forwarded,
    )


@pytest.mark.backend
def test_one_client_locked_out_behind_the_proxy_leaves_another_logging_in(
    client, alice, behind_proxy
):
    alice.set_password("the-right-one")
    alice.save()
    for name in ("a@example.com", "b@example.com", "c@example.com"):
        login(client, name, "wrong", forwarded="198.51.100.1")
    assert login(client, "d@example.com", "wrong", forwarded="198.51.100.1").status_code == 429
    answer = login(client, alice.email, "the-right-one", forwarded="198.51.100.2")
    assert answer.status_code == 302, "the attacker's lockout must not lock out everyone"
    failed = AuditEvent.objects.filter(action="auth.login_failed")
    assert set(failed.values_list("ip_address", flat=True)) == {"198.51.100.1"}
    assert AuditEvent.objects.get(action="auth.login").ip_address == "198.51.100.2"


@pytest.mark.backend
def test_a_forged_forwarded_for_from_a_client_does_not_escape_its_lockout(
    client, alice, behind_proxy
):
    for number in range(3):
        login(
            client, f"{number}@example.com", "wrong", via="203.0.113.9", forwarded=f"1.1.1.{number}"
        )
    locked = login(client, alice.email, "x", via="203.0.113.9", forwarded="192.0.2.200")
    assert locked.status_code == 429


def docs(client: APIClient, *, via=PROXY, forwarded: str | None = None):
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    return client.get("/api/docs/", REMOTE_ADDR=via, **extra)


@pytest.mark.backend
def test_the_api_throttles_each_client_behind_the_proxy_on_its_own(behind_proxy, settings):
    settings.API_THROTTLE_RATE = "2/min"
    api = APIClient()
    for _ in range(2):
        assert docs(api, forwarded="198.51.100.1").status_code == 200
    assert docs(api, forwarded="198.51.100.1").status_code == 429
    assert docs(api, forwarded="6.6.6.6, 198.51.100.1").status_code == 429
    assert docs(api, forwarded="198.51.100.2").status_code == 200


@pytest.mark.backend
def test_the_api_throttle_ignores_a_forwarded_for_from_anyone_but_a_proxy(behind_proxy, settings):
    settings.API_THROTTLE_RATE = "2/min"
    api = APIClient()
    answers = [
        docs(api, via="203.0.113.9", forwarded=f"198.51.100.{number}").status_code
        for number in range(3)
    ]
    assert answers == [200, 200, 429]
