"""The console's team pages and the account switcher."""

import pytest
from django.core import mail
from django.urls import reverse

from gpurental.accounts.models import ApiKey
from gpurental.rentals.models import Instance
from gpurental.rentals.services.lifecycle import instance_launch
from gpurental.teams import services
from gpurental.teams.models import Membership


@pytest.fixture
def team_instance(team, a100, image, node, sent, settings):
    settings.BILLING_ENFORCE_BALANCE = False
    return instance_launch(
        user=team.account, gpu_model=a100, gpu_count=1, image=image, name="team-notebook"
    )


@pytest.fixture
def own_instance(alice, a100, image, node, sent, settings):
    settings.BILLING_ENFORCE_BALANCE = False
    return instance_launch(user=alice, gpu_model=a100, gpu_count=1, image=image, name="my-own-nb")


def switch(client, slug: str):
    return client.post(reverse("team_switch"), {"team": slug, "next": "/dashboard/"})


def test_the_switcher_changes_what_the_dashboard_lists(
    client, alice, team, team_instance, own_instance
):
    client.force_login(alice)
    personal = client.get("/dashboard/").text
    assert "my-own-nb" in personal and "team-notebook" not in personal
    assert 'id="account-switcher"' in personal and "Acme Research" in personal

    assert switch(client, "acme").status_code == 302
    as_team = client.get("/dashboard/").text
    assert "team-notebook" in as_team and "my-own-nb" not in as_team
    assert client.get(f"/instances/{team_instance.pk}/").status_code == 200
    assert client.get(f"/instances/{own_instance.pk}/").status_code == 404

    switch(client, "")
    assert "my-own-nb" in client.get("/dashboard/").text


def test_an_outsider_gets_404_on_the_teams_objects_and_pages(client, bob, team, team_instance):
    client.force_login(bob)
    assert client.get(f"/instances/{team_instance.pk}/").status_code == 404
    assert client.post(f"/instances/{team_instance.pk}/stop/").status_code == 404
    assert client.get("/teams/acme/").status_code == 404
    assert switch(client, "acme").status_code == 404
    assert Instance.objects.get(pk=team_instance.pk).status == "pending"


def test_a_viewer_reads_the_team_instance_but_may_not_stop_or_open_it(
    client, frank, team, team_instance
):
    client.force_login(frank)
    switch(client, "acme")
    page = client.get(f"/instances/{team_instance.pk}/")
    assert page.status_code == 200
    assert client.post(f"/instances/{team_instance.pk}/stop/").status_code == 403
    assert client.get(f"/instances/{team_instance.pk}/open/").status_code == 403
    assert Instance.objects.get(pk=team_instance.pk).status == "pending"


def test_a_member_removed_since_is_back_on_their_own_account(client, erin, team, team_instance):
    client.force_login(erin)
    switch(client, "acme")
    assert client.get(f"/instances/{team_instance.pk}/").status_code == 200
    Membership.objects.filter(team=team, user=erin).delete()
    assert client.get(f"/instances/{team_instance.pk}/").status_code == 404


def test_create_a_team_invite_and_accept_through_the_pages(client, alice, bob):
    client.force_login(alice)
    empty = client.get("/teams/")
    assert empty.status_code == 200 and "You are in no team yet." in empty.text
    refused = client.post("/teams/", {"name": "  "}, follow=True).text
    assert "name: give the team a name" in refused
    created = client.post("/teams/", {"name": "Lab <b>One</b>"})
    assert created.status_code == 302 and created["Location"] == "/teams/lab-boneb/"
    page = client.get("/teams/lab-boneb/").text
    assert "Lab &lt;b&gt;One&lt;/b&gt;" in page and "<b>One</b>" not in page

    client.post("/teams/lab-boneb/", {"action": "invite", "email": bob.email, "role": "viewer"})
    [message] = mail.outbox
    link = next(line for line in message.body.splitlines() if "/teams/invite/" in line)
    path = link[link.index("/teams/invite/") :]

    client.force_login(bob)
    assert "Join Lab &lt;b&gt;One&lt;/b&gt; as viewer" in client.get(path).text
    accepted = client.post(path)
    assert accepted.status_code == 302
    assert Membership.objects.get(team__slug="lab-boneb", user=bob).role == "viewer"


def test_accepting_with_another_email_names_the_rule(client, alice, bob, team):
    _, raw = services.invite(team=team, actor=alice, email="someone@example.com", role="member")
    client.force_login(bob)
    page = client.post(f"/teams/invite/{raw}/", follow=True).text
    assert "this invitation is for someone@example.com" in page
    assert not Membership.objects.filter(team=team, user=bob).exists()


def test_the_last_owner_leaving_is_refused_with_the_rule(client, alice, team):
    client.force_login(alice)
    page = client.post("/teams/acme/", {"action": "leave"}, follow=True).text
    assert "last owner" in page
    assert Membership.objects.filter(team=team, user=alice, role="owner").exists()


def test_a_key_made_in_the_console_can_act_for_a_team_of_mine_only(client, erin, team, bob):
    client.force_login(erin)
    switch(client, "acme")
    page = client.get("/keys/").text
    assert 'name="team"' in page and 'value="acme" selected' in page
    client.post("/keys/", {"name": "team ci", "scopes": ["read"], "team": "acme"})
    assert ApiKey.objects.get(user=erin, name="team ci").team == team
    client.post("/keys/", {"name": "mine", "scopes": ["read"], "team": ""})
    assert ApiKey.objects.get(user=erin, name="mine").team is None

    other = services.team_create(creator=bob, name="Bob's", slug="bobs")
    refused = client.post("/keys/", {"name": "sneaky", "scopes": ["read"], "team": other.slug})
    assert refused.status_code == 200 and "team" in refused.context["form"].errors
    assert not ApiKey.objects.filter(name="sneaky").exists()


def test_a_team_account_cannot_log_in_even_with_a_password(client, team):
    team.account.set_password("a password someone set")
    team.account.save()
    answer = client.post(
        "/login/", {"username": team.account.email, "password": "a password someone set"}
    )
    assert answer.status_code == 200  # the form again, not a redirect into the console
    assert client.get("/dashboard/").status_code == 302


def test_staff_acting_for_a_team_still_stop_any_instance_from_the_fleet_page(
    client, carol, bob, team, a100, image, node, sent, settings
):
    settings.BILLING_ENFORCE_BALANCE = False
    Membership.objects.create(team=team, user=carol, role="member")
    instance = instance_launch(user=bob, gpu_model=a100, gpu_count=1, image=image)
    client.force_login(carol)
    switch(client, "acme")
    assert client.post(f"/staff/instances/{instance.pk}/stop/").status_code == 302
    assert Instance.objects.get(pk=instance.pk).status == "stopping"


def test_staff_acting_for_a_team_still_open_a_customers_instance_page(
    client, carol, bob, team, own_instance
):
    Membership.objects.create(team=team, user=carol, role="viewer")
    client.force_login(carol)
    switch(client, "acme")
    assert client.get(f"/instances/{own_instance.pk}/").status_code == 200
    # ... but their viewer role in acme does not stop them acting as staff elsewhere.
    assert client.post(f"/instances/{own_instance.pk}/stop/").status_code == 302
