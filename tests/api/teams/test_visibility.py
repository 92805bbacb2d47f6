"""Teams keep the rules every resource keeps (tests/api/resources.py): a team is its
members' own; to anyone else it does not exist."""

from gpurental.teams.services import team_create
from tests.api.resources import OwnedResourceRules


class TestTeamRules(OwnedResourceRules):
    list_url = "/api/v1/teams/"
    id_field = "slug"
    unknown_id = "no-such-team"

    def make(self, request, owner):
        return team_create(creator=owner, name=f"Lab of {owner.full_name}")
