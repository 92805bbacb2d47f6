"""The article's framework="pytorch-2.1" resolves to the PyTorch image `make images` builds,
and the alias is shown; the catalog names only images that images/build.sh builds."""

from __future__ import annotations

import importlib
import subprocess
from pathlib import Path

import pytest
from django.apps import apps
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from gpurental.accounts.services import api_key_create
from gpurental.catalog.models import ImageAlias, ImageTemplate
from gpurental.catalog.selectors import image_resolve
from gpurental.catalog.starter import CUDA_IMAGES, IMAGES
from gpurental.rentals import hostcalls
from gpurental.rentals.models import Instance
from tests.api.conftest import assert_error

REPO = Path(__file__).resolve().parents[2]
CPU_IMAGE = "gpurental/pytorch:2.13.0-cpu"


def built_tags() -> set[str]:
    done = subprocess.run(  # noqa: S603 - our own script, fixed arguments
        [str(REPO / "images" / "build.sh"), "tags"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return set(done.stdout.split())


def test_the_demo_catalog_names_only_images_that_make_images_builds():
    tags = built_tags()
    assert {"gpurental/pytorch:2.13.0-cpu", "gpurental/pytorch:2.13.0-cuda"} <= tags
    named = {spec["image"] for spec in IMAGES} | {
        spec["cpu_image"] for spec in IMAGES if spec.get("cpu_image")
    }
    assert named <= tags, named - tags
    assert "pytorch-2.1" in next(s for s in IMAGES if s["slug"] == "pytorch-2.13")["aliases"]


def test_the_cuda_catalog_names_what_make_images_cuda_builds_with_its_cuda():
    """catalog_starter --cuda: each template's image is a tag of images/build.sh cuda, and
    its CUDA is the one that build checks its wheels against (images/build.sh CUDA_IMAGES)."""
    tags = built_tags()
    script = (REPO / "images" / "build.sh").read_text()
    for spec in CUDA_IMAGES:
        assert spec["image"] in tags
        tag = spec["image"].replace("2.13.0", "$TORCH_VERSION")
        assert (
            f'"{tag}|' in script and f"|{spec['cuda_version']}|" in script.split(f'"{tag}|')[1][:40]
        )


@pytest.fixture
def pytorch(db):
    template = ImageTemplate.objects.create(
        slug="pytorch-2.13",
        name="PyTorch 2.13 + CUDA 13.0 + JupyterLab",
        image="gpurental/pytorch:2.13.0-cuda",
        cpu_image=CPU_IMAGE,
        ssh_port=2222,
    )
    ImageAlias.objects.create(name="pytorch-2.1", template=template, note="the article's name")
    return template


def test_a_slug_wins_and_an_alias_resolves_to_its_template(pytorch, image):
    assert image_resolve("pytorch-2.13").template == pytorch
    assert image_resolve("pytorch-2.13").alias == ""
    resolved = image_resolve("pytorch-2.1")
    assert (resolved.template, resolved.alias) == (pytorch, "pytorch-2.1")
    assert image_resolve("pytorch-9.9") is None


def test_an_alias_that_is_a_slug_already_is_refused(pytorch, image):
    with pytest.raises(ValidationError, match="slug already"):
        ImageAlias(name="jupyter-cpu", template=pytorch).full_clean()


def test_the_old_broken_template_becomes_the_built_image_with_its_slug_as_alias(db):
    """Migration catalog 0005: the row stays (its instances keep it), pointing at the image
    that `make images` builds; framework="pytorch-2.1" keeps working."""
    old = ImageTemplate.objects.create(
        slug="pytorch-2.1",
        name="PyTorch 2.1 + CUDA 12.1 + JupyterLab",
        image="gpurental/pytorch-cuda:2.1",
        cpu_image="gpurental/jupyter-cpu:latest",
    )
    migration = importlib.import_module(
        "gpurental.catalog.migrations.0005_pytorch_image_built_locally"
    )
    migration.forwards(apps, None)
    old.refresh_from_db()
    assert (old.slug, old.image, old.cpu_image) == (
        "pytorch-2.13",
        "gpurental/pytorch:2.13.0-cuda",
        CPU_IMAGE,
    )
    assert old.image in built_tags() and old.cpu_image in built_tags()
    assert image_resolve("pytorch-2.1").template == old
    migration.forwards(apps, None)  # again: nothing changes
    assert ImageAlias.objects.count() == 1


@pytest.fixture
def as_alice(alice):
    _, raw = api_key_create(user=alice, name="tests")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_launching_by_the_alias_runs_the_pytorch_image_and_shows_the_alias(
    pytorch, as_alice, make_host, a100, sent, django_capture_on_commit_callbacks
):
    make_host("node1", a100)  # simulated GPUs: the template's CPU image
    with django_capture_on_commit_callbacks(execute=True):
        response = as_alice.post(
            "/api/v1/instances/", {"gpu_model": "A100", "image": "pytorch-2.1"}
        )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["image"], body["image_alias"]) == ("pytorch-2.13", "pytorch-2.1")
    assert sent[0]["spec"]["image"] == CPU_IMAGE
    instance = Instance.objects.get(pk=body["id"])
    assert "pytorch-2.1 is an alias of pytorch-2.13" in instance.events.first().reason
    assert hostcalls.container_spec(instance)["image"] == CPU_IMAGE
    # The images list shows the alias too.
    images = as_alice.get("/api/v1/images/").json()["results"]
    assert next(i for i in images if i["slug"] == "pytorch-2.13")["aliases"] == ["pytorch-2.1"]


def test_an_unknown_image_is_refused_naming_slugs_and_aliases(pytorch, as_alice, make_host, a100):
    make_host("node1", a100)
    response = as_alice.post("/api/v1/instances/", {"gpu_model": "A100", "image": "pytorch-1.0"})
    error = assert_error(response, 400, "invalid", field="image")
    assert "choose one of: pytorch-2.13, pytorch-2.1" in error["message"]


def test_the_console_shows_the_alias_on_the_launch_form_and_the_instance_page(
    pytorch, alice, client, make_host, a100, sent
):
    make_host("node1", a100)
    client.force_login(alice)
    page = client.get("/launch/?image=pytorch-2.1").content.decode()
    assert "PyTorch 2.13 + CUDA 13.0 + JupyterLab (also: pytorch-2.1)" in page
    assert 'value="pytorch-2.13" selected' in page
    instance = Instance.objects.create(
        user=alice,
        plan=a100.plans.first() or _plan(a100),
        gpu_model=a100,
        gpu_count=1,
        image=pytorch,
        image_alias="pytorch-2.1",
    )
    page = client.get(f"/instances/{instance.pk}/").content.decode()
    assert "asked for as pytorch-2.1, an alias of pytorch-2.13" in page


def _plan(model):
    from tests.factories import PlanFactory

    return PlanFactory(gpu_model=model, gpu_count=1)


def test_staff_add_an_alias_in_the_back_office_and_it_is_audited(pytorch, carol, client):
    from gpurental.accounts.models import AuditEvent

    client.force_login(carol)
    url = f"/admin/catalog/imagetemplate/{pytorch.pk}/change/"
    form = {
        "slug": pytorch.slug,
        "name": pytorch.name,
        "image": pytorch.image,
        "cpu_image": pytorch.cpu_image,
        "port": 8888,
        "http_ports": "",
        "ssh_port": 2222,
        "command": "[]",
        "env": "{}",
        "description": "",
        "is_active": "on",
        "aliases-TOTAL_FORMS": 2,
        "aliases-INITIAL_FORMS": 1,
        "aliases-MIN_NUM_FORMS": 0,
        "aliases-MAX_NUM_FORMS": 1000,
        "aliases-0-id": pytorch.aliases.get().pk,
        "aliases-0-template": pytorch.pk,
        "aliases-0-name": "pytorch-2.1",
        "aliases-0-note": "",
        "aliases-1-template": pytorch.pk,
        "aliases-1-name": "pytorch",
        "aliases-1-note": "the newest PyTorch",
    }
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert image_resolve("pytorch").template == pytorch
    event = AuditEvent.objects.filter(action="admin.change", changes__has_key="aliases").get()
    assert event.changes == {"aliases": ["pytorch", "pytorch-2.1"], "were": ["pytorch-2.1"]}


def test_catalog_starter_adds_the_cuda_images_only_when_asked(db):
    from io import StringIO

    from django.core.management import call_command

    call_command("catalog_starter", stdout=StringIO())
    assert not ImageTemplate.objects.filter(slug="pytorch-2.1.2").exists()
    assert ImageTemplate.objects.get(slug="pytorch-2.13").cuda_version == "13.0"
    call_command("catalog_starter", "--cuda", stdout=StringIO())
    cudas = dict(ImageTemplate.objects.values_list("slug", "cuda_version"))
    assert {
        k: cudas[k] for k in ("cuda-11.8", "cuda-12.4", "pytorch-2.1.2", "tensorflow-2.18")
    } == {
        "cuda-11.8": "11.8",
        "cuda-12.4": "12.4",
        "pytorch-2.1.2": "12.1",
        "tensorflow-2.18": "12.5",
    }
