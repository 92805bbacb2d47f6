"""A team account's notifications: its webhooks get the event, its owners and admins the
e-mail (members and viewers do not)."""

from decimal import Decimal

from django.core import mail

from gpurental.notifications.models import Notification
from gpurental.notifications.services import endpoint_create, notify
from tests.notifications import conftest as notifications_conftest

# The notifications tests' fixtures: a real HTTP receiver, eager Celery, on-commit runs.
receiver = notifications_conftest.receiver
fire = notifications_conftest.fire
notification_settings = notifications_conftest.notification_settings


def test_a_team_event_mails_owners_and_admins_and_posts_to_the_teams_webhooks(
    team, alice, dave, erin, frank, receiver, fire
):
    endpoint_create(user=team.account, url=receiver.url, description="team hook")
    fire(notify, team.account, "payment_received", amount=Decimal("10"), reference="r1")

    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.com", "dave@example.com"]
    assert [e["type"] for e in receiver.events()] == ["payment_received"]
    mailed = Notification.objects.filter(channel="email").values_list("user__email", flat=True)
    assert sorted(mailed) == ["alice@example.com", "dave@example.com"]
    assert not Notification.objects.filter(user=team.account, channel="email").exists()
    assert Notification.objects.filter(user=team.account, channel="webhook").count() == 1
