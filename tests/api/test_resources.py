"""Every resource on the API's router keeps the shared rules (tests/api/resources.py): a
new resource without its ``test_visibility.py`` fails here."""

import importlib
from pathlib import Path

from gpurental.api.urls import router
from tests.api.resources import ResourceRules

HERE = Path(__file__).parent


def rule_classes() -> list[type]:
    for path in sorted(HERE.rglob("test_visibility.py")):
        importlib.import_module(".".join(path.relative_to(HERE.parents[1]).with_suffix("").parts))
    found, todo = [], [ResourceRules]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__name__.startswith("Test"):
                found.append(sub)
    return found


def test_every_resource_on_the_router_keeps_the_shared_rules():
    on_router = {f"/api/v1/{prefix}/" for prefix, _viewset, _basename in router.registry}
    covered = {rules.list_url for rules in rule_classes()}
    assert covered <= on_router, covered - on_router  # no rules for a URL that is gone
    assert on_router <= covered, on_router - covered
