"""The platform's own deploy checks (``manage.py check --deploy``)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


def _console_hosts() -> set[str]:
    """The names the console answers to: ALLOWED_HOSTS (a leading dot: and below) and
    PUBLIC_URL's host."""
    hosts = {host.lower().strip(".") for host in settings.ALLOWED_HOSTS if host != "*"}
    public = urlsplit(settings.PUBLIC_URL).hostname
    if public:
        hosts.add(public.lower())
    return {host for host in hosts if host and not _is_address(host)}


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host == "localhost"
    return True


def _inside(name: str, domain: str) -> bool:
    return name == domain or name.endswith("." + domain)


def _parent(name: str) -> str:
    """The last two labels: the registrable domain for most names (not under a two-label
    public suffix such as co.uk)."""
    return ".".join(name.split(".")[-2:])


@register(Tags.security, deploy=True)
def gateway_domain_apart_from_console(app_configs, **kwargs):
    """Every instance serves the customer's own pages at <id>.GATEWAY_DOMAIN. Were that
    domain the console's, or inside it, or beside it under one registrable domain, an
    instance's page could read or plant (cookie tossing) the console's cookies."""
    gateway = settings.GATEWAY_DOMAIN.lower().strip(".")
    hosts = _console_hosts()
    nested = sorted(h for h in hosts if _inside(h, gateway) or _inside(gateway, h))
    if nested:
        return [
            Error(
                f"GATEWAY_DOMAIN ({gateway}) is the console's own domain or nested with it "
                f"(ALLOWED_HOSTS / PUBLIC_URL: {', '.join(nested)}): customers' instances "
                "would serve pages that share the console's cookies.",
                hint="Set GATEWAY_DOMAIN to a registrable domain of its own, e.g. "
                "example-gpu.net for a console at gpus.example.com.",
                id="gpurental.E001",
            )
        ]
    siblings = sorted(h for h in hosts if "." in gateway and _parent(h) == _parent(gateway))
    if siblings:
        return [
            Warning(
                f"GATEWAY_DOMAIN ({gateway}) and the console (ALLOWED_HOSTS / PUBLIC_URL: "
                f"{', '.join(siblings)}) share the domain {_parent(gateway)}: an instance's "
                "page could set cookies there that the console reads.",
                hint="Give GATEWAY_DOMAIN a registrable domain of its own (this check takes "
                "the last two labels for it: under a suffix like co.uk it may warn wrongly).",
                id="gpurental.W002",
            )
        ]
    return []
