"""Invitations e-mail any address a member types: a team may send TEAM_INVITATIONS_PER_DAY
of them in any 24 hours, and a person PERSON_INVITATIONS_PER_DAY over all their teams, so
the platform cannot be used as a mailer."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone

from gpurental.teams import services


def test_past_the_daily_allowance_an_invitation_is_refused_naming_the_limit(team, alice, settings):
    settings.TEAM_INVITATIONS_PER_DAY = 3
    now = timezone.now()
    for number in range(3):
        services.invite(
            team=team, actor=alice, email=f"p{number}@example.net", role="viewer", now=now
        )
    with pytest.raises(services.TeamRefused) as refused:
        services.invite(team=team, actor=alice, email="p9@example.net", role="viewer", now=now)
    assert refused.value.field == "email"
    assert "3 invitations in the last 24 hours" in refused.value.message
    assert "TEAM_INVITATIONS_PER_DAY" in refused.value.message
    assert len(mail.outbox) == 3  # nothing sent for the refused one


def test_the_allowance_comes_back_a_day_later(team, alice, settings):
    settings.TEAM_INVITATIONS_PER_DAY = 1
    then = timezone.now() - dt.timedelta(days=1, minutes=1)
    services.invite(team=team, actor=alice, email="old@example.net", role="viewer", now=then)
    services.invite(team=team, actor=alice, email="new@example.net", role="viewer")
    assert len(mail.outbox) == 2


def test_more_teams_are_no_way_around_the_allowance(alice, settings):
    settings.TEAM_INVITATIONS_PER_DAY = 2
    settings.PERSON_INVITATIONS_PER_DAY = 3
    teams = [services.team_create(creator=alice, name=f"Spam {n}") for n in range(3)]
    now = timezone.now()
    for number in range(3):
        services.invite(
            team=teams[number % 2], actor=alice, email=f"p{number}@example.net", role="viewer",
            now=now,
        )  # fmt: skip
    with pytest.raises(services.TeamRefused) as refused:
        services.invite(team=teams[2], actor=alice, email="p9@example.net", role="viewer", now=now)
    assert refused.value.field == "email"
    assert "3 invitations in the last 24 hours over all your teams" in refused.value.message
    assert "PERSON_INVITATIONS_PER_DAY" in refused.value.message
    assert len(mail.outbox) == 3
