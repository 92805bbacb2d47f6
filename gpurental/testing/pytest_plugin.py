"""pytest plugin: real PostgreSQL and Redis for the test run.

When DATABASE_URL / REDIS_URL are unset, it starts embedded servers in a fresh
temporary directory before Django's settings load, and stops them (and deletes the
directory) at the end. With the variables set, the suite runs against those servers.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

_started: Path | None = None


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # A wrapper runs before pytest-django's own hook, which loads the settings.
    global _started
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    # The test client and test servers speak plain http; production redirects to https.
    os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from gpurental import embedded

        var_dir = Path(tempfile.mkdtemp(prefix="gpurental-test-"))
        urls = embedded.ensure(var_dir)
        _started = var_dir
        for key, value in urls.items():
            os.environ.setdefault(key, value)
    _own_redis_db_per_xdist_worker()
    return (yield)


def _own_redis_db_per_xdist_worker() -> None:
    """Under pytest-xdist each worker gets its own test database (pytest-django) and here
    its own Redis database: counting down from the run's, so workers never share queues,
    channel groups or cache keys."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or os.environ.get("GPURENTAL_TEST_REDIS_DB_SET"):
        return
    if int(worker[2:]) >= 15:
        raise RuntimeError(f"{worker}: at most 15 xdist workers (Redis has 16 databases)")
    parts = urlsplit(os.environ["REDIS_URL"])
    query = dict(parse_qsl(parts.query))
    if parts.scheme == "unix":  # the embedded Redis: unix:///path/redis.sock?db=N
        base = int(query.get("db", 0))
        query["db"] = str((base - 1 - int(worker[2:])) % 16)
        url = f"unix://{parts.path}?{urlencode(query)}"  # urlunsplit would drop the //
    else:  # redis://host:port/N
        base = int(parts.path.strip("/") or 0)
        url = urlunsplit(parts._replace(path=f"/{(base - 1 - int(worker[2:])) % 16}"))
    os.environ["REDIS_URL"] = url
    os.environ["GPURENTAL_TEST_REDIS_DB_SET"] = "1"


def pytest_unconfigure(config):
    global _started
    if _started is not None:
        from gpurental import embedded

        embedded.stop(_started)
        shutil.rmtree(_started, ignore_errors=True)
        _started = None


def embedded_redis_restart() -> bool:
    """Restart the embedded Redis this run started (it saves and reloads its data, as a
    Redis with persistence does). False when the run uses an external Redis."""
    if _started is None:
        return False
    from gpurental import embedded

    embedded.stop_redis(_started)
    embedded.start_redis(_started)
    return True


def pytest_report_header(config):
    db = os.environ.get("DATABASE_URL", "")
    where = (
        "embedded servers in a temp dir" if _started else "external servers from the environment"
    )
    return f"gpurental: PostgreSQL and Redis: {where} ({db.split('@')[-1]})"
