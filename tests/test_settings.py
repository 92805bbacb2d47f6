"""Settings refuse production misconfiguration, loudly and by name."""

import os
import subprocess
import sys

import pytest

from gpurental.settings import celery_url, database_from_url

pytestmark = pytest.mark.slow  # a Django process per setting


def _load_settings(**env):
    base = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS"}
    }
    base.update(env)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; from django.conf import settings; settings.DATABASES",
        ],
        env={**base, "DJANGO_SETTINGS_MODULE": "gpurental.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_debug_off_without_secret_key_refuses_to_start():
    result = _load_settings(DEBUG="0")
    assert result.returncode != 0
    assert "SECRET_KEY is not set and DEBUG is off: refusing to start" in result.stderr


def test_debug_off_with_short_secret_key_refuses_to_start():
    result = _load_settings(DEBUG="0", SECRET_KEY="short")
    assert result.returncode != 0
    assert "SECRET_KEY is shorter than 32 characters" in result.stderr


def test_debug_off_with_wildcard_allowed_hosts_refuses_to_start():
    result = _load_settings(DEBUG="0", SECRET_KEY="x" * 50, ALLOWED_HOSTS="*")
    assert result.returncode != 0
    assert "ALLOWED_HOSTS contains '*'" in result.stderr


def test_debug_value_that_is_not_a_boolean_is_named():
    result = _load_settings(DEBUG="maybe")
    assert result.returncode != 0
    assert "DEBUG='maybe' is not a boolean" in result.stderr


def test_debug_off_with_a_real_secret_key_starts():
    result = _load_settings(DEBUG="0", SECRET_KEY="x" * 50)
    assert result.returncode == 0, result.stderr


def test_debug_on_without_secret_key_starts_for_development():
    result = _load_settings(DEBUG="1")
    assert result.returncode == 0, result.stderr


def test_sqlite_database_url_is_refused():
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="PostgreSQL is the only database"):
        database_from_url("sqlite:///db.sqlite3")


def test_database_url_with_socket_directory():
    db = database_from_url("postgresql://postgres:@/gpurental?host=/tmp/pg")
    assert (db["NAME"], db["USER"], db["HOST"], db["PORT"]) == (
        "gpurental",
        "postgres",
        "/tmp/pg",
        "",
    )


def test_database_url_with_a_primary_and_a_replica_connects_to_the_writable_one():
    db = database_from_url(
        "postgres://app:pw@postgres,postgres-replica:5432/gpurental"
        "?target_session_attrs=read-write&connect_timeout=3"
    )
    assert (db["HOST"], db["PORT"]) == ("postgres,postgres-replica", "5432")
    assert db["OPTIONS"] == {"target_session_attrs": "read-write", "connect_timeout": "3"}


def test_database_url_with_tcp_host_and_password():
    db = database_from_url("postgres://app:s%40cret@db.internal:6543/rentals")
    assert (db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "rentals",
        "app",
        "s@cret",
        "db.internal",
        "6543",
    )


def test_unix_socket_redis_url_becomes_kombu_socket_url():
    assert celery_url("unix:///var/redis.sock") == "redis+socket:///var/redis.sock"
    assert (
        celery_url("unix:///var/redis.sock?db=3") == "redis+socket:///var/redis.sock?virtual_host=3"
    )
    assert celery_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_a_unix_socket_broker_uses_the_redis_database_it_names():
    """Two brokers on one Redis in different databases (the tests' xdist workers, or a
    broker beside the cache) must not share queues."""
    import os
    import uuid
    from urllib.parse import parse_qsl, urlencode, urlsplit

    import redis
    from kombu import Connection

    parts = urlsplit(os.environ["REDIS_URL"])
    if parts.scheme != "unix":
        pytest.skip("REDIS_URL is not a unix socket")
    query = dict(parse_qsl(parts.query)) | {"db": "9"}
    url = f"unix://{parts.path}?{urlencode(query)}"
    queue = f"probe-{uuid.uuid4().hex}"
    with Connection(celery_url(url)) as conn:
        conn.SimpleQueue(queue).put({"hello": 1})
    nine, zero = redis.Redis.from_url(url), redis.Redis.from_url(url.replace("db=9", "db=0"))
    try:
        assert nine.llen(queue) == 1 and zero.llen(queue) == 0
    finally:
        nine.delete(queue)
        zero.delete(queue)


PRODUCTION = {  # the production environment the README documents ("Deploying")
    "DEBUG": "0",
    "ALLOWED_HOSTS": "gpus.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://gpus.example.com",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO",
}


def test_the_documented_production_environment_passes_the_deploy_check():
    import secrets

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "SECURE_SSL_REDIRECT"}
    }
    env.update(PRODUCTION, SECRET_KEY=secrets.token_urlsafe(50))
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env={**env, "DJANGO_SETTINGS_MODULE": "gpurental.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_redirects_to_https_with_hsts_and_secure_cookies():
    import secrets

    env = {k: v for k, v in os.environ.items() if k not in {"SECURE_SSL_REDIRECT"}}
    env.update(PRODUCTION, SECRET_KEY=secrets.token_urlsafe(50))
    probe = (
        "from django.conf import settings as s; "
        "print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.SECURE_PROXY_SSL_HEADER)"
    )
    result = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {probe}"],
        env={**env, "DJANGO_SETTINGS_MODULE": "gpurental.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "True",
        "31536000",
        "True",
        "True",
        "('HTTP_X_FORWARDED_PROTO',",
        "'https')",
    ]


def test_secrets_come_from_files_named_by_their_file_setting(tmp_path):
    from gpurental.settings import secrets_from_files

    (tmp_path / "key").write_text("k" * 50 + "\n")
    (tmp_path / "db").write_text("postgres://u:p@db/x\nignored second line\n")
    env = {"SECRET_KEY_FILE": str(tmp_path / "key"), "DATABASE_URL_FILE": str(tmp_path / "db")}
    env["REDIS_URL"], env["REDIS_URL_FILE"] = "redis://set/0", str(tmp_path / "nope")
    env["BROKER_SSL_CA_FILE"] = str(tmp_path / "key")  # a path setting: left alone
    secrets_from_files(env)
    assert env["SECRET_KEY"] == "k" * 50
    assert env["DATABASE_URL"] == "postgres://u:p@db/x"
    assert env["REDIS_URL"] == "redis://set/0"  # the setting itself wins; its file is not read
    assert "BROKER_SSL_CA" not in env


def test_an_unreadable_or_empty_secret_file_refuses_to_start_naming_it(tmp_path):
    (tmp_path / "empty").write_text("\n")
    result = _load_settings(DEBUG="0", SECRET_KEY_FILE=str(tmp_path / "missing"))
    assert result.returncode != 0
    assert f"SECRET_KEY_FILE='{tmp_path / 'missing'}': cannot read it" in result.stderr
    result = _load_settings(DEBUG="0", SECRET_KEY_FILE=str(tmp_path / "empty"))
    assert "the file is empty" in result.stderr


def test_debug_off_with_the_secret_key_in_a_file_starts(tmp_path):
    (tmp_path / "key").write_text("y" * 50)
    result = _load_settings(DEBUG="0", SECRET_KEY_FILE=str(tmp_path / "key"))
    assert result.returncode == 0, result.stderr
