"""The console's SSH keys page and the ssh command on the instance page."""

from __future__ import annotations

import asyncssh
import pytest

from gpurental.accounts.models import SSHKey
from gpurental.accounts.services import ssh_key_add
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from tests.factories import ImageTemplateFactory


def public_line(comment="me@laptop") -> str:
    return (
        asyncssh.generate_private_key("ssh-ed25519", comment=comment).export_public_key().decode()
    )


def test_keys_page_adds_and_lists_only_own_keys(client, alice, bob):
    ssh_key_add(user=bob, public_key=public_line("bobs-key"))
    client.force_login(alice)
    answer = client.post("/ssh-keys/", {"public_key": public_line("alice@laptop"), "name": ""})
    assert answer.status_code == 302
    page = client.get("/ssh-keys/").content.decode()
    assert "alice@laptop" in page and "SHA256:" in page
    assert "bobs-key" not in page


def test_a_bad_key_is_refused_on_the_page_with_the_rule(client, alice):
    client.force_login(alice)
    private = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    page = client.post("/ssh-keys/", {"public_key": private, "name": "oops"}).content.decode()
    assert "this is a private key" in page
    assert not SSHKey.objects.exists()


def test_a_hostile_key_name_is_escaped(client, alice):
    ssh_key_add(user=alice, public_key=public_line(), name="<script>x</script>")
    client.force_login(alice)
    page = client.get("/ssh-keys/").content.decode()
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page


def test_another_customers_key_cannot_be_deleted(client, alice, bob):
    key = ssh_key_add(user=bob, public_key=public_line())
    client.force_login(alice)
    assert client.post(f"/ssh-keys/{key.pk}/delete/").status_code == 404
    assert SSHKey.objects.filter(pk=key.pk).exists()
    client.force_login(bob)
    assert client.post(f"/ssh-keys/{key.pk}/delete/").status_code == 302
    assert not SSHKey.objects.exists()


@pytest.fixture
def running_with_ssh(alice, a100, make_host, sent):
    make_host("node1", a100, count=8)
    image = ImageTemplateFactory(slug="ssh-image", ssh_port=2222)
    instance = instance_launch(user=alice, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(
        instance_id=str(instance.pk), port=40001, container_id="c0ffee", ports={"2222": 40002}
    )
    return instance


def test_instance_page_shows_the_ssh_command_and_asks_for_a_key(client, alice, running_with_ssh):
    client.force_login(alice)
    page = client.get(f"/instances/{running_with_ssh.pk}/").content.decode()
    assert f"ssh -p 2222 {running_with_ssh.pk}@127.0.0.1" in page
    assert 'id="ssh-no-keys"' in page
    ssh_key_add(user=alice, public_key=public_line())
    page = client.get(f"/instances/{running_with_ssh.pk}/").content.decode()
    assert 'id="ssh-no-keys"' not in page
