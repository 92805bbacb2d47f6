"""Fixtures of the API tests (keys, a host, instances in a given state), reused here."""

import re

from tests.api.conftest import (  # noqa: F401 (fixtures)
    as_alice,
    client_for,
    fast_password_hasher,
    launched,
    launches_need_no_credit,
    node,
    running,
)

CJK = re.compile(r"[\u4e00-\u9fff]")
ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-Hans"}


def is_chinese(text: str) -> bool:
    return bool(CJK.search(text))
