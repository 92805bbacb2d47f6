"""`make deploy-smoke`: the production layout (deploy/compose.yml) up on this machine, used
as a customer would, and taken down again leaving nothing behind.

1. deploy/build.sh builds the images; deploy/secrets.sh makes secrets in a scratch folder;
2. Compose brings the stack up (every service, both web and gateway processes) and waits
   until each health check passes; `manage.py check --deploy` must be clean;
3. the operator loads the starter catalog and adds a GPU host (`manage.py host_add`); an
   agent on this machine joins with the printed command over amqps (simulated GPUs, the
   real Docker Engine);
4. a customer launches an instance with the SDK through https://localhost:8443 (Caddy's
   local CA) and opens JupyterLab through the gateway's TLS origin;
5. `openssl s_client` shows TLS 1.3 on both names and TLS 1.2 refused;
6. the instance is terminated, the agent stopped, the stack taken down with its volumes;
   no container, volume or network of the stack or of the instance is left.

Each step prints its time. Run from the repository root: `.venv/bin/python deploy/smoke.py`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gpurental-smoke"
HTTPS_PORT = 8443
SUBNET = "172.30.77.0/24"
HOST_ADDRESS = "172.30.77.1"  # the Compose network's gateway: this machine, seen from the gateways
STACK_ENV = {
    "DOMAIN": "localhost",
    "HTTPS_PORT": str(HTTPS_PORT),
    "HTTP_PORT": "8080",
    "PUBLIC_PORT_SUFFIX": f":{HTTPS_PORT}",
    "BROKER_HOST": "localhost",
    "BROKER_PORT": "5671",
    "SSH_PORT": "12222",
    "CONTROL_SUBNET": SUBNET,
    "CADDY_TLS": "internal",
}
PUBLIC = f"https://localhost:{HTTPS_PORT}"
ROLES_WITH_HEALTH = ("web-1", "web-2", "gateway-1", "gateway-2", "postgres", "redis", "rabbitmq")

T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[deploy-smoke {time.monotonic() - T0:6.1f} s] {message}", flush=True)


def run(cmd: list[str], *, env: dict | None = None, check: bool = True, **kw) -> str:
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, **kw)
    if check and proc.returncode != 0:
        raise SystemExit(
            f"failed ({proc.returncode}): {shlex.join(cmd)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return proc.stdout


class Stack:
    def __init__(self, scratch: Path, project: str = PROJECT, extra_env: dict | None = None):
        self.scratch = scratch
        self.project = project
        self.env = {
            **os.environ,
            **STACK_ENV,
            **(extra_env or {}),
            "SECRETS_DIR": str(scratch / "secrets"),
            "COMPOSE_PROJECT_NAME": project,
        }
        self.compose = ["docker-compose", "-p", project, "-f", str(REPO / "deploy/compose.yml")]

    def __call__(self, *args: str, check: bool = True, **kw) -> str:
        return run([*self.compose, *args], env=self.env, check=check, **kw)

    def manage(self, *args: str, env: dict | None = None) -> str:
        extra = [f"-e{k}={v}" for k, v in (env or {}).items()]
        return self("exec", "-T", *extra, "web-1", "python", "manage.py", *args)

    def container(self, service: str) -> str:
        return self("ps", "-q", service).strip()

    def wait_healthy(self, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = {}
            for role in ROLES_WITH_HEALTH:
                cid = self.container(role)
                states[role] = (
                    run(
                        ["docker", "inspect", "-f", "{{.State.Health.Status}}", cid], check=False
                    ).strip()
                    if cid
                    else "absent"
                )
            if all(s == "healthy" for s in states.values()):
                return
            if time.monotonic() > deadline:
                print(self("ps", check=False))
                print(self("logs", "--tail", "40", check=False))
                raise SystemExit(f"not healthy after {timeout:.0f} s: {states}")
            time.sleep(1)

    def leftovers(self) -> list[str]:
        label = f"label=com.docker.compose.project={self.project}"
        found = []
        for kind, args in (
            ("container", ["ps", "-aq", "--filter", label]),
            ("volume", ["volume", "ls", "-q", "--filter", label]),
            ("network", ["network", "ls", "-q", "--filter", label]),
            ("instance container", ["ps", "-aq", "--filter", "label=gpurental.instance"]),
            ("instance network", ["network", "ls", "-q", "--filter", "label=gpurental.instance"]),
        ):
            found += [f"{kind} {x}" for x in run(["docker", *args]).split()]
        return found


def resolve_localhost_subdomains() -> None:
    """*.localhost is this machine (RFC 6761; browsers and curl know it, glibc does not)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kw):
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return real(host, *args, **kw)

    socket.getaddrinfo = getaddrinfo


def tls_handshake(name: str, version: str) -> str:
    """openssl s_client's account of a handshake with Caddy for `name` at TLS `version`."""
    proc = subprocess.run(
        [
            "openssl",
            "s_client",
            "-connect",
            f"127.0.0.1:{HTTPS_PORT}",
            "-servername",
            name,
            f"-{version}",
            "-brief",
        ],
        input="",
        text=True,
        capture_output=True,
        timeout=20,
    )
    return proc.stdout + proc.stderr


def customer_create(stack: Stack) -> str:
    """A customer with credit and an API key (the back-office would do the same)."""
    code = (
        "from decimal import Decimal\n"
        "from gpurental.accounts.models import User\n"
        "from gpurental.accounts.services import api_key_create\n"
        "from gpurental.billing.services import credit_add\n"
        "u = User.objects.create_user(email='customer@example.com', password='smoke-Passw0rd!')\n"
        "credit_add(user=u, amount=Decimal('20.00'), description='deploy smoke')\n"
        "print(api_key_create(user=u, name='smoke')[1])\n"
    )
    return stack.manage("shell", "-c", code).strip().splitlines()[-1]


def agent_start(stack: Stack, join: str, caddy_ca: Path) -> subprocess.Popen:
    env = dict(os.environ)
    command = shlex.split(join)
    for word in command:
        if re.match(r"^[A-Z_]+=", word):
            key, _, value = word.partition("=")
            env[key] = value
    ca = stack.scratch / "secrets/agent/broker-ca.pem"
    env.update(
        GPURENTAL_BROKER_CA_FILE=str(ca),  # where deploy/host/install.sh puts it on a host
        GPURENTAL_GPU_SOURCE="simulated",
        GPURENTAL_SIMULATED_GPUS="2",
        GPURENTAL_BIND_ADDRESS=HOST_ADDRESS,
        GPURENTAL_AGENT_DIR=str(stack.scratch / "agent"),
        REQUESTS_CA_BUNDLE=str(caddy_ca),  # telemetry goes to https://localhost:8443
        PYTHONPATH=str(REPO),
    )
    with open(stack.scratch / "agent.log", "w") as log:  # the child keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-m", "gpurental.agent"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


class Deployment:
    """The stack up (every health check passing), the starter catalog, one GPU host's
    agent joined over amqps, one customer with credit and an SDK client; on exit, all of it
    down and checked gone."""

    def __init__(self, project: str = PROJECT, extra_env: dict | None = None):
        if not shutil.which("docker-compose"):
            raise SystemExit("docker-compose is missing: apt-get install docker-compose")
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{project}-"))
        self.stack = Stack(self.scratch, project, extra_env)
        self.agent: subprocess.Popen | None = None
        self.client = None
        self.instances: list[str] = []

    def __enter__(self) -> Deployment:
        try:
            self._up()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def _up(self) -> None:
        stack = self.stack
        say("deploy/build.sh")
        subprocess.run([str(REPO / "deploy/build.sh")], check=True)
        stack("down", "-v", "--remove-orphans", check=False)  # a run killed before its end
        run([str(REPO / "deploy/secrets.sh"), str(self.scratch / "secrets")], env=stack.env)
        say("docker-compose up -d")
        stack("up", "-d")
        stack.wait_healthy()
        say("healthy: " + ", ".join(ROLES_WITH_HEALTH))

        out = stack.manage("check", "--deploy", "--fail-level", "WARNING")
        say("manage.py check --deploy: " + out.strip().splitlines()[-1])

        caddy_ca = self.scratch / "caddy-root.pem"
        for _ in range(60):
            pem = stack(
                "exec",
                "-T",
                "caddy",
                "cat",
                "/data/caddy/pki/authorities/local/root.crt",
                check=False,
            )
            if "BEGIN CERTIFICATE" in pem:
                caddy_ca.write_text(pem)
                break
            time.sleep(1)
        else:
            raise SystemExit("Caddy made no local CA")
        os.environ["REQUESTS_CA_BUNDLE"] = str(caddy_ca)
        resolve_localhost_subdomains()

        import requests

        ready = requests.get(f"{PUBLIC}/readyz", timeout=10)
        say(f"GET {PUBLIC}/readyz through Caddy: {ready.status_code} {ready.text.strip()[:80]}")
        assert ready.status_code == 200, ready.text

        stack.manage("catalog_starter")
        stack.manage(
            "createsuperuser",
            "--noinput",
            "--email",
            "admin@example.com",
            env={"DJANGO_SUPERUSER_PASSWORD": "smoke-Adm1n-Passw0rd"},
        )
        join = (
            stack.manage(
                "host_add", "smoke-gpu", "--address", HOST_ADDRESS, "--gpu-source", "simulated"
            )
            .strip()
            .splitlines()[-1]
        )
        assert join.startswith("GPURENTAL_BROKER_URL='amqps://gpurental-host-smoke-gpu:"), join
        assert "@localhost:5671/" in join, join
        say("host smoke-gpu added; its join command dials amqps://…@localhost:5671")
        self.agent = agent_start(stack, join, caddy_ca)
        key = customer_create(stack)

        from gpurental.client import Client

        self.client = Client(api_key=key, base_url=PUBLIC)
        deadline = time.monotonic() + 120
        while not any(m["total"] for m in self.client.availability(hours=1)["models"]):
            if self.agent.poll() is not None or time.monotonic() > deadline:
                log = (self.scratch / "agent.log").read_text()[-3000:]
                raise SystemExit(f"the agent did not join:\n{log}")
            time.sleep(1)
        say("the agent joined: its GPUs are in the catalog")

    def launch(self) -> tuple[str, dict]:
        """A JupyterLab instance, running; its one-time link."""
        instance = self.client.create_instance(gpu_type="A10G", framework="jupyter-cpu")
        self.instances.append(instance.id)
        say(f"launched {instance.id} through {PUBLIC}/api/v1/")
        link = self.client.connect(instance.id, wait=120)
        say(f"running; JupyterLab link {link['url'].split('?')[0]}")
        assert link["url"].startswith(f"https://{instance.id}.gw.localhost:{HTTPS_PORT}/"), link
        return instance.id, link

    def terminate(self, instance_id: str) -> None:
        self.client.terminate(instance_id)
        deadline = time.monotonic() + 120
        while self.client.get_instance(instance_id).status != "terminated":
            assert time.monotonic() < deadline, "not terminated within 120 s"
            time.sleep(1)
        self.instances.remove(instance_id)

    def __exit__(self, exc_type, exc, tb) -> None:
        failed = exc_type is not None
        for instance_id in list(self.instances):
            try:
                self.terminate(instance_id)
            except Exception as e:  # noqa: BLE001 - teardown goes on
                print(f"terminate {instance_id} failed: {e}")
                failed = True
        if self.agent is not None:
            os.killpg(self.agent.pid, signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.agent.pid, signal.SIGKILL)
        self.stack("down", "-v", "--remove-orphans", "--timeout", "20", check=False)
        if failed:  # the run failed mid-way: clear what the agent may have left
            for cid in run(["docker", "ps", "-aq", "--filter", "label=gpurental.instance"]).split():
                run(["docker", "rm", "-f", cid], check=False)
        shutil.rmtree(self.scratch, ignore_errors=True)
        left = self.stack.leftovers()
        if left and exc_type is None:
            raise SystemExit(f"left behind: {', '.join(left)}")
        say("down: no container, volume or network left")


def main() -> None:
    with Deployment() as deployment:
        import requests

        instance_id, link = deployment.launch()
        browser = requests.Session()
        page = browser.get(link["url"], timeout=30)
        assert page.status_code == 200 and "JupyterLab" in page.text, (
            page.status_code,
            page.text[:300],
        )
        contents = browser.get(f"{link['origin']}/api/contents", timeout=30)
        assert contents.status_code == 200 and contents.json()["type"] == "directory", contents.text
        say(f"JupyterLab through {link['origin']}: the lab page and /api/contents answer")

        for name in ("localhost", f"{instance_id}.gw.localhost"):
            tls13 = tls_handshake(name, "tls1_3")
            assert "Protocol version: TLSv1.3" in tls13, tls13
            tls12 = tls_handshake(name, "tls1_2")
            assert "Protocol version" not in tls12 and re.search(r"alert|error", tls12, re.I), tls12
            suite = re.search(r"Ciphersuite: (\S+)", tls13)[1]
            say(f"{name}: TLS 1.3 ({suite}); TLS 1.2 refused")

        deployment.terminate(instance_id)
        say("terminated")
    say("passed")


if __name__ == "__main__":
    main()
