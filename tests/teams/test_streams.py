"""The instance websocket for a team's instance: every member watches it (viewers
included); anyone else is refused like for an instance that does not exist."""

import pytest

from gpurental.rentals.services import lifecycle as lc
from gpurental.telemetry.consumers import CLOSE_NOT_FOUND
from tests.websockets import watch

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_viewer_watches_the_team_instance_and_an_outsider_is_refused(
    team, frank, bob, a100, make_host, image, sent, settings
):
    settings.BILLING_ENFORCE_BALANCE = False
    make_host("node1", a100)
    instance = lc.instance_launch(user=team.account, image=image, gpu_model=a100, gpu_count=1)
    path = f"/ws/instances/{instance.pk}/"

    connected, messages = watch(frank, path, frames=0)
    assert connected and messages[0]["type"] == "snapshot"
    assert watch(bob, path, frames=0) == (False, CLOSE_NOT_FOUND)
