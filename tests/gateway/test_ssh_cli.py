"""SSH keys and ``gpurental ssh`` through the SDK and the CLI, against the real API."""

from __future__ import annotations

import json

import asyncssh
import pytest

from gpurental.accounts.models import SSHKey
from gpurental.accounts.services import api_key_create, ssh_key_add
from gpurental.client import Client
from gpurental.client.cli import main
from gpurental.client.errors import NotFound, ValidationError
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from tests.factories import ImageTemplateFactory

pytestmark = pytest.mark.django_db(transaction=True)


def public_line(comment="me@laptop") -> str:
    return (
        asyncssh.generate_private_key("ssh-ed25519", comment=comment).export_public_key().decode()
    )


@pytest.fixture
def as_alice(live_server, alice, monkeypatch):
    _, raw = api_key_create(user=alice, name="cli")
    monkeypatch.setenv("GPURENTAL_API_KEY", raw)
    monkeypatch.setenv("GPURENTAL_URL", live_server.url)
    monkeypatch.setenv("GPURENTAL_CONFIG", "/nonexistent/gpurental.toml")
    return Client(api_key=raw, base_url=live_server.url)


def test_sdk_adds_lists_and_deletes_keys(as_alice, bob):
    bobs = ssh_key_add(user=bob, public_key=public_line())
    key = as_alice.ssh_keys.add(public_line("laptop"))
    assert key.name == "laptop" and key.fingerprint.startswith("SHA256:")
    assert [k.id for k in as_alice.ssh_keys.list()] == [key.id]
    with pytest.raises(ValidationError, match="private key"):
        as_alice.ssh_keys.add(
            asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
        )
    with pytest.raises(NotFound):
        as_alice.ssh_keys.delete(bobs.pk)
    as_alice.ssh_keys.delete(key.id)
    assert as_alice.ssh_keys.list() == []


def test_cli_adds_lists_and_deletes_a_key_file(as_alice, tmp_path, capsys):
    pub = tmp_path / "id_ed25519.pub"
    pub.write_text(public_line("from-file"))
    assert main(["ssh-keys", "add", str(pub)]) == 0
    assert "Added SSH key from-file" in capsys.readouterr().out
    assert main(["--json", "ssh-keys", "list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [k["name"] for k in listed] == ["from-file"]
    assert main(["ssh-keys", "delete", listed[0]["id"]]) == 0
    assert not SSHKey.objects.exists()
    assert main(["ssh-keys", "add", str(tmp_path / "missing.pub")]) == 2


def test_cli_ssh_prints_the_gateway_command_for_a_running_instance(
    as_alice, alice, a100, make_host, sent, capsys
):
    make_host("node1", a100, count=8)
    image = ImageTemplateFactory(slug="ssh-image", ssh_port=2222)
    instance = instance_launch(user=alice, gpu_model=a100, gpu_count=1, image=image)
    assert main(["ssh", str(instance.pk), "--print"]) == 6  # pending: no SSH yet
    instance_report_running(
        instance_id=str(instance.pk), port=40001, container_id="c0ffee", ports={"2222": 40002}
    )
    capsys.readouterr()
    assert main(["ssh", str(instance.pk), "--print"]) == 0
    assert capsys.readouterr().out.strip() == f"ssh -p 2222 {instance.pk}@127.0.0.1"
    assert main(["ssh", str(instance.pk), "--print", "--", "-L", "8888:localhost:8888"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"ssh -p 2222 -L 8888:localhost:8888 {instance.pk}@127.0.0.1"
    )
