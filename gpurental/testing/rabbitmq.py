"""A throwaway RabbitMQ node for one test: its own name, ports and data under a temp dir,
so a test may stop and start it while the machine's RabbitMQ (127.0.0.1:5672), which the
rest of the suite shares, goes on. Needs Debian's ``rabbitmq-server`` package."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def available() -> str | None:
    """Why no node can be started here, or None."""
    if not SERVER.exists() or not shutil.which("erl"):
        return "rabbitmq-server is not installed (apt-get install rabbitmq-server)"
    return None


class RabbitNode:
    def __init__(self, base: Path):
        self.base = Path(base)
        self.name = f"gpurental-test-{uuid.uuid4().hex[:8]}@localhost"
        self.port = _free_port()
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self.proc: subprocess.Popen | None = None
        self.base.mkdir(parents=True, exist_ok=True)
        # The machine's own /etc/rabbitmq settings (its port, its plugins) stay out.
        (self.base / "rabbitmq.conf").write_text(
            f"listeners.tcp.local = 127.0.0.1:{self.port}\nloopback_users = none\n"
        )
        (self.base / "enabled_plugins").write_text("[].\n")
        (self.base / "env.conf").write_text("")
        self.env = {
            **os.environ,
            "HOME": str(self.base),  # its own Erlang cookie
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_CONF_ENV_FILE": str(self.base / "env.conf"),
            "RABBITMQ_CONFIG_FILE": str(self.base / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.base / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            "RABBITMQ_DIST_PORT": str(_free_port()),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    def start(self, timeout: float = 60) -> None:
        log = open(self.base / "server.log", "ab")  # noqa: SIM115 - lives with the process
        self.proc = subprocess.Popen(  # noqa: S603 - a fixed binary
            [str(SERVER)], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not _listening(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"RabbitMQ did not start: see {self.base / 'server.log'}")
            time.sleep(0.1)

    def stop(self, timeout: float = 30) -> None:
        """A clean shutdown (SIGTERM), as a service restart does; its durable queues and
        persistent messages are kept for the next start."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:  # the Erlang VM's own pid (the script may not exec it)
            os.kill(int((self.base / "pid").read_text().strip()), signal.SIGTERM)
        except (OSError, ValueError):
            self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        deadline = time.monotonic() + timeout
        while _listening(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        path = self.base / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""
