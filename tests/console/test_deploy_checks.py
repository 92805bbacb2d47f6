"""``manage.py check --deploy`` refuses a gateway domain that shares cookies with the
console's: the same, nested, or beside it under one registrable domain."""

from __future__ import annotations

import pytest
from django.core.checks import Error, Warning, run_checks


def deploy_findings(settings, *, gateway: str, hosts: list[str], public: str) -> list:
    settings.GATEWAY_DOMAIN = gateway
    settings.ALLOWED_HOSTS = hosts
    settings.PUBLIC_URL = public
    return [
        found
        for found in run_checks(include_deployment_checks=True)
        if found.id in {"gpurental.E001", "gpurental.W002"}
    ]


@pytest.mark.parametrize(
    ("gateway", "hosts", "public"),
    [
        ("gpus.example.com", ["gpus.example.com"], "https://gpus.example.com"),  # the same
        ("example.com", ["gpus.example.com"], "https://gpus.example.com"),  # console inside
        ("gw.gpus.example.com", ["gpus.example.com"], "https://gpus.example.com"),
        ("gw.example.com", [".example.com"], "https://example.com"),  # a wildcard host
        ("gw.example-gpu.net", ["127.0.0.1"], "https://gw.example-gpu.net/"),  # PUBLIC_URL
    ],
)
def test_a_gateway_domain_nested_with_the_consoles_is_an_error_naming_both(
    settings, gateway, hosts, public
):
    (found,) = deploy_findings(settings, gateway=gateway, hosts=hosts, public=public)
    assert isinstance(found, Error) and found.id == "gpurental.E001"
    assert f"GATEWAY_DOMAIN ({gateway})" in found.msg
    assert "ALLOWED_HOSTS / PUBLIC_URL" in found.msg


def test_a_gateway_domain_beside_the_consoles_is_a_warning(settings):
    (found,) = deploy_findings(
        settings,
        gateway="gw.example.com",
        hosts=["gpus.example.com"],
        public="https://gpus.example.com",
    )
    assert isinstance(found, Warning) and found.id == "gpurental.W002"
    assert "share the domain example.com" in found.msg


def test_a_gateway_domain_of_its_own_passes(settings):
    assert not deploy_findings(
        settings,
        gateway="example-gpu.net",
        hosts=["gpus.example.com", "127.0.0.1", "localhost"],
        public="https://gpus.example.com",
    )
