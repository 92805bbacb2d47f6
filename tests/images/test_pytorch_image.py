"""gpurental/pytorch:2.13.0-cpu as `make images` builds it, run on the real Docker Engine
with the instance hardening: torch multiplies matrices, transformers imports, and a model
filled into a host's read-only shared cache loads offline through the instance's own,
writable HF_HOME (where downloads and logins can write)."""

from __future__ import annotations

import contextlib
import json
import os
import uuid

import pytest

from gpurental.agent import modelcache
from gpurental.agent.runtimes.base import ContainerSpec
from gpurental.agent.runtimes.docker import HF_CACHE_MOUNT, WORKSPACE, container_environment
from tests.agent.conftest import skip_unless_ci

pytestmark = pytest.mark.docker

IMAGE = "gpurental/pytorch:2.13.0-cpu"
HARDENED = {
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges:true"],
    "pids_limit": 256,
    "mem_limit": "2g",
    "network_disabled": True,
}


@pytest.fixture(scope="module")
def engine():
    from gpurental.agent.runtimes import docker_problem

    problem = docker_problem()
    if problem:
        skip_unless_ci(f"{problem}; start one with: sudo scripts/docker-engine.sh")
    import docker
    import docker.errors

    client = docker.from_env()
    try:
        client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        skip_unless_ci(f"{IMAGE} is not built; run: make images")
    yield client
    client.close()


def run(engine, command: list[str], **kwargs) -> str:
    name = f"gpurental-test-{uuid.uuid4().hex[:8]}"
    try:
        out = engine.containers.run(IMAGE, command, name=name, **HARDENED, **kwargs)
    finally:
        import docker.errors

        with contextlib.suppress(docker.errors.NotFound):
            engine.containers.get(name).remove(force=True)
    return out.decode()


def test_torch_multiplies_matrices_and_transformers_imports_as_the_customer_s_root(engine):
    script = (
        "import json, os, torch, transformers\n"
        "torch.manual_seed(0)\n"
        "a = torch.randn(256, 128)\n"
        "b = a @ a.T\n"
        "ok = torch.allclose(b, b.T, atol=1e-4) and bool((torch.diagonal(b) > 0).all())\n"
        "print(json.dumps({'torch': torch.__version__, 'transformers': transformers.__version__,"
        " 'ok': ok, 'cuda': torch.cuda.is_available(), 'uid': os.getuid(),"
        " 'sum': float((torch.eye(3) @ torch.full((3, 3), 2.0)).sum())}))\n"
    )
    result = json.loads(run(engine, ["python", "-c", script]).strip().splitlines()[-1])
    assert result["torch"] == "2.13.0+cpu" and result["transformers"] == "5.18.0"
    assert result["ok"] is True and result["sum"] == 18.0
    assert result["cuda"] is False and result["uid"] == 0  # root inside; the engine remaps it


def test_the_image_carries_the_instance_conventions(engine):
    config = engine.images.get(IMAGE).attrs["Config"]
    assert config["User"] == "root" and config["WorkingDir"] == "/workspace"
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "/usr/local/bin/gpurental-start"]
    assert "8888/tcp" in config["ExposedPorts"] and "2222/tcp" in config["ExposedPorts"]
    labels = config["Labels"]
    assert labels["gpurental.image"] == "pytorch" and labels["gpurental.variant"] == "cpu"
    assert labels["gpurental.torch"] == "2.13.0"


LOAD = r"""
import json, os, pathlib
import torch
from transformers import AutoModel
model = AutoModel.from_pretrained("acme/tiny-bert")  # HF_HUB_OFFLINE=1: from the cache only
with torch.no_grad():
    out = model(input_ids=torch.tensor([[1, 2, 3]])).last_hidden_state
home = pathlib.Path(os.environ["HF_HOME"])
(home / "token").write_text("hf_test")  # what `hf auth login` writes
repo = home / "hub" / "models--acme--tiny-bert"
(repo / "blobs" / "new-download").write_bytes(b"x")  # a new file of a cached model
try:
    (pathlib.Path(os.environ["GPURENTAL_HF_SHARED"]) / "hub" / "x").write_text("x")
    shared_writable = True
except OSError:
    shared_writable = False
print(json.dumps({"shape": list(out.shape), "shared_writable": shared_writable,
                  "blob_is_link": (repo / "blobs").is_dir() and any(
                      p.is_symlink() for p in (repo / "blobs").iterdir())}))
"""

SAVE = r"""
from transformers import BertConfig, BertModel
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=32)
BertModel(config).save_pretrained("/out/tiny-bert")
"""


def test_a_filled_model_loads_offline_through_a_writable_hf_home_over_the_read_only_cache(
    engine, tmp_path
):
    imports, cache = tmp_path / "imports", tmp_path / "cache"
    imports.mkdir()
    cache.mkdir()
    os.chmod(imports, 0o777)  # noqa: S103 - the container user (uid 1000) writes the model here
    run(engine, ["python", "-c", SAVE], volumes={str(imports): {"bind": "/out", "mode": "rw"}})
    # The agent's own fill, from its import directory, as on a host.
    [repo] = modelcache.cache_fill(
        cache_dir=cache, import_dir=imports, source="tiny-bert", repo_id="acme/tiny-bert"
    )
    assert repo.files >= 2

    spec = ContainerSpec(
        instance_id=str(uuid.uuid4()),
        image=IMAGE,
        token="t",
        gpu_indices=(),
        gpu_uuids=(),
        gpu_source="simulated",
        cpu_count=1,
        memory_mb=2048,
        hf_cache_dir=str(cache),
    )
    env = {**container_environment(spec), "HF_HUB_OFFLINE": "1"}
    volume = engine.volumes.create(f"gpurental-test-ws-{uuid.uuid4().hex[:8]}")
    try:
        out = run(
            engine,
            ["python", "-c", LOAD],
            environment=env,
            volumes={
                str(cache): {"bind": HF_CACHE_MOUNT, "mode": "ro"},
                volume.name: {"bind": WORKSPACE, "mode": "rw"},
            },
        )
    finally:
        volume.remove(force=True)
    assert "gpurental: Hugging Face cache" in out  # the entrypoint's seeder ran
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"shape": [1, 3, 16], "shared_writable": False, "blob_is_link": True}
