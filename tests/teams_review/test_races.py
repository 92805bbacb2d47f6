"""Two changes to one team at the same moment: each ends with an answer (done or refused
by a rule), never with a database error."""

import threading
import time

import pytest
from django.db import connection, transaction

from gpurental.teams import services
from gpurental.teams.models import Invitation, Membership, Team
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backend]


def test_accepting_and_withdrawing_one_invitation_at_once_both_answer():
    """Found by this review (fixed in 42e9aa9), a bug: invitation_accept locks the invitation
    row and then the team row; invitation_revoke locks the team row and then updates the
    invitation. Sent at once (an admin withdrawing the link the invitee is clicking), they
    wait on each other and PostgreSQL kills one (deadlock detected): a 500 for that person.
    Here a third connection holds the team row for a moment so that both are queued in that
    order: the withdrawal first, the acceptance (already holding the invitation) second.
    Fix: lock in one order, the team first (as every other team service does)."""
    alice = UserFactory(email="alice@example.com")
    team = services.team_create(creator=alice, name="Race", slug="race")
    invitation, raw = services.invite(
        team=team, actor=alice, email="ivy@example.com", role="member"
    )
    ivy = UserFactory(email="ivy@example.com")
    held, release = threading.Event(), threading.Event()
    outcomes: dict[str, str] = {}

    def hold_team():
        try:
            with transaction.atomic():
                Team.objects.select_for_update().get(pk=team.pk)
                held.set()
                release.wait(10)
        finally:
            connection.close()

    def attempt(name, call):
        try:
            call()
            outcomes[name] = "done"
        except (services.TeamRefused, services.RoleTooLow):
            outcomes[name] = "refused"
        except Exception as exc:  # noqa: BLE001 - what the person would get as a 500
            outcomes[name] = type(exc).__name__
        finally:
            connection.close()

    holder = threading.Thread(target=hold_team)
    holder.start()
    assert held.wait(10)
    revoker = threading.Thread(
        target=attempt,
        args=("revoke", lambda: services.invitation_revoke(invitation=invitation, actor=alice)),
    )
    accepter = threading.Thread(
        target=attempt,
        args=("accept", lambda: services.invitation_accept(token=raw, user=ivy)),
    )
    revoker.start()
    time.sleep(0.5)  # the withdrawal waits for the team row first
    accepter.start()
    time.sleep(0.5)  # the acceptance holds the invitation and waits for the team row
    release.set()
    for thread in (holder, revoker, accepter):
        thread.join(30)

    assert set(outcomes.values()) <= {"done", "refused"}, outcomes
    invitation.refresh_from_db()
    joined = Membership.objects.filter(team=team, user=ivy).exists()
    assert joined == (invitation.accepted_at is not None)
    assert not (joined and invitation.revoked_at)


def test_the_last_two_owners_leaving_at_once_leave_one_owner():
    alice, dave = UserFactory(email="alice@example.com"), UserFactory(email="dave@example.com")
    team = services.team_create(creator=alice, name="Race", slug="race")
    Membership.objects.create(team=team, user=dave, role="owner")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def leave(person):
        try:
            row = Membership.objects.get(team=team, user=person)
            barrier.wait()
            services.leave(membership=row)
            outcomes.append("left")
        except services.TeamRefused:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=leave, args=(p,)) for p in (alice, dave)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["left", "refused"]
    assert Membership.objects.filter(team=team, role="owner").count() == 1
    assert not Invitation.objects.exists()
