"""Shared data for the groups' surface tests (API, CLI, console): the article's catalog
(an "A10" GPU with a 1-GPU plan, the serving-echo image on port 8000) and specs in each
format. Test modules import the fixtures they use from here."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from gpurental.accounts.models import CUSTOMER_SCOPES, ApiKeyScope
from gpurental.accounts.services import api_key_create
from tests.factories import GPUModelFactory, ImageTemplateFactory, PlanFactory

ARTICLE_HCL = """resource "elastic_gpu" "inference" {
  min_nodes     = 1
  max_nodes     = 10
  scaling_metrics {
    metric = "gpu_utilization"
    threshold = 70
  }
  warm_pool {
    size = 2
    instance_type = "A10"
  }
}
"""
SPEC = {
    "name": "inference",
    "min_nodes": 1,
    "max_nodes": 10,
    "scaling_metrics": [{"metric": "gpu_utilization", "threshold": 70}],
    "warm_pool": {"size": 2, "instance_type": "A10"},
}
SPEC_YAML = """name: inference
min_nodes: 1
max_nodes: 10
scaling_metrics:
  - metric: gpu_utilization
    threshold: 70
warm_pool:
  size: 2
  instance_type: A10
"""
SPEC_JSON = json.dumps(SPEC, indent=2)


@pytest.fixture
def a10(db):
    model = GPUModelFactory(
        slug="a10-24gb", name="A10 24GB", short_name="A10", memory_gb=24, nvlink_bandwidth_gbs=0
    )
    PlanFactory(gpu_model=model, gpu_count=1, slug="a10-x1", hourly_rate=Decimal("1.1000"))
    return model


@pytest.fixture
def serving_echo(db):
    return ImageTemplateFactory(
        slug="serving-echo",
        name="Serving echo",
        image="gpurental/serving-echo:latest",
        port=8000,
        http_ports=[8000],
    )


@pytest.fixture
def group_catalog(a10, serving_echo):
    return a10, serving_echo


@pytest.fixture
def api_for(db):
    """An APIClient that sends ``Authorization: Bearer <a new key of user>``."""

    def make(user) -> APIClient:
        # Staff test keys carry staff powers (a key without the staff scope has none).
        scopes = [*CUSTOMER_SCOPES, ApiKeyScope.STAFF] if user.is_staff else None
        _, raw = api_key_create(user=user, name="tests", scopes=scopes)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return make
