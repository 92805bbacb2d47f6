"""ProcessRuntime: JupyterLab as a local subprocess, for machines without Docker.

Layout under ``base_dir`` (one directory per instance)::

    <instance_id>/workspace/     the instance's /workspace: kept by stop, deleted by remove
    <instance_id>/home/          HOME and Jupyter's runtime files, private to the instance
    <instance_id>/jupyter.log    JupyterLab's output (logs_tail reads it)
    <instance_id>/process.json   pid, port and spec fingerprint of the running server

The state file lets a restarted agent find the servers it started before. Each
server runs in its own session, so stop signals the whole process group.

There is no isolation here: no CPU, memory or pids limits and no GPU fencing
beyond CUDA_VISIBLE_DEVICES. It exists so that a first demo runs on any machine;
renting real GPUs needs the docker runtime.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

from .base import (
    ContainerSpec,
    ImageNotFound,
    Progress,
    RuntimeFailure,
    Started,
    check_instance_id,
    probe_host,
    wait_for_jupyter,
)

STATE_FILE = "process.json"
LOG_FILE = "jupyter.log"


def free_port(host: str) -> int:
    # Another process may take the port before JupyterLab binds it; JupyterLab
    # then exits (port_retries=0) and start reports it, rather than silently
    # listening on a port nobody knows about.
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid``, or None if it is gone or a zombie.

    Comparing start times tells our server apart from an unrelated process that
    got the same pid after an agent restart.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the command name may contain spaces
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


class ProcessRuntime:
    name = "process"

    def __init__(
        self,
        *,
        base_dir: str | os.PathLike[str],
        jupyter: str | os.PathLike[str] | None = None,
        ready_timeout_s: float = 60.0,
        stop_timeout_s: float = 10.0,
    ) -> None:
        self.base_dir = Path(base_dir)
        # The agent's own environment, whatever it is (venv or not): bin dir of
        # sys.executable, not resolved, so that a venv's python finds its jupyter.
        self.jupyter = Path(jupyter) if jupyter else Path(sys.executable).parent / "jupyter"
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def ensure_image(self, image: str, progress: Progress) -> None:
        # There are no images here: ``image`` is accepted for the interface, and
        # what must exist is JupyterLab in this Python environment.
        lab = self.jupyter.with_name("jupyter-lab")
        if not (self.jupyter.is_file() and lab.is_file()):
            raise ImageNotFound(
                f"the process runtime runs JupyterLab from {self.jupyter.parent}, and it is "
                f"not installed there (needed instead of image {image}): pip install jupyterlab"
            )

    def start(self, spec: ContainerSpec, progress: Progress) -> Started:
        if spec.volumes:
            raise RuntimeFailure(
                "this host runs instances as processes, without a Docker Engine: it cannot "
                "mount volumes; launch without them, or on a host with Docker"
            )
        if spec.pull is not None:
            raise RuntimeFailure(
                f"this host runs instances as processes, without a Docker Engine: it cannot "
                f"run the image {spec.image}; launch a catalog image, or ask the operator "
                "for a host with Docker"
            )
        self.ensure_image(spec.image, progress)
        state = self._running_state(spec.instance_id)
        if state is not None and state["fingerprint"] != spec.fingerprint():
            progress("replacing an outdated JupyterLab process (the workspace is kept)")
            self.stop(spec.instance_id)
            state = None
        if state is None:
            state = self._launch(spec, progress)
        # Only JupyterLab: a plain process has no sshd and no other declared ports.
        started = Started(
            f"pid:{state['pid']}",
            spec.bind_address,
            state["port"],
            ports={spec.container_port: state["port"]},
        )
        try:
            ready_s = wait_for_jupyter(
                started.host,
                started.port,
                spec.token,
                self.ready_timeout_s,
                check_alive=lambda: self._check_running(spec.instance_id),
            )
        except RuntimeFailure:
            self.stop(spec.instance_id)
            raise
        return replace(started, ready_s=ready_s)

    def stop(self, instance_id: str, keep_container: bool = False, park: bool = False) -> None:
        # A process cannot be kept created-but-stopped: keep_container and park change
        # nothing here.
        state = self._running_state(instance_id)
        if state is not None:
            self._terminate(instance_id, state["pid"])
        self._state_path(instance_id).unlink(missing_ok=True)
        self._children.pop(instance_id, None)

    def remove(self, instance_id: str) -> None:
        self.stop(instance_id)
        shutil.rmtree(self._dir(instance_id), ignore_errors=True)

    def list_instances(self) -> dict[str, str]:
        if not self.base_dir.is_dir():
            return {}
        states = {}
        for path in self.base_dir.iterdir():
            try:
                instance_id = check_instance_id(path.name)
            except ValueError:
                continue  # not ours
            if self._running_state(instance_id) is not None:
                states[instance_id] = "running"
            elif self._state_path(instance_id).exists():
                states[instance_id] = "exited"
            else:
                states[instance_id] = "stopped"
        return states

    def workspace_usage(self) -> dict[str, int]:
        """Bytes each instance's /workspace holds (allocated blocks, like du)."""
        usage = {}
        for instance_id in self.list_instances():
            total = 0
            for root, _dirs, files in os.walk(self._dir(instance_id) / "workspace"):
                for name in files:
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(root, name)).st_blocks * 512
            usage[instance_id] = total
        return usage

    def logs_tail(self, instance_id: str, lines: int = 30) -> str:
        try:
            with (self._dir(instance_id) / LOG_FILE).open(errors="replace") as log:
                return "".join(deque(log, maxlen=lines)).rstrip()
        except FileNotFoundError:
            return ""

    # --- helpers ------------------------------------------------------------

    def _dir(self, instance_id: str) -> Path:
        return self.base_dir / check_instance_id(instance_id)

    def _state_path(self, instance_id: str) -> Path:
        return self._dir(instance_id) / STATE_FILE

    def _running_state(self, instance_id: str) -> dict | None:
        """The saved state when its process is still alive, else None."""
        try:
            state = json.loads(self._state_path(instance_id).read_text())
        except (OSError, ValueError):
            return None
        child = self._children.get(instance_id)
        if child is not None and child.pid == state["pid"]:
            alive = child.poll() is None  # also reaps it, so no zombie stays behind
        else:
            alive = _process_start_time(state["pid"]) == state["started"]
        return state if alive else None

    def _environment(self, spec: ContainerSpec, home: Path) -> dict[str, str]:
        # A fresh environment, not the agent's: the agent holds broker credentials
        # and its host token, which a renter's notebook must never see.
        env = {
            "PATH": os.pathsep.join(
                [str(self.jupyter.parent), "/usr/local/bin", "/usr/bin", "/bin"]
            ),
            "HOME": str(home),
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "TERM": "xterm-256color",
            "PYTHONUNBUFFERED": "1",
            **spec.env,
            "JUPYTER_TOKEN": spec.token,
            "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        }
        if spec.hf_cache_dir:
            env["HF_HOME"] = spec.hf_cache_dir
        indices = ",".join(str(i) for i in spec.gpu_indices)
        if spec.gpu_source == "nvml":
            env["CUDA_VISIBLE_DEVICES"] = indices
        else:
            env["NVIDIA_VISIBLE_DEVICES"] = indices or "void"
        return env

    def _command(self, spec: ContainerSpec, port: int, workspace: Path) -> list[str]:
        if spec.command:
            return list(spec.command)
        command = [
            str(self.jupyter),
            "lab",
            f"--ip={spec.bind_address}",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            "--no-browser",
            f"--ServerApp.root_dir={workspace}",
        ]
        if os.geteuid() == 0:
            # JupyterLab refuses root by default. This runtime isolates nothing
            # whatever the user, so refusing would only break demos run as root
            # (containers, CI); start warns about it instead.
            command.append("--allow-root")
        return command

    def _launch(self, spec: ContainerSpec, progress: Progress) -> dict:
        root = self._dir(spec.instance_id)
        workspace, home = root / "workspace", root / "home"
        workspace.mkdir(parents=True, exist_ok=True)
        home.mkdir(exist_ok=True)
        port = free_port(probe_host(spec.bind_address))
        progress(f"starting JupyterLab as a local process on {spec.bind_address}:{port}")
        if os.geteuid() == 0:
            progress("warning: the process runtime runs notebooks as root, without isolation")
        with (root / LOG_FILE).open("ab") as log:
            child = subprocess.Popen(  # noqa: S603 (fixed argv, no shell)
                self._command(spec, port, workspace),
                cwd=workspace,
                env=self._environment(spec, home),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so stop reaches all of it
            )
        self._children[spec.instance_id] = child
        state = {
            "pid": child.pid,
            "port": port,
            "fingerprint": spec.fingerprint(),
            "started": _process_start_time(child.pid),
        }
        self._state_path(spec.instance_id).write_text(json.dumps(state))
        return state

    def _check_running(self, instance_id: str) -> None:
        if self._running_state(instance_id) is not None:
            return
        child = self._children.get(instance_id)
        code = child.returncode if child is not None else None
        exit_text = f"exited with code {code}" if code is not None else "exited"
        raise RuntimeFailure(
            f"JupyterLab {exit_text} while starting; last log lines:\n"
            f"{self.logs_tail(instance_id, 20)}"
        )

    def _terminate(self, instance_id: str, pid: int) -> None:
        """SIGTERM the process group (JupyterLab shuts its kernels down), then SIGKILL."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while time.monotonic() < deadline:
            if self._running_state(instance_id) is None:
                return
            time.sleep(0.1)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        child = self._children.get(instance_id)
        if child is not None:
            child.wait(timeout=5)
