"""GPU models, plans and images: readable by any authenticated user."""

from decimal import Decimal

import pytest
from django.test import override_settings

from gpurental.api.pagination import ApiPagination
from gpurental.catalog.models import ImageTemplate, Plan
from gpurental.fleet.models import HostStatus
from tests.api.conftest import assert_error
from tests.factories import GPUModelFactory, PlanFactory


def test_gpu_models_show_specs_and_free_gpus(as_bob, a100, make_host, launched):
    make_host("node2", a100, count=2, status=HostStatus.DRAINING)
    response = as_bob.get("/api/v1/gpu-models/")
    assert response.status_code == 200
    [row] = response.json()["results"]
    assert row == {
        "slug": "a100-80gb-sxm",
        "name": "A100 80GB SXM",
        "short_name": "A100",
        "memory_gb": 80,
        "fp16_tflops": "312.0",
        "bf16_tflops": "312.0",
        "fp32_tflops": "19.5",
        "memory_bandwidth_gbs": 2039,
        "interconnect": "nvswitch",
        "nvlink_bandwidth_gbs": 600,
        "gpus_total": 10,  # 8 on node1 + 2 on the draining node2
        "gpus_free": 7,  # alice holds one on node1; draining hosts take nothing new
        "zones": [],  # no host is in a zone (tests/fleet/test_zones.py)
    }


def test_gpu_model_by_slug(as_alice, a100):
    response = as_alice.get("/api/v1/gpu-models/a100-80gb-sxm/")
    assert response.status_code == 200
    assert response.json()["gpus_total"] == 0 and response.json()["gpus_free"] == 0


def test_unknown_gpu_model_is_404(as_alice, a100):
    error = assert_error(as_alice.get("/api/v1/gpu-models/h900/"), 404, "not_found")
    assert "h900" in error["message"]


def test_plans_show_money_as_strings_with_the_currency(as_alice, a100):
    plan = Plan.objects.get(slug="a100-x1")
    plan.hourly_rate = Decimal("2.2000")
    plan.off_peak_discount = Decimal("0.3000")
    plan.reserved_discount = Decimal("0.1500")
    plan.save()
    with override_settings(BILLING_CURRENCY="EUR"):
        response = as_alice.get("/api/v1/plans/a100-x1/")
    assert response.status_code == 200
    data = response.json()
    assert data["gpu_model"] == "a100-80gb-sxm" and data["gpu_count"] == 1
    assert data["hourly_rate"] == "2.2000"
    assert data["off_peak_rate"] == "1.5400"
    assert data["reserved_rate"] == "1.8700"
    assert data["off_peak_discount"] == "0.3000"
    assert (data["off_peak_start"], data["off_peak_end"]) == ("00:00:00", "08:00:00")
    assert data["currency"] == "EUR"
    assert not any(isinstance(v, float) for v in data.values())
    # Its disk while stopped, at the migration's 0.20 per GB-month.
    assert data["stopped_monthly"] == str(Decimal("0.20") * plan.disk_gb)


def test_plans_list_only_active_ones(as_alice, a100):
    Plan.objects.filter(slug="a100-x8").update(is_active=False)
    slugs = [p["slug"] for p in as_alice.get("/api/v1/plans/").json()["results"]]
    assert slugs == ["a100-x1", "a100-x2", "a100-x4"]
    assert_error(as_alice.get("/api/v1/plans/a100-x8/"), 404, "not_found")


def test_images(as_alice, image):
    ImageTemplate.objects.create(slug="old", name="Old", image="old:1", is_active=False)
    response = as_alice.get("/api/v1/images/")
    assert response.json()["results"] == [
        {
            "slug": "jupyter-cpu",
            "name": "JupyterLab",
            "framework": "jupyter-cpu",
            "cuda_version": "",
            "description": "",
            "port": 8888,
            "aliases": [],
        }
    ]
    assert as_alice.get("/api/v1/images/jupyter-cpu/").json()["port"] == 8888


def test_images_say_their_framework_and_cuda_and_the_home_page_shows_the_matrix(
    as_alice, client, image
):
    for slug, cuda in (("pytorch-2.1.2", "12.1"), ("pytorch-2.13", "13.0"), ("cuda-12.4", "12.4")):
        ImageTemplate.objects.create(slug=slug, name=slug, image=f"{slug}:x", cuda_version=cuda)
    rows = {r["slug"]: r for r in as_alice.get("/api/v1/images/").json()["results"]}
    assert (rows["pytorch-2.1.2"]["framework"], rows["pytorch-2.1.2"]["cuda_version"]) == (
        "pytorch",
        "12.1",
    )
    page = client.get("/").text.split('id="image-matrix"')[1].split("</table>")[0]
    header = page.split("</thead>")[0]
    # Columns: CUDA releases oldest first, then the images without CUDA.
    assert header.index("CUDA 12.1") < header.index("CUDA 12.4") < header.index("CUDA 13.0")
    assert header.index("CUDA 13.0") < header.index("no CUDA")
    pytorch = next(row for row in page.split("<tr>") if "<th>pytorch</th>" in row)
    cells = pytorch.split("<td>")[1:]
    assert "pytorch-2.1.2" in cells[0] and "pytorch-2.13" in cells[2] and "—" in cells[1]


def test_slugs_with_dots_are_found(as_alice, image):
    # seed_demo's "pytorch-2.1" is not a SlugField-valid slug, but it is a real one.
    ImageTemplate.objects.create(slug="pytorch-2.1", name="PyTorch 2.1", image="pt:2.1")
    assert as_alice.get("/api/v1/images/pytorch-2.1/").json()["slug"] == "pytorch-2.1"


def test_lists_are_paginated_with_a_maximum_page_size(as_alice, monkeypatch):
    for n in range(3):
        model = GPUModelFactory(slug=f"m{n}", name=f"M{n}", short_name=f"M{n}")
        PlanFactory(gpu_model=model, slug=f"m{n}-x1")
    page = as_alice.get("/api/v1/plans/", {"limit": 2}).json()
    assert page["count"] == 3 and len(page["results"]) == 2
    assert "offset=2" in page["next"]
    rest = as_alice.get(page["next"]).json()
    assert len(rest["results"]) == 1 and rest["next"] is None
    monkeypatch.setattr(ApiPagination, "max_limit", 2)
    capped = as_alice.get("/api/v1/plans/", {"limit": 10_000}).json()
    assert len(capped["results"]) == 2 and capped["count"] == 3


@pytest.mark.parametrize("url", ["/api/v1/gpu-models/", "/api/v1/plans/", "/api/v1/images/"])
def test_catalog_needs_authentication(client, db, url):
    assert_error(client.get(url), 401, "not_authenticated")
