"""The SDK and CLI as their own distribution, gpurental-client: the wheel built from this
repository installs into a clean virtual environment with requests and nothing of the
server, and the article's snippet runs there, as written, against the live platform."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from decimal import Decimal
from pathlib import Path

import pytest

from gpurental import __version__
from gpurental.accounts.services import api_key_create
from gpurental.billing.services import credit_add
from gpurental.catalog.models import ImageAlias
from gpurental.client import Client
from gpurental.fleet.models import Host
from tests.factories import ImageTemplateFactory
from tests.stack import open_link

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[2]
# Read before the autouse fixture points HOME at a temporary folder: pip keeps its cache.
PIP_CACHE_DIR = os.environ.get("PIP_CACHE_DIR") or str(Path.home() / ".cache" / "pip")
SERVER_ONLY = ["django", "celery", "docker", "rest_framework", "channels", "psycopg", "jupyterlab"]

# The article's snippet, character for character but for YOUR_KEY; the URL comes from
# GPURENTAL_URL. Fed to an interactive interpreter, as typed in a REPL: the last line, a
# bare expression, prints the link.
ARTICLE = """\
from cloud_gpu import Client
client = Client(api_key="YOUR_KEY")
instance = client.create_instance(gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface")
instance.connect()
"""
# Then what it got, and which copy of the SDK ran.
AFTER = """\
import json, gpurental.client, cloud_gpu
print("RESULT " + json.dumps({"id": instance.id, "sdk": gpurental.client.__file__, "cloud_gpu": cloud_gpu.__file__}))
"""


PROBE = """
import importlib.metadata, importlib.util, json, re, sys
requires = importlib.metadata.requires("requests") or []
print(json.dumps({
    "importable": [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None],
    "requests_needs": [re.split(r"[ ;<>=!~\\[(]", r, maxsplit=1)[0]
                       for r in requires if "extra ==" not in r],
}))
"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment less what would lead Python back to the repository."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE")
    }
    return {**env, "PIP_CACHE_DIR": PIP_CACHE_DIR, **extra}


def run(argv: list[str | Path], *, cwd: Path, timeout: float = 120, **env: str):
    result = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"{argv}: {result.returncode}\n{result.stdout}{result.stderr}"
    return result


@pytest.fixture
def wheel(tmp_path) -> Path:
    out = run([sys.executable, ROOT / "sdk" / "build.py", "--dist", tmp_path / "dist"], cwd=ROOT)
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def client_venv(wheel, tmp_path) -> Path:
    venv = tmp_path / "client-venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], cwd=tmp_path)
    return venv


@pytest.fixture
def pytorch_image(db):
    # As seed_demo has it: the article's "pytorch-2.1" is an alias of the PyTorch template,
    # whose CPU variant (built by `make images`) runs on simulated hosts.
    template = ImageTemplateFactory(
        slug="pytorch-2.13",
        name="PyTorch 2.13 + CUDA 13.0 + JupyterLab",
        image="gpurental/pytorch:2.13.0-cuda",
        cpu_image="gpurental/pytorch:2.13.0-cpu",
    )
    ImageAlias.objects.create(name="pytorch-2.1", template=template)
    return template


@pytest.mark.timeout(300)
def test_the_client_wheel_installs_alone_and_runs_the_articles_snippet(
    wheel, client_venv, web_server, gateway, agent, catalog, pytorch_image, alice, tmp_path
):
    python, gpurental = client_venv / "bin" / "python", client_venv / "bin" / "gpurental"

    # The wheel holds the client and the version, nothing else of the server.
    packaged = {n for n in zipfile.ZipFile(wheel).namelist() if ".dist-info/" not in n}
    assert "gpurental/client/cli/__init__.py" in packaged
    assert {n for n in packaged if not n.startswith("gpurental/client/")} == {
        "gpurental/__init__.py",
        "cloud_gpu/__init__.py",  # the article's name for the SDK
    }

    # Installed alone: requests and what requests needs, no server dependency at all.
    probe = json.loads(run([python, "-c", PROBE, *SERVER_ONLY], cwd=tmp_path).stdout)
    assert probe["importable"] == []
    listed = json.loads(run([python, "-m", "pip", "list", "--format=json"], cwd=tmp_path).stdout)
    installed = {canonical(p["name"]) for p in listed} - {"pip", "setuptools"}
    expected = {"gpurental-client", "requests", *map(canonical, probe["requests_needs"])}
    assert installed == expected

    # The console script.
    helped = run([gpurental, "--help"], cwd=tmp_path)
    assert "launch an instance and print its JupyterLab URL" in helped.stdout
    assert "9  server unreachable" in helped.stdout
    assert run([gpurental, "--version"], cwd=tmp_path).stdout == f"gpurental {__version__}\n"

    # The live platform, set up as for the in-process snippet (test_live_server.py).
    Host.objects.filter(name=agent.host.name).update(hf_cache_dir=str(agent.hf_cache))
    _, api_key = api_key_create(user=alice, name="sdk wheel test")
    credit_add(user=alice, amount=Decimal("10.00"), description="test credit")
    typed = ARTICLE.replace("YOUR_KEY", api_key) + AFTER
    repl = subprocess.run(
        [str(python), "-i", "-q"],  # a REPL reading the lines from stdin
        input=typed,
        cwd=tmp_path,
        env=clean_env(GPURENTAL_URL=web_server),
        capture_output=True,
        text=True,
        timeout=240,
    )
    printed = repl.stdout.splitlines()
    assert repl.returncode == 0 and printed, repl.stdout + repl.stderr
    got = json.loads(next(line for line in printed if line.startswith("RESULT "))[7:])
    assert Path(got["sdk"]).is_relative_to(client_venv)  # the wheel's copy, not the repository's
    assert Path(got["cloud_gpu"]).is_relative_to(client_venv)
    url = printed[0]  # instance.connect() as a statement: the REPL printed the link, bare
    assert url.startswith(f"http://{got['id']}.gw.localhost:") and "/_gw/enter?t=" in url
    assert open_link(gateway, url) == 200  # JupyterLab answers through the gateway

    as_alice = {"GPURENTAL_API_KEY": api_key, "GPURENTAL_URL": web_server}
    listed = json.loads(run([gpurental, "ls", "--json"], cwd=tmp_path, **as_alice).stdout)
    assert [(i["id"], i["status"]) for i in listed] == [(got["id"], "running")]
    run([gpurental, "terminate", got["id"], "--yes"], cwd=tmp_path, **as_alice)
    with Client(api_key=api_key, base_url=web_server) as client:
        client.get_instance(got["id"]).wait_until("terminated", timeout=60)
