"""Property-based fuzzing of every operation in the OpenAPI schema (schemathesis).

Schemathesis reads /api/schema/ from the WSGI app and sends generated requests, valid
and invalid, authenticated with alice's API key, against a fleet with free GPUs.
Whatever it sends, the API must never answer 5xx, and what it answers must match the
schema (documented status, content type and body: the SDK and others rely on it).

Random strings almost never name a real GPU model, image or instance, so the hooks
below mix real ones into the generated values: launches and actions then really run,
deep into the services (their agent commands are recorded by ``sent``, no broker).
"""

import os
from decimal import Decimal

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gpurental.accounts.services import api_key_create
from gpurental.billing.services import credit_add
from gpurental.rentals.services.lifecycle import instance_launch, instance_report_running
from tests.factories import GPUModelFactory, ImageTemplateFactory, PlanFactory

pytestmark = pytest.mark.slow  # fuzzes every endpoint (hundreds of requests)

REAL_VALUES = {
    "gpu_model": ["A10G", "a100-80GB-sxm"],
    "gpu_count": [1, 2, 8],
    "plan": ["a10g-x1", "a100-x2", "a100-x8"],
    "image": ["jupyter-cpu", "pytorch-2.1"],
}
CHECKS = [
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
    content_type_conformance,
]
# Ids of objects that exist in the current test's database (filled by the fixture).
KNOWN_IDS: dict[str, list[str]] = {"instances": [], "api-keys": []}


@pytest.fixture
def fuzz_key(db, settings, alice, bob, a100, image, make_host, sent):
    """Alice's API key, in a world with free GPUs and a running instance each.

    The catalog has what the schema's examples name (A10G, a10g-x2, pytorch-2.1, as
    ``seed_demo`` makes them), so the examples phase launches for real too.
    """
    settings.API_THROTTLE_RATE = "100000/min"  # the fuzzer is no abuser
    # Enough credit for small launches, too little for the biggest plans.
    settings.BILLING_ENFORCE_BALANCE = True
    for user in (alice, bob):
        credit_add(user=user, amount=Decimal("1.00"))
    a10g = GPUModelFactory(slug="a10g", name="A10G", short_name="A10G", memory_gb=24)
    for count in (1, 2, 4):
        PlanFactory(gpu_model=a10g, gpu_count=count, slug=f"a10g-x{count}")
    ImageTemplateFactory(slug="pytorch-2.1", name="PyTorch 2.1")
    make_host("node1", a100, count=8, hf_cache_dir="/srv/hf")
    make_host("node2", a10g, count=8, hf_cache_dir="/srv/hf")
    KNOWN_IDS["instances"] = []
    for user in (alice, bob):
        instance = instance_launch(user=user, gpu_model=a100, gpu_count=1, image=image)
        instance_report_running(instance_id=str(instance.pk), port=40000, container_id="c")
        KNOWN_IDS["instances"].append(str(instance.pk))
    KNOWN_IDS["api-keys"] = [str(api_key_create(user=u, name="spare")[0].pk) for u in (alice, bob)]
    _, raw = api_key_create(user=alice, name="fuzzing")
    # Requests run on this thread inside the test's transaction; Django would close
    # the connection (and so lose the transaction) at the start and end of each one.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield raw
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


# Loaded at collection, through the WSGI app; the schema view needs no database.
schema = schemathesis.openapi.from_wsgi("/api/schema/", WSGIHandler())
# The coverage phase (every boundary and every wrong type of every field, deterministic) is
# nearly 90 % of the requests: ~150 s on this project's machines. `make test` runs the
# examples and the fuzzing; `make fuzz` (run once in CI, .ci/run) adds the coverage phase
# and more fuzzing.
schema.config.phases.coverage.enabled = os.environ.get("FUZZ_COVERAGE") == "1"
# Generated requests per operation in the fuzzing phase: 15 in `make test`, 25 in `make fuzz`.
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))


@schema.hook
def flatmap_path_parameters(context, path_parameters):
    """Sometimes an id that exists: alice's (the caller's) or bob's."""
    collection = context.operation.path.split("/")[3]  # /api/v1/<collection>/{id}/…
    known = KNOWN_IDS.get(collection)
    if not known or not isinstance(path_parameters, dict) or "id" not in path_parameters:
        return st.just(path_parameters)
    return st.sampled_from([*known, path_parameters["id"]]).map(
        lambda value: {**path_parameters, "id": value}
    )


@schema.hook
def map_query(context, query):
    """A long-poll waits for a change no fuzzed request makes: keep its wait short (an
    invalid timeout stays as generated, to be refused)."""
    if not isinstance(query, dict) or "wait_for" not in query:
        return query
    timeout = query.get("timeout", "")
    try:
        # An empty value is no value: the API waits its default, 60 s.
        too_long = timeout == "" or float(timeout) > 0.1
    except (TypeError, ValueError):
        too_long = False
    return {**query, "timeout": 0.1} if too_long else query


@schema.hook
def flatmap_body(context, body):
    """Launch bodies that often name a real GPU model, plan and image, and one of the two
    ways to choose GPUs (a plan, or a model and count) rather than both."""
    if context.operation.path != "/api/v1/instances/" or not isinstance(body, dict):
        return st.just(body)
    swaps = st.fixed_dictionaries(
        {
            name: st.sampled_from([*values, body[name]])
            for name, values in REAL_VALUES.items()
            if name in body
        }
    )
    dropped = st.sampled_from([(), ("plan",), ("gpu_model", "gpu_count")])
    return st.tuples(swaps, dropped).map(
        lambda choice: {k: v for k, v in {**body, **choice[0]}.items() if k not in choice[1]}
    )


@schema.parametrize()
@hypothesis_settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)
def test_no_request_makes_the_api_fail(case, fuzz_key):
    # Every generated request meets the same world: what one changes is rolled back, so
    # capacity, quota and alice's running instance are there for the next one too.
    with transaction.atomic():
        try:
            case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_key}"}, checks=CHECKS)
        finally:
            transaction.set_rollback(True)
