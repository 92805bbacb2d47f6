"""The command that starts a host's agent carries what the agent cannot derive."""

from gpurental.fleet.services import host_create, host_join_command


def test_a_redis_broker_that_is_the_channel_layer_needs_no_telemetry_url(db, settings):
    settings.CELERY_BROKER_URL = "redis://10.0.0.5:6379/0"
    settings.CHANNEL_LAYERS = {"default": {"CONFIG": {"hosts": ["redis://10.0.0.5:6379/0"]}}}
    host, token = host_create(name="node1")
    command = host_join_command(host=host, token=token)
    assert "GPURENTAL_TELEMETRY_URL" not in command
    assert f"GPURENTAL_HOST_TOKEN='{token}'" in command


def test_a_rabbitmq_broker_comes_with_the_channel_layers_redis(db, settings):
    settings.CELERY_BROKER_URL = "amqp://guest:guest@10.0.0.5:5672//"
    settings.CHANNEL_LAYERS = {
        "default": {
            "CONFIG": {"hosts": [{"address": "redis://10.0.0.6:6379/2", "socket_timeout": 9}]}
        }
    }
    host, token = host_create(name="node1")
    command = host_join_command(host=host, token=token)
    assert "GPURENTAL_BROKER_URL='amqp://guest:guest@10.0.0.5:5672//'" in command
    assert "GPURENTAL_TELEMETRY_URL='redis://10.0.0.6:6379/2'" in command


def test_the_join_command_of_these_settings_names_a_url_not_a_dict(db):
    host, token = host_create(name="node1")
    command = host_join_command(host=host, token=token)
    assert "{" not in command and "address" not in command
