"""`manage.py host_add`: an operator adds a GPU host without the back-office and gets its
join command; `manage.py catalog_starter` loads the catalog without the demo's logins."""

import io

import pytest
from django.core.management import CommandError, call_command

from gpurental.accounts.models import User
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.fleet.models import GPUSource, Host
from gpurental.fleet.services import host_create, host_join_command, host_token_matches


def _host_add(*args):
    out = io.StringIO()
    call_command("host_add", *args, stdout=out)
    return out.getvalue().strip().splitlines()


def test_host_add_prints_a_join_command_whose_token_joins(db):
    lines = _host_add("gpu-node-7", "--address", "203.0.113.7")
    host = Host.objects.get(name="gpu-node-7")
    assert host.address == "203.0.113.7" and host.gpu_source == GPUSource.NVML
    command = lines[-1]
    assert command.endswith("python -m gpurental.agent")
    token = command.split("GPURENTAL_HOST_TOKEN='")[1].split("'")[0]
    assert host_token_matches(host=host, token=token)
    assert token not in host.token_hash  # stored hashed


def test_host_add_refuses_a_taken_name_and_a_bad_one_naming_the_field(db):
    _host_add("node1", "--address", "10.0.0.1")
    with pytest.raises(CommandError, match="name: a host named 'node1' exists"):
        _host_add("node1", "--address", "10.0.0.2")
    with pytest.raises(CommandError, match="^name: "):
        _host_add("bad name!", "--address", "10.0.0.3")
    assert Host.objects.count() == 1


def test_the_join_command_names_the_address_and_ca_gpu_hosts_use(db, settings):
    host, token = host_create(name="node1")  # no accounts API yet: nothing to ask RabbitMQ
    settings.CELERY_BROKER_URL = "amqps://admin:pw@rabbitmq:5671//"
    settings.RABBITMQ_MANAGEMENT_URL = "http://admin:pw@rabbitmq:15672"
    settings.BROKER_SSL_CA_FILE = "/run/secrets/broker-ca.pem"
    settings.PUBLIC_URL = "https://gpus.example.com"
    command = host_join_command(host=host, token=token)
    # Inside Compose the control plane dials rabbitmq:5671; a host cannot.
    assert "@rabbitmq:5671/" in command
    settings.AGENT_BROKER_ADDRESS = "broker.example.com:5671"
    settings.AGENT_BROKER_CA_FILE = "/etc/gpurental/broker-ca.pem"
    command = host_join_command(host=host, token=token)
    assert (
        f"GPURENTAL_BROKER_URL='amqps://gpurental-host-node1:{token}@broker.example.com:5671//'"
        in command
    )
    assert "GPURENTAL_BROKER_CA_FILE='/etc/gpurental/broker-ca.pem'" in command
    assert "/run/secrets" not in command


def test_catalog_starter_loads_plans_and_images_and_no_logins(db):
    out = io.StringIO()
    call_command("catalog_starter", stdout=out)
    call_command("catalog_starter", stdout=out)  # idempotent
    assert GPUModel.objects.filter(slug="a10g").exists()
    assert Plan.objects.filter(slug="a10g-x8").count() == 1
    assert ImageTemplate.objects.filter(slug="jupyter-cpu").exists()
    assert not User.objects.exists()
    assert "Starter catalog loaded" in out.getvalue()
