"""pytest plugin: real PostgreSQL and Redis for the test run.

When DATABASE_URL / REDIS_URL are unset, it starts embedded servers in a fresh
temporary directory before Django's settings load, and stops them (and deletes the
directory) at the end. With the variables set, the suite runs against those servers.

Under pytest-xdist the controller starts the servers and its workers inherit the URLs;
each worker has its own test database (pytest-django) and its own Redis database (here).
A test marked ``exclusive`` (it restarts a server every test shares) runs while no other
test does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

_started: Path | None = None
# For the xdist workers too: the embedded servers' directory (unset with external servers)
# and the run's lock directory (exclusive tests).
VAR_DIR_ENV = "GPURENTAL_TEST_VAR_DIR"
LOCK_DIR_ENV = "GPURENTAL_TEST_LOCK_DIR"
_lock_dir: Path | None = None


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # A wrapper runs before pytest-django's own hook, which loads the settings.
    global _started, _lock_dir
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    if not os.environ.get(LOCK_DIR_ENV):  # the first process of the run (xdist's controller)
        _lock_dir = Path(tempfile.mkdtemp(prefix="gpurental-test-locks-"))
        os.environ[LOCK_DIR_ENV] = str(_lock_dir)
    # The test client and test servers speak plain http; production redirects to https.
    os.environ.setdefault("SECURE_SSL_REDIRECT", "0")
    # Its agents are all local: the cache's Redis may be the broker (external REDIS_URL too).
    os.environ.setdefault("ALLOW_BROKER_ON_CACHE", "1")
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from gpurental import embedded

        var_dir = Path(tempfile.mkdtemp(prefix="gpurental-test-"))
        urls = embedded.ensure(var_dir)
        _started = var_dir
        os.environ[VAR_DIR_ENV] = str(var_dir)
        for key, value in urls.items():
            os.environ.setdefault(key, value)
        _throwaway_durability(urls["DATABASE_URL"])
    _own_redis_db_per_xdist_worker()
    return (yield)


def _throwaway_durability(database_url: str) -> None:
    """The test cluster lives for one run: it need not survive a power cut, so commits do
    not wait for the disk (every transactional test flushes the tables; each commit costs
    an fsync otherwise). Production and external servers keep their own settings."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = off")
        conn.execute("SELECT pg_reload_conf()")


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    from django.test import TransactionTestCase

    if "_django_fixture_teardown" not in TransactionTestCase.__dict__:
        TransactionTestCase._django_fixture_teardown = TransactionTestCase._fixture_teardown
    TransactionTestCase._fixture_teardown = _flush_the_tables_with_rows


def _flush_the_tables_with_rows(test_case) -> None:
    """A transactional test's teardown, as Django's flush but truncating only the tables
    that hold rows: a TRUNCATE costs per table (new files for it and its indexes), about
    0.4 s for all 64 here, and a test writes to a handful. Then post_migrate, as flush
    does (content types and permissions come back). Django's own teardown where a test
    asks for available_apps or serialized_rollback."""
    from django.core.management.sql import emit_post_migrate_signal
    from django.db import connections, transaction
    from django.test import TransactionTestCase

    if test_case.available_apps is not None or test_case.serialized_rollback:
        return TransactionTestCase.__dict__["_django_fixture_teardown"](test_case)
    for db_name in test_case._databases_names(include_mirrors=False):
        connection = connections[db_name]
        tables = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        quote = connection.ops.quote_name
        with transaction.atomic(using=db_name), connection.cursor() as cursor:
            cursor.execute(
                " UNION ALL ".join(
                    f"(SELECT {index} FROM {quote(table)} LIMIT 1)"  # noqa: S608 - quoted names
                    for index, table in enumerate(tables)
                )
            )
            holding = [tables[index] for (index,) in cursor.fetchall()]
            if holding:
                cursor.execute(f"TRUNCATE {', '.join(map(quote, holding))} CASCADE")
        emit_post_migrate_signal(verbosity=0, interactive=False, db=db_name)


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
    global _started, _lock_dir
    if _lock_dir is not None:
        shutil.rmtree(_lock_dir, ignore_errors=True)
        _lock_dir = None
    if _started is not None:
        from gpurental import embedded

        embedded.stop(_started)
        shutil.rmtree(_started, ignore_errors=True)
        _started = None


# --- a test that must have the machine to itself ----------------------------------------
# Under xdist (make test) the workers run tests side by side. A test marked ``exclusive``
# (it restarts the Docker Engine or the shared Redis) waits until no other test runs, and
# none starts until it ends: every test holds the run's lock shared, an exclusive one holds
# it alone; a turnstile in front keeps the other workers' next tests from starving it.


def _lock_file(name: str):
    return open(Path(os.environ[LOCK_DIR_ENV]) / name, "a")  # noqa: SIM115 - closed by the caller


@pytest.fixture(autouse=True)
def _exclusive_tests_run_alone(request):
    exclusive = request.node.get_closest_marker("exclusive") is not None
    with (
        contextlib.closing(_lock_file(".turnstile.lock")) as turnstile,
        contextlib.closing(_lock_file(".tests.lock")) as tests,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(tests, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        if not exclusive:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        # A test that waited here for an exclusive one may find PostgreSQL restarted.
        _close_connections_after_a_restart()
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)


def embedded_redis_restart() -> bool:
    """Restart the embedded Redis this run started (it saves and reloads its data, as a
    Redis with persistence does); the test calling it is marked ``exclusive``. False when
    the run uses an external Redis."""
    var_dir = os.environ.get(VAR_DIR_ENV)
    if not var_dir:
        return False
    from gpurental import embedded

    embedded.stop_redis(Path(var_dir))
    embedded.start_redis(Path(var_dir))
    return True


@contextlib.contextmanager
def embedded_postgres_outage():
    """Stop the embedded PostgreSQL this run started for the block, then start it again
    (the test using it is marked ``exclusive``); skips with an external database. Every
    connection open at the stop is dead afterwards: this thread's are closed here, and
    each test process closes its own before its next test (``pytest_runtest_setup``)."""
    var_dir = os.environ.get(VAR_DIR_ENV)
    if not var_dir:
        pytest.skip(
            "stops only the embedded PostgreSQL this run started (DATABASE_URL is external)"
        )
    from django.db import connections

    from gpurental import embedded

    embedded.stop(Path(var_dir), keep=frozenset({"redis"}))
    try:
        yield
    finally:
        embedded.ensure(Path(var_dir))
        _postgres_restarts().touch()
        connections.close_all()


def _postgres_restarts() -> Path:
    return Path(os.environ[LOCK_DIR_ENV]) / "postgres-restarts"


_postgres_restart_seen: int | None = None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _close_connections_after_a_restart()


def _close_connections_after_a_restart() -> None:
    """After a PostgreSQL restart (in any test process), this process's connections to it
    are dead: Django reconnects only once they are closed."""
    global _postgres_restart_seen
    try:
        stamp = _postgres_restarts().stat().st_mtime_ns
    except FileNotFoundError:
        return
    if stamp != _postgres_restart_seen:
        from django.db import connections

        connections.close_all()
        _postgres_restart_seen = stamp


def pytest_report_header(config):
    db = os.environ.get("DATABASE_URL", "")
    where = (
        "embedded servers in a temp dir" if _started else "external servers from the environment"
    )
    return f"gpurental: PostgreSQL and Redis: {where} ({db.split('@')[-1]})"
