"""The model cache with the real parts: the management command, the control worker and a
host agent process talking over the broker, Docker running the instance. Fill, launch
with the model (its files are in the container's writable HF_HOME, the shared cache is
read-only), eviction refused while the instance is up, forced, and gone from disk."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from gpurental.billing.services import credit_add
from gpurental.fleet.models import Host
from gpurental.fleet.services import host_create
from gpurental.modelcache.models import CachedModel, CacheStatus
from gpurental.rentals.models import Instance, InstanceStatus
from gpurental.rentals.services import lifecycle as lc
from gpurental.testing.agent_process import AgentProcess, wait_for
from tests.modelcache.conftest import tiny_model
from tests.stack import remove_leftovers

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True), pytest.mark.backend]

REPO = "acme/tiny-bert"


@pytest.fixture
def cache_agent(control_worker, docker_client, catalog, tmp_path):
    host, token = host_create(name=f"e2e-{uuid.uuid4().hex[:8]}")
    cache, imports = tmp_path / "hf-cache", tmp_path / "imports"
    (cache / "hub").mkdir(parents=True)
    imports.mkdir()
    Host.objects.filter(pk=host.pk).update(hf_cache_dir=str(cache))
    agent = AgentProcess(
        broker_url=django_settings.CELERY_BROKER_URL,
        host_name=host.name,
        token=token,
        log_path=tmp_path / "agent.log",
        GPURENTAL_HF_CACHE_DIR=str(cache),
        GPURENTAL_MODEL_IMPORT_DIR=str(imports),
    )
    agent.start()
    wait_for(lambda: Host.objects.get(pk=host.pk).gpus.count() == 2, 60, "a heartbeat", agent)
    agent.host, agent.cache, agent.imports = host, cache, imports
    yield agent
    agent.stop()
    remove_leftovers(docker_client, host.name)


def test_fill_launch_with_the_model_and_evict_over_the_broker(
    cache_agent, catalog, alice, docker_client
):
    name = cache_agent.host.name
    tiny_model(cache_agent.imports / "tiny-bert")
    call_command(
        "modelcache", "fill", "--host", name, "tiny-bert", "--repo-id", REPO, "--wait", "60"
    )
    row = CachedModel.objects.get(repo_id=REPO)
    assert row.status == CacheStatus.READY and row.files == 4
    # Again (a model already ready): the command waits for this request's own report.
    (cache_agent.imports / "tiny-bert" / "extra.txt").write_text("new file")
    call_command(
        "modelcache", "fill", "--host", name, "tiny-bert", "--repo-id", REPO, "--wait", "60"
    )
    row = CachedModel.objects.get(repo_id=REPO)
    assert row.files == 5 and len(row.revisions) == 2

    credit_add(user=alice, amount=10, description="test credit")
    gpu_model, template = catalog
    instance = lc.instance_launch(
        user=alice, image=template, gpu_model=gpu_model, gpu_count=1, hf_model=REPO
    )
    wait_for(
        lambda: Instance.objects.get(pk=instance.pk).status == InstanceStatus.RUNNING,
        90,
        "the instance to run",
        cache_agent,
    )
    container = docker_client.containers.get(f"gpurental-{instance.pk}")
    check = (
        "cat $HF_HOME/hub/models--acme--tiny-bert/snapshots/$(cat "
        "$HF_HOME/hub/models--acme--tiny-bert/refs/main)/1_Pooling/config.json"
        " && touch $HF_HOME/token && ! touch /models/huggingface/hub/x 2>/dev/null && echo ok"
    )
    code, out = container.exec_run(["bash", "-c", check])
    assert code == 0 and out.decode() == '{"pooling_mode_mean_tokens": true}ok\n'

    with pytest.raises(CommandError, match="still up"):
        call_command("modelcache", "evict", "--host", name, REPO)
    call_command("modelcache", "evict", "--host", name, REPO, "--force", "--wait", "60")
    assert not CachedModel.objects.exists()
    assert not (cache_agent.cache / "hub" / "models--acme--tiny-bert").exists()
