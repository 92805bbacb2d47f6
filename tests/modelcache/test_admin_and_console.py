"""Staff fill and evict from the back-office; customers pick a cached model when launching
from the console."""

from __future__ import annotations

from gpurental.modelcache.models import CachedModel, CacheEvent, CacheStatus
from gpurental.rentals.models import Instance
from tests.modelcache.conftest import tiny_model

REPO = "acme/tiny-bert"


def test_staff_fill_and_evict_from_the_admin(
    cache_host, carol, client, django_capture_on_commit_callbacks
):
    tiny_model(cache_host.imports / "tiny-bert")
    client.force_login(carol)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/admin/modelcache/cachedmodel/add/",
            {"host": cache_host.pk, "repo_id": REPO, "source": "tiny-bert"},
        )
    assert response.status_code == 302, response.content.decode()[:2000]
    cache_host.run(django_capture_on_commit_callbacks)
    row = CachedModel.objects.get(repo_id=REPO)
    assert row.status == CacheStatus.READY
    assert CacheEvent.objects.get(kind="fill_requested").actor == carol

    page = client.get("/admin/modelcache/cachedmodel/").content.decode()
    assert REPO in page and "ready" in page.lower()

    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            "/admin/modelcache/cachedmodel/",
            {"action": "evict", "_selected_action": [row.pk]},
        )
    cache_host.run(django_capture_on_commit_callbacks)
    assert not CachedModel.objects.exists()
    assert not (cache_host.cache / "hub" / "models--acme--tiny-bert").exists()


def test_a_refused_fill_in_the_admin_is_a_message_not_an_error(make_host, a100, carol, client):
    host = make_host("bare", a100)  # no shared cache
    client.force_login(carol)
    response = client.post(
        "/admin/modelcache/cachedmodel/add/",
        {"host": host.pk, "repo_id": REPO, "source": "m.tar"},
        follow=True,
    )
    assert response.status_code == 200
    assert "has no shared Hugging Face cache" in response.content.decode()
    assert not CachedModel.objects.exists()


def test_a_customer_is_not_let_into_the_cache_admin(alice, client):
    client.force_login(alice)
    assert client.get("/admin/modelcache/cachedmodel/").status_code == 302  # to the login


def test_the_console_launch_form_offers_cached_models_and_launches_with_one(
    make_host, a100, alice, client, image, sent
):
    make_host("node1", a100, count=2)
    cached = make_host("node2", a100, hf_cache_dir="/srv/hf")
    CachedModel.objects.create(host=cached, repo_id=REPO, status=CacheStatus.READY)
    client.force_login(alice)
    page = client.get("/launch/").content.decode()
    assert f'<option value="{REPO}">{REPO}</option>' in page
    response = client.post(
        "/launch/",
        {"gpu_model": a100.slug, "gpu_count": 1, "image": image.slug, "model": REPO, "name": ""},
    )
    assert response.status_code == 302
    instance = Instance.objects.get()
    assert instance.host == cached and instance.hf_model == REPO
    page = client.get(f"/instances/{instance.pk}/").content.decode()
    assert f"<dt>Model</dt><dd>{REPO}</dd>" in page
