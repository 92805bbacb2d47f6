"""Customers' SSH keys (rules, services, API) and the SSH gateway's login decision."""

from __future__ import annotations

import asyncssh
import pytest
from rest_framework.test import APIClient

from gpurental.accounts.models import AuditEvent, SSHKey
from gpurental.accounts.services import api_key_create, ssh_key_add, ssh_key_delete
from gpurental.accounts.sshkeys import SSHKeyRefused, ssh_public_key_parse
from gpurental.gateway.sshroutes import ssh_access, ssh_login
from gpurental.rentals.services.lifecycle import (
    instance_launch,
    instance_report_running,
    instance_report_stopped,
    instance_stop,
)
from tests.factories import ImageTemplateFactory


def public_line(algorithm="ssh-ed25519", comment="me@laptop", **kwargs) -> str:
    key = asyncssh.generate_private_key(algorithm, comment=comment, **kwargs)
    return key.export_public_key().decode().strip()


def bare(line: str) -> str:
    return " ".join(line.split()[:2])


# --- what a key may be ---------------------------------------------------------------------


def test_an_ed25519_line_is_parsed_with_its_fingerprint_and_comment():
    line = public_line()
    parsed = ssh_public_key_parse(line + "\n")
    assert parsed.algorithm == "ssh-ed25519"
    assert parsed.line == bare(line)
    assert parsed.comment == "me@laptop"
    assert parsed.fingerprint == asyncssh.import_public_key(line).get_fingerprint("sha256")
    assert parsed.fingerprint.startswith("SHA256:")


@pytest.mark.parametrize("algorithm", ["ecdsa-sha2-nistp256", "ecdsa-sha2-nistp521"])
def test_ecdsa_keys_are_accepted(algorithm):
    assert ssh_public_key_parse(public_line(algorithm)).algorithm == algorithm


def test_rsa_of_2048_bits_is_accepted_and_1024_refused():
    assert ssh_public_key_parse(public_line("ssh-rsa", key_size=2048)).algorithm == "ssh-rsa"
    with pytest.raises(SSHKeyRefused, match="public_key: RSA keys need at least 2048 bits"):
        ssh_public_key_parse(public_line("ssh-rsa", key_size=1024))


def test_a_private_key_is_refused_and_not_taken_for_its_public_half():
    private = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    with pytest.raises(SSHKeyRefused, match="public_key: this is a private key"):
        ssh_public_key_parse(private)


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "required"),
        ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "DSA keys are not accepted"),
        ("hello world", "not an OpenSSH public key line"),
        ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB", "not a valid ssh-ed25519 public key"),
        ("ssh-ed25519-cert-v01@openssh.com AAAA", "certificates are not accepted"),
    ],
)
def test_bad_keys_are_refused_naming_the_field_and_rule(text, rule):
    with pytest.raises(SSHKeyRefused, match=rule) as refused:
        ssh_public_key_parse(text)
    assert refused.value.field == "public_key"
    assert refused.value.message.startswith("public_key: ")


def test_a_line_whose_data_is_another_algorithm_is_refused():
    data = public_line("ecdsa-sha2-nistp256").split()[1]
    with pytest.raises(SSHKeyRefused, match="not a valid ssh-ed25519 public key"):
        ssh_public_key_parse(f"ssh-ed25519 {data}")


def test_two_keys_in_one_paste_are_refused():
    with pytest.raises(SSHKeyRefused, match="one key per line"):
        ssh_public_key_parse(public_line() + "\n" + public_line())


# --- services ------------------------------------------------------------------------------


def test_adding_a_key_stores_the_bare_line_and_audits_it(alice):
    line = public_line(comment="alice@laptop")
    key = ssh_key_add(user=alice, public_key=line)
    assert key.name == "alice@laptop"
    assert key.public_key == bare(line)
    event = AuditEvent.objects.get(action="ssh_key.create")
    assert event.actor == alice
    assert event.object_id == str(key.pk)
    assert event.changes["fingerprint"] == key.fingerprint


def test_the_same_key_twice_is_refused_for_one_user_but_not_for_two(alice, bob):
    line = public_line()
    ssh_key_add(user=alice, public_key=line, name="one")
    with pytest.raises(SSHKeyRefused, match="already stored"):
        ssh_key_add(user=alice, public_key=line, name="again")
    ssh_key_add(user=bob, public_key=line)
    assert SSHKey.objects.count() == 2


def test_deleting_a_key_audits_it(alice):
    key = ssh_key_add(user=alice, public_key=public_line())
    ssh_key_delete(key=key, actor=alice)
    assert not SSHKey.objects.exists()
    event = AuditEvent.objects.get(action="ssh_key.delete")
    assert event.object_id == str(key.pk) and event.actor == alice


# --- API -----------------------------------------------------------------------------------


def api_as(user) -> APIClient:
    _, raw = api_key_create(user=user, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_api_adds_lists_shows_and_deletes_own_keys(alice):
    api = api_as(alice)
    line = public_line(comment="work")
    created = api.post("/api/v1/ssh-keys/", {"public_key": line}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["name"] == "work" and body["algorithm"] == "ssh-ed25519"
    assert body["public_key"] == bare(line) and body["fingerprint"].startswith("SHA256:")
    listed = api.get("/api/v1/ssh-keys/").json()
    assert [k["id"] for k in listed["results"]] == [body["id"]]
    assert api.get(f"/api/v1/ssh-keys/{body['id']}/").json()["fingerprint"] == body["fingerprint"]
    assert api.delete(f"/api/v1/ssh-keys/{body['id']}/").status_code == 204
    assert api.get("/api/v1/ssh-keys/").json()["results"] == []


def test_api_refuses_a_bad_key_with_the_field_and_rule(alice):
    answer = api_as(alice).post(
        "/api/v1/ssh-keys/", {"public_key": public_line("ssh-rsa", key_size=1024)}, format="json"
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid"
    assert "public_key" in error["fields"]
    assert "at least 2048 bits" in error["fields"]["public_key"][0]


def test_another_customers_key_is_not_found_and_not_deleted(alice, bob):
    key = ssh_key_add(user=alice, public_key=public_line())
    as_bob = api_as(bob)
    assert as_bob.get("/api/v1/ssh-keys/").json()["results"] == []
    assert as_bob.get(f"/api/v1/ssh-keys/{key.pk}/").status_code == 404
    assert as_bob.delete(f"/api/v1/ssh-keys/{key.pk}/").status_code == 404
    assert SSHKey.objects.filter(pk=key.pk).exists()


# --- the gateway's login decision ------------------------------------------------------------


@pytest.fixture
def ssh_image(db):
    return ImageTemplateFactory(slug="ssh-image", ssh_port=2222)


@pytest.fixture
def alice_running(alice, a100, ssh_image, make_host, sent):
    make_host("node1", a100, count=8, address="203.0.113.7")
    instance = instance_launch(user=alice, gpu_model=a100, gpu_count=1, image=ssh_image)
    instance_report_running(
        instance_id=str(instance.pk),
        port=40001,
        container_id="c0ffee",
        ports={"8888": 40001, "2222": 40002},
    )
    instance.refresh_from_db()
    return instance


def test_the_owners_key_reaches_the_instances_sshd(alice_running, alice):
    line = public_line()
    key = ssh_key_add(user=alice, public_key=line)
    target = ssh_login(instance_id=str(alice_running.pk), public_key_line=bare(line))
    assert target is not None
    assert (target.address, target.port) == ("203.0.113.7", 40002)
    assert target.host_public_key.startswith("ssh-ed25519 ")
    assert target.key_fingerprint == key.fingerprint
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_other_keys_instances_and_states_are_all_refused(alice_running, alice, bob):
    bobs = public_line()
    ssh_key_add(user=bob, public_key=bobs)
    alices = public_line()
    ssh_key_add(user=alice, public_key=alices)
    iid = str(alice_running.pk)
    assert ssh_login(instance_id=iid, public_key_line=bare(bobs)) is None
    assert ssh_login(instance_id=iid, public_key_line=bare(public_line())) is None
    assert ssh_login(instance_id="not-a-uuid", public_key_line=bare(alices)) is None
    other = "00000000-0000-4000-8000-000000000000"
    assert ssh_login(instance_id=other, public_key_line=bare(alices)) is None
    instance_stop(instance=alice_running)
    instance_report_stopped(instance_id=iid)
    assert ssh_login(instance_id=iid, public_key_line=bare(alices)) is None


def test_the_ssh_command_is_shown_only_while_running(alice_running, alice, settings):
    settings.SSH_GATEWAY_HOST, settings.SSH_GATEWAY_PORT = "ssh.example.net", 2022
    iid = str(alice_running.pk)
    assert ssh_access(alice_running) == {
        "host": "ssh.example.net",
        "port": 2022,
        "user": iid,
        "command": f"ssh -p 2022 {iid}@ssh.example.net",
    }
    body = api_as(alice).get(f"/api/v1/instances/{iid}/").json()
    assert body["ssh"]["command"] == f"ssh -p 2022 {iid}@ssh.example.net"
    instance_stop(instance=alice_running)
    alice_running.refresh_from_db()
    assert ssh_access(alice_running) is None


def test_an_image_without_sshd_has_no_ssh(alice, a100, image, make_host, sent):
    make_host("node1", a100, count=8)
    instance = instance_launch(user=alice, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(instance_id=str(instance.pk), port=40001, container_id="c0ffee")
    instance.refresh_from_db()
    assert ssh_access(instance) is None
