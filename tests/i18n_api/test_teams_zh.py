"""Team refusals answer in the request's language, over the API too."""

from tests.api.conftest import assert_error
from tests.i18n_api.conftest import ZH


def test_team_refusal_and_unknown_team_are_chinese(as_alice):
    def create(**extra):
        return as_alice.post("/api/v1/teams/", {"name": "x", "slug": "---"}, **extra)

    english = assert_error(create(), 400, "invalid", field="slug")
    chinese = assert_error(create(**ZH), 400, "invalid", field="slug")
    assert "needs at least one letter or digit" in english["fields"]["slug"][0]
    assert chinese["fields"]["slug"][0].startswith("slug：至少需要一个字母或数字")

    missing = assert_error(as_alice.get("/api/v1/teams/nope/members/", **ZH), 404, "not_found")
    assert missing["message"] == "不存在团队 nope"
