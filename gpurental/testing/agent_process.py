"""Run a real host agent as a separate process (tests and benchmarks).

The agent gets only the broker URL, its name and its token, like on a GPU host.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


class AgentProcess:
    def __init__(
        self,
        *,
        broker_url: str,
        host_name: str,
        token: str,
        log_path: Path,
        prefix: tuple[str, ...] = (),
        **settings: str,
    ):
        """``prefix``: a command to run the agent under, e.g. ``ip netns exec NAME``."""
        self.prefix = tuple(prefix)
        self.env = {
            **{
                k: v
                for k, v in os.environ.items()
                if not k.startswith(("DATABASE", "REDIS", "GPURENTAL_", "DJANGO_"))
            },
            "GPURENTAL_BROKER_URL": broker_url,
            "GPURENTAL_HOST_NAME": host_name,
            "GPURENTAL_HOST_TOKEN": token,
            "GPURENTAL_RUNTIME": "docker",
            "GPURENTAL_GPU_SOURCE": "simulated",
            "GPURENTAL_SIMULATED_GPUS": "2",
            "GPURENTAL_SIMULATED_MODEL": "NVIDIA A10G",
            "GPURENTAL_HEARTBEAT_INTERVAL": "1",
            "GPURENTAL_READY_TIMEOUT": "60",
            **settings,
        }
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(  # noqa: S603 - our own module
            [*self.prefix, sys.executable, "-m", "gpurental.agent"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def pause(self) -> None:
        """Freeze the agent (SIGSTOP), as a host that hangs: no beats, no work."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.resume()  # a paused agent cannot act on SIGTERM
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


def wait_for(
    predicate, timeout: float, what: str, agent: AgentProcess | None = None, interval: float = 0.2
):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout} s waiting for {what}\n--- agent log ---\n{agent.log() if agent else ''}"
    )
