"""Per-host broker accounts on RabbitMQ, through its management HTTP API.

Each host's agent logs in as ``gpurental-host-<name>`` with its join token as the
password. That account may consume only its own queue ``host.<name>`` and publish only
to the ``reports`` topic exchange, with its own routing key ``report.<name>`` (a topic
permission): it can neither read another host's commands nor send them, nor publish to
the ``control`` exchange or queue (where a forged ``reconcile`` would run), nor speak
for another host, nor declare, purge or delete any queue of the control plane.

On by ``RABBITMQ_MANAGEMENT_URL`` (e.g. ``http://admin:…@broker:15672``) with an
``amqp://`` broker. The single-box demo on Redis has no accounts: its one local agent
shares the broker URL (see the README).
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import requests
from django.conf import settings

from gpurental import protocol


class BrokerAccountError(Exception):
    pass


def accounts_enabled() -> bool:
    return bool(settings.RABBITMQ_MANAGEMENT_URL) and protocol.is_amqp(settings.CELERY_BROKER_URL)


def account_name(host_name: str) -> str:
    return f"gpurental-host-{host_name}"


def permissions_for(host_name: str) -> dict[str, str]:
    """RabbitMQ regexes (configure, write, read) for one host's agent.

    - configure: declare its own queue and its exchange (both named ``host.<name>``);
    - write: bind its queue, and publish reports to the ``reports`` exchange (with its own
      routing key only: ``topic_permissions_for``);
    - read: consume its own queue (and bind it to its exchange).
    """
    own = re.escape(protocol.host_queue(host_name))
    reports = re.escape(protocol.REPORTS_EXCHANGE)
    return {"configure": f"^{own}$", "write": f"^({own}|{reports})$", "read": f"^{own}$"}


def topic_permissions_for(host_name: str) -> dict[str, str]:
    """On the ``reports`` topic exchange: publish with its own routing key, read none."""
    return {
        "exchange": protocol.REPORTS_EXCHANGE,
        "write": f"^{re.escape(protocol.report_routing_key(host_name))}$",
        "read": "^$",
    }


def _vhost() -> str:
    path = urlsplit(settings.CELERY_BROKER_URL).path
    return unquote(path[1:]) if len(path) > 1 else "/"


def _api(method: str, path: str, **kwargs) -> requests.Response:
    parts = urlsplit(settings.RABBITMQ_MANAGEMENT_URL)
    base = urlunsplit(
        (parts.scheme, parts.hostname + (f":{parts.port}" if parts.port else ""), "", "", "")
    )
    auth = (unquote(parts.username or ""), unquote(parts.password or ""))
    try:
        response = requests.request(method, f"{base}/api/{path}", auth=auth, timeout=10, **kwargs)
    except requests.RequestException as exc:
        raise BrokerAccountError(f"RabbitMQ management API unreachable: {exc}") from exc
    if response.status_code >= 400 and not (method == "DELETE" and response.status_code == 404):
        raise BrokerAccountError(
            f"RabbitMQ management API: {method} {path} answered {response.status_code} "
            f"{response.text[:200]}"
        )
    return response


def broker_account_ensure(*, host_name: str, password: str) -> None:
    """Create or update the host's account with its password and permissions."""
    user = quote(account_name(host_name), safe="")
    _api("PUT", f"users/{user}", json={"password": password, "tags": ""})
    vhost = quote(_vhost(), safe="")
    _api("PUT", f"permissions/{vhost}/{user}", json=permissions_for(host_name))
    _api("PUT", f"topic-permissions/{vhost}/{user}", json=topic_permissions_for(host_name))


def broker_account_delete(*, host_name: str) -> None:
    _api("DELETE", f"users/{quote(account_name(host_name), safe='')}")


def agent_broker_url(*, host_name: str, password: str) -> str:
    """The broker URL for a host's agent: the control plane's broker, the host's account."""
    parts = urlsplit(settings.CELERY_BROKER_URL)
    where = settings.AGENT_BROKER_ADDRESS or parts.hostname + (
        f":{parts.port}" if parts.port else ""
    )
    credentials = f"{quote(account_name(host_name), safe='')}:{quote(password, safe='')}"
    return urlunsplit((parts.scheme, f"{credentials}@{where}", parts.path, parts.query, ""))
