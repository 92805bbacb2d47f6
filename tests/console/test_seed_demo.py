import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from gpurental.accounts.models import User
from gpurental.billing.models import LedgerEntry
from gpurental.billing.selectors import balance_of
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.fleet.models import GPU, Host


@pytest.fixture(autouse=True)
def debug_on(settings):
    settings.DEBUG = True  # as make demo runs it


def test_seed_demo_refuses_without_debug(db, settings):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="well-known passwords"):
        call_command("seed_demo")
    assert not User.objects.exists()


def _snapshot():
    return {
        model.__name__: sorted(model.objects.values_list("pk", flat=True))
        for model in (User, GPUModel, Plan, ImageTemplate, Host, GPU, LedgerEntry)
    }


def test_seed_demo_twice_gives_the_same_rows(db, capsys):
    call_command("seed_demo")
    first = _snapshot()
    call_command("seed_demo")
    assert _snapshot() == first


def test_seed_demo_creates_the_promised_demo(db):
    call_command("seed_demo")
    admin = User.objects.get(email="admin@example.com")
    assert admin.is_staff and admin.is_superuser and admin.check_password("admin")
    demo = User.objects.get(email="demo@example.com")
    assert demo.check_password("demo") and not demo.is_staff
    assert balance_of(user=demo) > 0
    assert {"A10G", "A100", "H100"} <= set(GPUModel.objects.values_list("short_name", flat=True))
    assert GPUModel.objects.get(short_name="A100").memory_gb == 80
    for model in GPUModel.objects.all():
        assert sorted(model.plans.values_list("gpu_count", flat=True)) == [1, 2, 4, 8]
    assert ImageTemplate.objects.filter(image__contains="jupyter").exists()
    local = Host.objects.get(name="local")
    assert local.gpus.count() == 8
    assert local.gpu_source == "simulated"


def test_create_api_key_prints_the_key_as_last_line(db, capsys):
    call_command("seed_demo")
    call_command("create_api_key", "--user", "demo@example.com")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    from gpurental.accounts.services import api_key_authenticate

    assert api_key_authenticate(raw=last).user.email == "demo@example.com"


def test_seed_demo_writes_the_local_agents_settings_once(db, tmp_path):
    from gpurental.agent.config import AgentConfig, read_env_file
    from gpurental.fleet.services import host_token_matches

    env_file = tmp_path / "local-agent.env"
    call_command("seed_demo", "--agent-env", str(env_file))
    assert env_file.stat().st_mode & 0o777 == 0o600
    config = AgentConfig.from_env(read_env_file(env_file))
    host = Host.objects.get(name="local")
    assert config.host_name == "local" and host_token_matches(host=host, token=config.token)
    before = env_file.read_text()
    call_command("seed_demo", "--agent-env", str(env_file))
    assert env_file.read_text() == before  # still valid: not rotated
    env_file.unlink()
    call_command("seed_demo", "--agent-env", str(env_file))
    host.refresh_from_db()
    assert host_token_matches(host=host, token=AgentConfig.from_env(read_env_file(env_file)).token)


def test_the_articles_hcl_applies_on_the_demo_data_unchanged(db, tmp_path, sent):
    from gpurental.groups import services
    from gpurental.rentals.models import Instance
    from tests.groups.surfaces import ARTICLE_HCL  # as printed in the article

    env_file = tmp_path / "local-agent.env"
    call_command("seed_demo", "--agent-env", str(env_file))
    # Two models on two hosts: the spec matrix shows both with GPUs.
    a10 = Host.objects.get(name="local-a10")
    assert (a10.gpus.count(), a10.gpus.first().model.short_name) == (4, "A10")
    second = (tmp_path / "local-agent-a10.env").read_text()
    assert "GPURENTAL_HOST_NAME=local-a10" in second and "NVIDIA A10\n" in second
    assert (tmp_path / "local-agent-a10.env").stat().st_mode & 0o777 == 0o600

    Host.objects.update(last_heartbeat_at=timezone.now())  # both agents have joined
    demo = User.objects.get(email="demo@example.com")
    group = services.group_apply(user=demo, source=ARTICLE_HCL, fmt="hcl").group
    services.group_tick(group_id=group.pk)
    replicas = Instance.objects.filter(group=group)
    assert sorted(replicas.values_list("group_role", flat=True)) == ["serving", "warm", "warm"]
    assert {r.host.name for r in replicas} == {"local-a10"}
    assert {r.gpu_model.short_name for r in replicas} == {"A10"}
