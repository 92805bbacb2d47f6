"""The shipped Grafana dashboards: each has the shape Grafana imports, and every series
a dashboard or an alert rule queries is one /metrics exposes (no Grafana here: a schema
check and a query lint stand in for loading them)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import yaml

from gpurental.observability.collector import render
from tests.observability.conftest import DEPLOY, exposed_names

pytestmark = pytest.mark.django_db

DASHBOARDS = sorted((DEPLOY / "dashboards").glob("*.json"))

TARGET = {
    "type": "object",
    "required": ["refId", "expr", "datasource"],
    "properties": {"refId": {"type": "string"}, "expr": {"type": "string", "minLength": 1}},
}
PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos", "targets"],
    "properties": {
        "id": {"type": "integer"},
        "type": {"enum": ["timeseries", "stat", "table", "gauge", "heatmap", "bargauge"]},
        "title": {"type": "string", "minLength": 1},
        "gridPos": {
            "type": "object",
            "required": ["x", "y", "w", "h"],
            "properties": {k: {"type": "integer", "minimum": 0} for k in "xywh"},
        },
        "targets": {"type": "array", "minItems": 1, "items": TARGET},
    },
}
DASHBOARD = {
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 30},
        "panels": {"type": "array", "minItems": 1, "items": PANEL},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {"list": {"type": "array", "items": {"required": ["name", "type"]}}},
        },
    },
}

# PromQL words that look like series names but are not.
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "le", "inf", "nan",
}  # fmt: skip
PROMETHEUS_OWN = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


def series_names(expr: str) -> set[str]:
    """The series an expression reads: what is left once strings, label matchers, ranges,
    grouping clauses, functions, numbers, durations and Grafana variables are taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"\$\{?\w+\}?", " ", expr)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        word = match.group(0)
        after = expr[match.end() :].lstrip()
        if after.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        if expr[max(0, match.start() - 1)].isdigit():  # 5m, 1e3
            continue
        names.add(word)
    return names


def dashboard_queries(board: dict) -> list[str]:
    queries = [t["expr"] for p in board["panels"] for t in p["targets"]]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable["type"] == "query" and query:
            # label_values(<series selector>, label)
            inner = re.match(r"label_values\((.*),\s*\w+\)$", query)
            queries.append(inner.group(1) if inner else query)
    return queries


def rule_queries() -> list[str]:
    groups = yaml.safe_load((DEPLOY / "rules" / "gpurental.rules.yml").read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def test_the_four_dashboards_ship():
    titles = {json.loads(p.read_text())["title"] for p in DASHBOARDS}
    assert titles == {
        "gpurental / Fleet",
        "gpurental / Host",
        "gpurental / Customer usage",
        "gpurental / Control plane",
    }


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_has_the_shape_grafana_imports(path):
    board = json.loads(path.read_text())
    jsonschema.validate(board, DASHBOARD)
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    used = {v for q in dashboard_queries(board) for v in re.findall(r"\$(\w+)", q)}
    declared = {v["name"] for v in board["templating"]["list"]}
    assert used <= declared, f"undeclared variables: {used - declared}"


def test_every_series_a_dashboard_or_rule_queries_is_exposed(settings):
    exposed = exposed_names(render().decode()) | PROMETHEUS_OWN
    queries = rule_queries() + [
        q for p in DASHBOARDS for q in dashboard_queries(json.loads(p.read_text()))
    ]
    wanted = set().union(*(series_names(q) for q in queries))
    assert wanted, "the lint found no series at all"
    assert wanted <= exposed, f"not exposed by /metrics: {sorted(wanted - exposed)}"


def test_the_lint_catches_a_misspelt_series():
    assert series_names('sum by (host) (rate(DCGM_FI_DEV_GPU_UTILL{host="$host"}[5m])) > 0') == {
        "DCGM_FI_DEV_GPU_UTILL"
    }
    assert series_names("histogram_quantile(0.95, sum by (le) (rate(x_bucket[5m])))") == {
        "x_bucket"
    }
