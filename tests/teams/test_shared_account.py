"""What a team shares: one balance (charges of its instances debit the team, not the member
who launched them), one GPU quota for all members together, and who may get in or watch."""

from datetime import timedelta
from decimal import Decimal

import asyncssh
import pytest
from django.utils import timezone

from gpurental.accounts.services import ssh_key_add
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.credits import credit_add
from gpurental.billing.services.metering import meter_run
from gpurental.gateway.sshroutes import ssh_login
from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from tests.billing.conftest import beat
from tests.factories import ImageTemplateFactory
from tests.teams.test_permission_matrix import key_client

LAUNCH = {"gpu_model": "A100", "gpu_count": 2, "image": "jupyter-cpu"}


def test_a_charge_on_a_team_instance_debits_the_team_not_the_member(
    team, erin, a100, image, node, sent
):
    credit_add(user=team.account, amount=Decimal("100.00"))
    credit_add(user=erin, amount=Decimal("50.00"))
    response = key_client(erin, team=team).post("/api/v1/instances/", LAUNCH, format="json")
    assert response.status_code == 201, response.content
    assert Instance.objects.get(pk=response.json()["id"]).user == team.account
    # The meter charges closed minutes: one launched (by the same service) an hour ago.
    at = timezone.now() - timedelta(hours=1)
    beat(node, at)
    earlier = instance_launch(user=team.account, image=image, gpu_model=a100, gpu_count=1, now=at)
    instance_report_running(instance_id=str(earlier.pk), port=4000, container_id="c", now=at)
    now = at + timedelta(minutes=30)
    beat(node, now)

    assert meter_run(now=now) >= 1

    assert balance_of(user=team.account) < Decimal("100.00")
    assert balance_of(user=erin) == Decimal("50.00")
    assert not erin.ledger.exclude(kind="credit").exists()
    assert team.account.ledger.filter(kind="usage").exists()


def test_the_teams_quota_limits_all_members_together(team, alice, erin, a100, image, node, sent):
    credit_add(user=team.account, amount=Decimal("500.00"))
    team.account.gpu_quota = 3
    team.account.save(update_fields=["gpu_quota"])
    first = key_client(alice, team=team).post("/api/v1/instances/", LAUNCH, format="json")
    assert first.status_code == 201, first.content
    second = key_client(erin, team=team).post("/api/v1/instances/", LAUNCH, format="json")
    assert second.status_code in (400, 403, 409), second.content
    assert "quota is 3 GPUs" in second.json()["error"]["message"]
    # Erin's own account has its own quota: the team's use does not count there.
    own = key_client(erin).post("/api/v1/instances/", LAUNCH, format="json")
    assert own.status_code == 201, own.content


@pytest.fixture
def team_ssh_instance(team, a100, node, sent):
    image = ImageTemplateFactory(slug="ssh-image", ssh_port=2222)
    instance = instance_launch(user=team.account, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(
        instance_id=str(instance.pk),
        port=40001,
        container_id="c0ffee",
        ports={"8888": 40001, "2222": 40002},
    )
    instance.refresh_from_db()
    return instance


def _line() -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    return " ".join(key.export_public_key().decode().split()[:2])


def test_ssh_lets_in_members_keys_not_viewers_or_outsiders(team_ssh_instance, erin, frank, bob):
    iid = str(team_ssh_instance.pk)
    lines = {}
    for person in (erin, frank, bob):
        lines[person.email] = _line()
        ssh_key_add(user=person, public_key=lines[person.email])
    assert team_ssh_instance.ssh_host_key, "the fixture must produce a running sshd"
    assert ssh_login(instance_id=iid, public_key_line=lines[erin.email]) is not None
    assert ssh_login(instance_id=iid, public_key_line=lines[frank.email]) is None
    assert ssh_login(instance_id=iid, public_key_line=lines[bob.email]) is None


def test_charts_are_for_every_member_and_nobody_else(
    client, team, frank, bob, a100, image, node, sent
):
    instance = instance_launch(user=team.account, gpu_model=a100, gpu_count=1, image=image)
    url = f"/telemetry/instances/{instance.pk}/history/?window=1h"
    client.force_login(frank)  # a viewer
    assert client.get(url).status_code == 200
    client.force_login(bob)
    assert client.get(url).status_code == 404
