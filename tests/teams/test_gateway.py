"""JupyterLab through the gateway for a team's instance: its members who may operate it
(member, admin, owner) get in with their own session; viewers and outsiders get 404."""

import dataclasses

from gpurental.gateway import routes
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from tests.gateway.test_security_review import run

MEMBER, STRANGER = 42, 43


def test_the_route_of_a_team_instance_admits_its_operators_only(
    team, alice, dave, erin, frank, bob, a100, image, node, sent, settings
):
    settings.BILLING_ENFORCE_BALANCE = False
    instance = instance_launch(user=team.account, gpu_model=a100, gpu_count=1, image=image)
    instance_report_running(instance_id=str(instance.pk), port=40001, container_id="c0ffee")

    route = routes.route_for(str(instance.pk))

    assert route.owner_id == team.account.pk
    assert {p for p in (alice, dave, erin, frank, bob) if route.admits(p.pk)} == {alice, dave, erin}
    assert not route.admits(None)


def test_the_gateway_lets_in_an_operators_session_and_nobody_elses():
    async def scenario(s):
        table = s.route
        s.route = lambda iid: (
            dataclasses.replace(table(iid), operators=frozenset({MEMBER})) if table(iid) else None
        )
        s.gateway.routes.drop(s.a_id)
        mine = await s.request("GET", "/api/status", headers={"Cookie": s.cookie(user=MEMBER)})
        assert mine[0] == 200, mine[2]
        other = await s.request("GET", "/api/status", headers={"Cookie": s.cookie(user=STRANGER)})
        assert other[0] == 404

    run(scenario)
