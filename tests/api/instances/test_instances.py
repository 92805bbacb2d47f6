"""Instances over the API: launch, read, act; the errors a user can run into."""

import uuid
from decimal import Decimal

import pytest

from gpurental.billing.services import credit_add
from gpurental.catalog.models import Plan
from gpurental.rentals.models import Instance, InstanceStatus
from tests.api.conftest import assert_error
from tests.factories import GPUModelFactory, UserFactory

URL = "/api/v1/instances/"


@pytest.fixture
def launch_via_api(as_alice, django_capture_on_commit_callbacks):
    def post(body, client=as_alice, **extra):
        with django_capture_on_commit_callbacks(execute=True):
            return client.post(URL, body, **extra)

    return post


# --- launch -------------------------------------------------------------------


def test_launch_by_short_name_any_case_tells_the_agent(launch_via_api, node, image, sent):
    response = launch_via_api({"gpu_model": "a100", "gpu_count": 2, "image": "jupyter-cpu"})
    assert response.status_code == 201, response.json()
    data = response.json()
    instance = Instance.objects.get(pk=data["id"])
    assert data["status"] == "pending" and data["gpu_model"] == "a100-80gb-sxm"
    assert data["gpu_count"] == 2 and data["plan"] == "a100-x2" and data["image"] == "jupyter-cpu"
    assert data["host"] == "node1" and data["gpu_indices"] == [0, 1]
    assert data["jupyter_url"] is None  # not running yet
    assert [e["to_status"] for e in data["events"]] == ["pending", ""]
    assert set(data["events"][0]) == {
        "at",
        "kind",
        "from_status",
        "to_status",
        "step",
        "reason",
        "pull",
    }
    assert [m["task"] for m in sent] == ["instance_start"]
    assert sent[0]["spec"]["instance_id"] == str(instance.pk)
    assert instance.jupyter_token not in response.content.decode()


def test_launch_by_slug_and_name(launch_via_api, node, image):
    response = launch_via_api(
        {"gpu_model": "A100-80GB-SXM", "image": "jupyter-cpu", "name": "  my notebook "}
    )
    assert response.status_code == 201
    assert response.json()["gpu_count"] == 1 and response.json()["name"] == "my notebook"


def test_launch_by_plan(launch_via_api, node, image):
    response = launch_via_api({"plan": "a100-x4", "image": "jupyter-cpu"})
    assert response.status_code == 201
    assert response.json()["gpu_count"] == 4 and response.json()["plan"] == "a100-x4"


def test_model_repo_huggingface_mounts_the_cache(launch_via_api, node, image, sent):
    node.hf_cache_dir = "/srv/hf"
    node.save()
    body = {"gpu_model": "A100", "image": "jupyter-cpu", "model_repo": "huggingface"}
    response = launch_via_api(body)
    assert response.status_code == 201
    assert Instance.objects.get(pk=response.json()["id"]).mount_model_cache
    assert sent[0]["spec"]["mount_model_cache"] is True


def test_model_repo_without_a_host_cache_is_refused(launch_via_api, node, image):
    body = {"gpu_model": "A100", "image": "jupyter-cpu", "model_repo": "huggingface"}
    error = assert_error(launch_via_api(body), 400, "invalid", field="model_repo")
    assert "Hugging Face" in error["message"]
    assert not Instance.objects.exists()


def test_unknown_model_repo_names_the_allowed_one(launch_via_api, node, image):
    body = {"gpu_model": "A100", "image": "jupyter-cpu", "model_repo": "modelscope"}
    error = assert_error(launch_via_api(body), 400, "invalid", field="model_repo")
    assert "'huggingface'" in error["message"]


def test_unknown_gpu_model_names_the_choices(launch_via_api, a100, image):
    GPUModelFactory(slug="a10g", name="A10G", short_name="A10G", memory_gb=24)
    error = assert_error(
        launch_via_api({"gpu_model": "H900", "image": "jupyter-cpu"}),
        400,
        "invalid",
        field="gpu_model",
    )
    assert error["message"] == (
        "gpu_model: unknown GPU model 'H900'; choose one of: a100-80gb-sxm (A100), a10g (A10G)"
    )


def test_ambiguous_short_name_asks_for_a_slug(launch_via_api, a100, image):
    GPUModelFactory(slug="a100-40gb-pcie", name="A100 40GB PCIe", short_name="A100")
    error = assert_error(
        launch_via_api({"gpu_model": "A100", "image": "jupyter-cpu"}), 400, "invalid"
    )
    assert "a100-40gb-pcie, a100-80gb-sxm" in error["fields"]["gpu_model"][0]


def test_gpu_count_without_a_plan_names_the_counts_offered(launch_via_api, node, image):
    error = assert_error(
        launch_via_api({"gpu_model": "A100", "gpu_count": 3, "image": "jupyter-cpu"}),
        400,
        "invalid",
        field="gpu_count",
    )
    assert error["message"] == ("gpu_count: no plan offers 3× A100; GPU counts offered: 1, 2, 4, 8")


def test_unknown_image_names_the_choices(launch_via_api, node, image):
    error = assert_error(
        launch_via_api({"gpu_model": "A100", "image": "tensorflow"}), 400, "invalid", field="image"
    )
    assert "unknown image 'tensorflow'; choose one of: jupyter-cpu" in error["message"]


def test_unknown_plan_names_the_choices(launch_via_api, node, image):
    error = assert_error(
        launch_via_api({"plan": "a100-x3", "image": "jupyter-cpu"}), 400, "invalid", field="plan"
    )
    assert "a100-x1, a100-x2, a100-x4, a100-x8" in error["message"]


def test_retired_plan_is_refused_by_the_service(launch_via_api, node, image):
    Plan.objects.filter(slug="a100-x8").update(is_active=False)
    error = assert_error(
        launch_via_api({"plan": "a100-x8", "image": "jupyter-cpu"}), 400, "invalid", field="plan"
    )
    assert "no longer offered" in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"image": "jupyter-cpu"}, "gpu_model"),
        ({"gpu_count": 2, "image": "jupyter-cpu"}, "gpu_model"),
        ({"plan": "a100-x1", "gpu_model": "A100", "image": "jupyter-cpu"}, "gpu_model"),
        ({"plan": "a100-x1", "gpu_count": 1, "image": "jupyter-cpu"}, "gpu_count"),
        ({"gpu_model": "A100"}, "image"),
        ({"gpu_model": "A100", "gpu_count": 65, "image": "jupyter-cpu"}, "gpu_count"),
        ({"gpu_model": "A100", "image": "jupyter-cpu", "name": "x" * 101}, "name"),
        ({"gpu_model": "A\x00", "image": "jupyter-cpu"}, "gpu_model"),
    ],
)
def test_launch_input_is_checked(launch_via_api, node, image, body, field):
    assert_error(launch_via_api(body), 400, "invalid", field=field)
    assert not Instance.objects.exists()


def test_quota_exceeded_is_409(launch_via_api, client_for, node, image):
    dave = UserFactory(gpu_quota=2)
    as_dave = client_for(dave)
    body = {"gpu_model": "A100", "gpu_count": 2, "image": "jupyter-cpu"}
    assert launch_via_api(body, client=as_dave).status_code == 201
    error = assert_error(launch_via_api(body, client=as_dave), 409, "quota_exceeded")
    assert "your quota is 2 GPUs at once and you hold 2" in error["message"]
    assert error["fields"] == {"gpu_count": [error["message"]]}


def test_no_capacity_is_409_and_says_what_is_free(launch_via_api, make_host, a100, image):
    make_host("small", a100, count=2)
    body = {"gpu_model": "A100", "gpu_count": 4, "image": "jupyter-cpu"}
    error = assert_error(launch_via_api(body), 409, "no_capacity", field="gpu_count")
    assert error["message"].startswith("no 4× A100 free on any host; 2 A100 free in all")
    assert not Instance.objects.exists()


def test_launch_the_balance_cannot_pay_for_is_refused(launch_via_api, alice, node, image, settings):
    settings.BILLING_ENFORCE_BALANCE = True
    settings.BILLING_MIN_PREPAID_MINUTES = 10
    error = assert_error(
        launch_via_api({"plan": "a100-x1", "image": "jupyter-cpu"}), 400, "insufficient_balance"
    )
    assert "your balance is 0.00" in error["message"] and "Add at least" in error["message"]
    assert error["message"].startswith("plan: ") and list(error["fields"]) == ["plan"]
    assert not Instance.objects.exists()
    credit_add(user=alice, amount=Decimal("5.00"))
    assert launch_via_api({"plan": "a100-x1", "image": "jupyter-cpu"}).status_code == 201


def test_staff_launch_for_themselves(launch_via_api, as_carol, carol, node, image):
    response = launch_via_api({"gpu_model": "A100", "image": "jupyter-cpu"}, client=as_carol)
    assert Instance.objects.get(pk=response.json()["id"]).user == carol


# --- read ---------------------------------------------------------------------


def test_owner_sees_the_jupyter_url_while_running(as_alice, running):
    data = as_alice.get(f"{URL}{running.pk}/").json()
    assert data["status"] == "running" and data["running_since"] is not None
    # The instance's own origin through the gateway: no host address, no token.
    assert data["jupyter_url"] == f"https://{running.pk}.gw.localhost/lab"
    assert running.jupyter_token not in str(data)
    listed = as_alice.get(URL).json()["results"][0]
    assert listed["jupyter_url"] == data["jupyter_url"] and "events" not in listed


def test_connect_gives_the_owner_a_one_time_link_to_the_instance_origin(as_alice, running):
    import hashlib
    from urllib.parse import parse_qs, urlsplit

    from gpurental.gateway.tickets import ticket_key
    from gpurental.rentals.events import state_redis

    answer = as_alice.post(f"{URL}{running.pk}/connect/", {}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["origin"] == f"https://{running.pk}.gw.localhost"
    link = urlsplit(body["url"])
    assert f"{link.scheme}://{link.netloc}" == body["origin"] and link.path == "/_gw/enter"
    ticket = parse_qs(link.query)["t"][0]
    assert len(ticket) >= 43 and running.jupyter_token not in body["url"]
    # Stored only as a hash, for a minute at most.
    redis = state_redis()
    assert redis.get(ticket) is None and redis.get("gpurental:gw:ticket:" + ticket) is None
    assert ticket_key(ticket).endswith(hashlib.sha256(ticket.encode()).hexdigest())
    assert 0 < redis.ttl(ticket_key(ticket)) <= 60
    stored = redis.get(ticket_key(ticket)).decode()
    assert str(running.pk) in stored and '"next": "/lab"' in stored


def test_connect_is_for_the_owner_only(as_alice, as_bob, as_carol, running):
    for client in (as_bob, as_carol):  # another customer; staff, who can see it
        assert client.post(f"{URL}{running.pk}/connect/", {}, format="json").status_code == 404
    answer = as_alice.post(f"{URL}{running.pk}/connect/", {"port": 6006}, format="json")
    error = assert_error(answer, 400, "invalid", field="port")
    assert "6006" in error["message"] and "declares" in error["message"]
    answer = as_alice.post(f"{URL}{running.pk}/connect/", {"port": 70000}, format="json")
    assert_error(answer, 400, "invalid", field="port")


def test_connect_only_while_running(as_alice, stopped):
    answer = as_alice.post(f"{URL}{stopped.pk}/connect/", {}, format="json")
    error = assert_error(answer, 409, "invalid_state", field="status")
    assert "stopped" in error["message"] and "once it is running" in error["message"]


def test_connect_opens_other_ports_the_image_declares(as_alice, running):
    running.image.http_ports = [6006]
    running.image.save()
    body = as_alice.post(f"{URL}{running.pk}/connect/", {"port": 6006}, format="json").json()
    assert body["origin"] == f"https://{running.pk}-6006.gw.localhost"
    assert body["url"].startswith(body["origin"] + "/_gw/enter?t=")


def test_no_jupyter_url_once_stopped(as_alice, stopped):
    data = as_alice.get(f"{URL}{stopped.pk}/").json()
    assert data["status"] == "stopped" and data["jupyter_url"] is None
    assert data["gpu_indices"] == [] and data["stopped_at"] is not None


def test_detail_lists_the_events(as_alice, running):
    events = as_alice.get(f"{URL}{running.pk}/").json()["events"]
    transitions = [(e["from_status"], e["to_status"]) for e in events if e["kind"] == "transition"]
    assert transitions == [("", "pending"), ("pending", "running")]
    assert [e["step"] for e in events if e["kind"] == "progress"] == ["queued", "running"]


def test_list_filters_by_status(as_alice, alice, running, a100, image):
    other = Instance.objects.create(
        user=alice,
        plan=a100.plans.get(gpu_count=1),
        gpu_model=a100,
        gpu_count=1,
        image=image,
        status=InstanceStatus.FAILED,
    )
    ids = lambda r: [i["id"] for i in r.json()["results"]]  # noqa: E731
    assert ids(as_alice.get(URL, {"status": "running"})) == [str(running.pk)]
    assert ids(as_alice.get(URL, {"status": "failed"})) == [str(other.pk)]
    assert ids(as_alice.get(URL, {"status": "stopped"})) == []
    assert len(ids(as_alice.get(URL))) == 2


def test_bad_status_filter_names_the_statuses(as_alice):
    error = assert_error(as_alice.get(URL, {"status": "sleeping"}), 400, "invalid", field="status")
    assert (
        "'sleeping' is not an instance status; choose one of: pending, provisioning"
        in (error["message"])
    )


def test_random_id_is_404(as_alice):
    error = assert_error(as_alice.get(f"{URL}{uuid.uuid4()}/"), 404, "not_found")
    assert "there is no instance" in error["message"]


# --- actions ------------------------------------------------------------------


def test_stop_start_restart_terminate(as_alice, running, sent, django_capture_on_commit_callbacks):
    base = f"{URL}{running.pk}"
    with django_capture_on_commit_callbacks(execute=True):
        stopping = as_alice.post(f"{base}/stop/")
    assert stopping.status_code == 200 and stopping.json()["status"] == "stopping"
    assert sent[-1]["task"] == "instance_stop"

    from gpurental.rentals.services.lifecycle import instance_report_stopped

    instance_report_stopped(instance_id=str(running.pk))
    started = as_alice.post(f"{base}/start/")
    assert started.status_code == 200 and started.json()["status"] == "pending"
    assert started.json()["gpu_indices"] == [0]

    restarted = assert_error(as_alice.post(f"{base}/restart/"), 409, "invalid_state")
    assert restarted["message"] == (
        "cannot restart an instance that is pending (only when running)"
    )
    assert restarted["fields"] == {"status": [restarted["message"]]}

    terminated = as_alice.post(f"{base}/terminate/")
    assert terminated.status_code == 200 and terminated.json()["status"] == "terminating"


def test_restart_a_running_instance(as_alice, running):
    response = as_alice.post(f"{URL}{running.pk}/restart/")
    assert response.status_code == 200 and response.json()["status"] == "provisioning"


def test_start_of_a_terminated_instance_is_invalid_state(as_alice, running):
    as_alice.post(f"{URL}{running.pk}/terminate/")
    error = assert_error(as_alice.post(f"{URL}{running.pk}/start/"), 409, "invalid_state")
    assert "cannot start an instance that is terminating" in error["message"]


def test_start_beyond_the_quota_is_409(as_alice, alice, stopped, launch_via_api, image):
    alice.gpu_quota = 1
    alice.save()
    assert launch_via_api({"gpu_model": "A100", "image": "jupyter-cpu"}).status_code == 201
    assert_error(as_alice.post(f"{URL}{stopped.pk}/start/"), 409, "quota_exceeded")


def test_actions_take_no_get(as_alice, running):
    assert_error(as_alice.get(f"{URL}{running.pk}/stop/"), 405, "method_not_allowed")


def test_instances_cannot_be_edited_or_deleted_directly(as_alice, running):
    assert_error(as_alice.delete(f"{URL}{running.pk}/"), 405, "method_not_allowed")
    assert_error(as_alice.patch(f"{URL}{running.pk}/", {"name": "x"}), 405, "method_not_allowed")


# --- idle auto-stop policy and paid vs used -----------------------------------------


def test_the_idle_policy_is_set_at_launch_and_changed_later(launch_via_api, as_alice, node, image):
    response = launch_via_api({"plan": "a100-x1", "image": "jupyter-cpu", "idle_stop_minutes": 45})
    assert response.status_code == 201 and response.json()["idle_stop_minutes"] == 45
    url = f"{URL}{response.json()['id']}/idle-policy/"

    off = as_alice.post(url, {"idle_stop_minutes": 0})
    assert off.status_code == 200 and off.json()["idle_stop_minutes"] == 0
    notice = off.json()["events"][-1]
    assert notice["kind"] == "notice" and notice["step"] == "idle_policy"
    assert "turned off by alice@example.com" in notice["reason"]
    assert Instance.objects.get(pk=response.json()["id"]).idle_stop_minutes == 0

    usage = off.json()["usage"]
    assert usage["paid_hours"] == 0 and usage["avg_util"] is None and usage["coverage"] is None


def test_a_bad_idle_policy_is_refused_naming_the_field(launch_via_api, as_alice, node, image):
    instance = launch_via_api({"plan": "a100-x1", "image": "jupyter-cpu"}).json()
    error = assert_error(
        as_alice.post(f"{URL}{instance['id']}/idle-policy/", {"idle_stop_minutes": 3}),
        400,
        "invalid",
        field="idle_stop_minutes",
    )
    assert "not 0 (off) or 10–10080 minutes" in error["message"]
    assert_error(
        launch_via_api({"plan": "a100-x1", "image": "jupyter-cpu", "idle_stop_minutes": -1}),
        400,
        "invalid",
        field="idle_stop_minutes",
    )


def test_bob_cannot_change_alices_idle_policy(launch_via_api, as_bob, node, image):
    instance = launch_via_api({"plan": "a100-x1", "image": "jupyter-cpu"}).json()
    response = as_bob.post(f"{URL}{instance['id']}/idle-policy/", {"idle_stop_minutes": 0})
    assert_error(response, 404, "not_found")
    assert Instance.objects.get(pk=instance["id"]).idle_stop_minutes == 30


def test_start_without_gpus_holds_none_and_says_so(as_alice, stopped, sent):
    response = as_alice.post(f"{URL}{stopped.pk}/start/", {"without_gpus": True}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "pending" and body["without_gpus"] is True
    assert body["gpu_indices"] == []
    assert "without GPUs (no-GPU mode)" in body["status_reason"]
    plan = as_alice.get("/api/v1/plans/a100-x1/").json()
    assert plan["no_gpu_hourly_rate"] == "0.1000"


def test_start_without_gpus_refuses_what_is_not_a_yes_or_no(as_alice, stopped):
    error = assert_error(
        as_alice.post(f"{URL}{stopped.pk}/start/", {"without_gpus": "maybe"}, format="json"),
        400,
        "invalid",
    )
    assert "without_gpus" in error["fields"]
    stopped.refresh_from_db()
    assert stopped.status == "stopped"
