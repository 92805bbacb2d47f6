"""``python -m gpurental.embedded run`` stops only the servers it started itself."""

import signal
import sys

import pytest

from gpurental import embedded

pytestmark = pytest.mark.slow  # starts embedded PostgreSQL and Redis


@pytest.fixture(autouse=True)
def signal_handlers():
    """``_run`` hands Ctrl-C to its child: give pytest its own handlers back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_second_run_leaves_the_first_ones_servers_running(tmp_path, monkeypatch):
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.delenv("REDIS_URL", raising=False)
    var = tmp_path / "var"
    try:
        embedded.ensure(var)  # as `make demo` does
        assert embedded.running(var) == {"postgres", "redis"}
        assert embedded._run(var, [sys.executable, "-c", "pass"]) == 0  # a management command
        assert embedded.running(var) == {"postgres", "redis"}  # the demo goes on
    finally:
        embedded.stop(var)
    assert embedded.running(var) == set()
    fresh = tmp_path / "fresh"
    assert embedded._run(fresh, [sys.executable, "-c", "pass"]) == 0  # started here: stopped here
    assert embedded.running(fresh) == set()
