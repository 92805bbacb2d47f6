"""The SDK's HTTP behaviour against a local stand-in of the API."""

from __future__ import annotations

import uuid

import pytest

from gpurental import __version__
from gpurental.client import (
    AuthenticationError,
    Client,
    Conflict,
    ConnectionError,
    GpuRentalError,
    InvalidState,
    NoCapacity,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    ServerError,
    Timeout,
    ValidationError,
)
from tests.client.conftest import API_KEY, Answer, error, instance

ARTICLE_BODY = {
    "gpu_model": "A10G",
    "gpu_count": 1,
    "image": "pytorch-2.1",
    "model_repo": "huggingface",
}


def test_requests_carry_the_bearer_key_and_a_versioned_user_agent(api, client):
    api.reply("GET", "/api/v1/me/", (200, {"email": "alice@example.com", "balance": "12.50"}))

    assert client.me() == {"email": "alice@example.com", "balance": "12.50"}

    (request,) = api.received("GET", "/api/v1/me/")
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.headers["User-Agent"] == f"gpurental-client/{__version__}"
    assert "Idempotency-Key" not in request.headers


def test_base_url_may_already_end_in_the_api_root(api, sleeps):
    api.reply("GET", "/api/v1/me/", (200, {"email": "alice@example.com"}))

    client = Client(api_key=API_KEY, base_url=f"{api.url}/api/v1/")

    assert client.me()["email"] == "alice@example.com"


def test_article_call_sends_gpu_model_image_and_model_repo(api, client):
    api.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))

    launched = client.create_instance(
        gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface"
    )

    assert launched.id == 7
    assert launched.status == "pending"
    (request,) = api.received("POST", "/api/v1/instances/")
    assert request.body == ARTICLE_BODY


def test_create_cluster_sends_its_size_and_returns_the_ranks_in_order(api, client):
    ranks = [instance(id=i, name=f"ddp-{i}") for i in range(2)]
    api.reply("POST", "/api/v1/instances/cluster/", (201, {"id": "c1", "instances": ranks}))

    launched = client.create_cluster(size=2, gpu_type="A10G", framework="pytorch-2.1", name="ddp")

    assert [i.id for i in launched] == [0, 1]
    (request,) = api.received("POST", "/api/v1/instances/cluster/")
    assert request.body == {
        "image": "pytorch-2.1",
        "size": 2,
        "placement": "pack",
        "gpu_model": "A10G",
        "gpu_count": 1,
        "name": "ddp",
    }
    with pytest.raises(ValueError, match="either gpu_type"):
        client.create_cluster(size=2, framework="pytorch-2.1")


def test_launch_by_plan_sends_the_plan_instead_of_model_and_count(api, client):
    api.reply("POST", "/api/v1/instances/", (201, instance()))

    client.create_instance(plan="a100-x4", framework="jupyter-cpu", name="train")

    assert api.received("POST")[0].body == {
        "plan": "a100-x4",
        "image": "jupyter-cpu",
        "name": "train",
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"gpu_type": "A10G", "plan": "a10g-x1"},
        {"plan": "a10g-x1", "gpu_count": 2},
        {},
    ],
)
def test_launch_arguments_that_do_not_go_together_are_refused_before_sending(api, client, kwargs):
    with pytest.raises(ValueError):
        client.create_instance(framework="pytorch-2.1", **kwargs)
    assert api.requests == []


def test_server_refusing_the_model_cache_surfaces_its_message(api, client):
    message = "host gpu-01 has no shared Hugging Face cache; launch without model_repo"
    api.reply(
        "POST",
        "/api/v1/instances/",
        error(400, "validation_error", message, model_repo=["not available on this host"]),
    )

    with pytest.raises(ValidationError) as raised:
        client.create_instance(gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface")

    assert raised.value.message == message
    assert raised.value.status == 400
    assert raised.value.fields == {"model_repo": ["not available on this host"]}
    assert "model_repo: not available on this host" in str(raised.value)


def test_every_post_gets_its_own_uuid_idempotency_key(api, client):
    api.reply("POST", "/api/v1/instances/7/stop/", (200, instance(status="stopping")))

    client.stop(7)
    client.stop(7)

    keys = [r.headers["Idempotency-Key"] for r in api.received("POST")]
    assert len(set(keys)) == 2
    assert all(uuid.UUID(key).version == 4 for key in keys)


def test_retried_post_sends_the_same_idempotency_key_again(api, client, sleeps):
    api.reply(
        "POST",
        "/api/v1/instances/",
        (503, {"error": {"code": "unavailable", "message": "restarting"}}),
        (502, None),
        (201, instance()),
    )

    client.create_instance(gpu_type="A10G", framework="pytorch-2.1")

    posts = api.received("POST", "/api/v1/instances/")
    assert len(posts) == 3
    assert len({p.headers["Idempotency-Key"] for p in posts}) == 1
    assert all(p.body == posts[0].body for p in posts)
    assert sleeps == [0.5, 1.0]


def test_post_still_running_on_the_server_is_asked_again_with_the_same_key(api, client, sleeps):
    # What the API answers a retry that arrives while the first try is still running.
    api.reply(
        "POST",
        "/api/v1/instances/7/restart/",
        Answer(
            409,
            {"error": {"code": "idempotency_key_in_progress", "message": "still running"}},
            {"Retry-After": "1"},
        ),
        (200, instance(status="pending")),
    )

    assert client.restart(7).status == "pending"

    posts = api.received("POST")
    assert len({p.headers["Idempotency-Key"] for p in posts}) == 1
    assert sleeps == [1.0]


def test_get_is_retried_after_gateway_timeout(api, client, sleeps):
    api.reply("GET", "/api/v1/images/", (504, None), (200, [{"slug": "pytorch-2.1"}]))

    assert client.images() == [{"slug": "pytorch-2.1"}]
    assert len(api.received("GET")) == 2


def test_retries_are_bounded_then_the_server_error_is_raised(api, client, sleeps):
    api.reply("GET", "/api/v1/plans/", (503, {"error": {"code": "down", "message": "maintenance"}}))

    with pytest.raises(ServerError, match="maintenance"):
        client.plans()

    assert len(api.received("GET")) == client.max_retries + 1
    assert sleeps == [0.5, 1.0, 2.0]


def test_rate_limit_waits_as_long_as_retry_after_says(api, client, sleeps):
    api.reply(
        "GET",
        "/api/v1/gpu-models/",
        Answer(429, {"error": {"code": "throttled", "message": "slow down"}}, {"Retry-After": "2"}),
        (200, [{"slug": "a10g"}]),
    )

    assert client.gpu_models() == [{"slug": "a10g"}]
    assert sleeps == [2.0]


def test_rate_limit_longer_than_the_bound_is_raised_without_waiting(api, client, sleeps):
    api.reply(
        "GET",
        "/api/v1/gpu-models/",
        Answer(
            429,
            {"error": {"code": "throttled", "message": "hourly limit reached"}},
            {"Retry-After": "3600"},
        ),
    )

    with pytest.raises(RateLimited) as raised:
        client.gpu_models()

    assert raised.value.retry_after == 3600
    assert raised.value.message == "hourly limit reached"
    assert sleeps == []
    assert len(api.requests) == 1


def test_paginated_lists_are_followed_to_the_last_page(api, client):
    api.reply(
        "GET",
        "/api/v1/instances/",
        (
            200,
            {"count": 3, "next": f"{api.url}/api/v1/instances/?page=2", "results": [instance(1)]},
        ),
    )
    api.reply(
        "GET",
        "/api/v1/instances/?page=2",
        (
            200,
            {
                "count": 3,
                "next": f"{api.url}/api/v1/instances/?page=3",
                "results": [instance(2)],
            },
        ),
    )
    api.reply(
        "GET",
        "/api/v1/instances/?page=3",
        (200, {"count": 3, "next": None, "results": [instance(3)]}),
    )

    assert [i.id for i in client.list_instances()] == [1, 2, 3]


def test_next_link_naming_another_host_is_fetched_from_our_server(api, client):
    # The key must never go to a host the user did not name.
    api.reply(
        "GET",
        "/api/v1/plans/",
        (
            200,
            {"next": "http://elsewhere.invalid/api/v1/plans/?page=2", "results": [{"slug": "a"}]},
        ),
    )
    api.reply("GET", "/api/v1/plans/?page=2", (200, {"next": None, "results": [{"slug": "b"}]}))

    assert [p["slug"] for p in client.plans()] == ["a", "b"]
    assert api.received()[-1].query == {"page": ["2"]}


def test_status_filter_goes_into_the_query(api, client):
    api.reply("GET", "/api/v1/instances/", (200, [instance(status="running")]))

    (running,) = client.list_instances(status="running")

    assert running.status == "running"
    assert api.received()[0].query == {"status": ["running"]}


@pytest.mark.parametrize("action", ["stop", "start", "restart", "terminate"])
def test_actions_post_to_the_instance_action_and_return_the_instance(api, client, action):
    api.reply("POST", f"/api/v1/instances/7/{action}/", (200, instance(status="stopping")))

    result = getattr(client, action)(7)

    assert result.status == "stopping"
    assert [r.path for r in api.received("POST")] == [f"/api/v1/instances/7/{action}/"]


@pytest.mark.parametrize(
    ("status", "code", "exception"),
    [
        (400, "validation_error", ValidationError),
        (422, "unprocessable", ValidationError),
        (401, "not_authenticated", AuthenticationError),
        (403, "permission_denied", PermissionDenied),
        (404, "not_found", NotFound),
        (409, "no_capacity", NoCapacity),
        (409, "quota_exceeded", QuotaExceeded),
        (409, "invalid_state", InvalidState),
        (409, "something_new", Conflict),
        (429, "throttled", RateLimited),
    ],
)
def test_api_errors_become_typed_exceptions_with_the_servers_message(
    api, sleeps, status, code, exception
):
    client = Client(api_key=API_KEY, base_url=api.url, max_retries=0)
    api.reply("GET", "/api/v1/instances/7/", error(status, code, f"the server says {code}"))

    with pytest.raises(exception) as raised:
        client.get_instance(7)

    assert type(raised.value) is exception
    assert raised.value.status == status
    assert raised.value.code == code
    assert raised.value.message == f"the server says {code}"


def test_error_without_the_api_shape_still_names_what_failed(api, client, sleeps):
    api.reply("GET", "/api/v1/me/", Answer(502, raw=b"<html>Bad Gateway</html>"))

    with pytest.raises(ServerError) as raised:
        client.me()

    assert "/api/v1/me/" in raised.value.message
    assert "502" in raised.value.message


def test_refused_connection_names_the_base_url(closed_port_url, sleeps):
    client = Client(api_key=API_KEY, base_url=closed_port_url, max_retries=2)

    with pytest.raises(ConnectionError) as raised:
        client.me()

    assert closed_port_url in str(raised.value)
    assert "refused" in str(raised.value).lower()
    assert sleeps == [0.5, 1.0]


def test_slow_answer_raises_timeout(api, sleeps):
    api.reply("GET", "/api/v1/me/", Answer(200, {"email": "a@example.com"}, delay=0.5))
    client = Client(api_key=API_KEY, base_url=api.url, timeout=0.1, max_retries=0)

    with pytest.raises(Timeout, match="did not answer"):
        client.me()


def test_without_a_key_anywhere_the_client_says_how_to_get_one():
    with pytest.raises(AuthenticationError, match="gpurental login"):
        Client(base_url="http://127.0.0.1:1")


def test_key_and_url_come_from_the_environment(api, client, monkeypatch):
    monkeypatch.setenv("GPURENTAL_API_KEY", "gpr_from_env")
    monkeypatch.setenv("GPURENTAL_URL", api.url)
    api.reply("GET", "/api/v1/me/", (200, {"email": "alice@example.com"}))

    Client().me()

    assert api.received()[0].headers["Authorization"] == "Bearer gpr_from_env"


def test_repr_does_not_show_the_key(client):
    assert API_KEY not in repr(client)
    assert isinstance(GpuRentalError("x"), Exception)
