"""Operators fill, list and evict a host's shared Hugging Face cache: the control plane
asks, the host's agent does it on the real filesystem, its signed reports keep the catalog
(CachedModel) in step, and every change leaves a CacheEvent."""

from __future__ import annotations

import io
import os
import tarfile

import pytest
from django.core.management import CommandError, call_command

from gpurental.agent import modelcache as agent_cache
from gpurental.modelcache.models import CachedModel, CacheEvent, CacheStatus
from gpurental.modelcache.services import (
    CacheRefused,
    cache_evict_request,
    cache_fill_request,
    cache_list_request,
)
from tests.modelcache.conftest import tiny_model

REPO = "acme/tiny-bert"
FOLDER = "models--acme--tiny-bert"


def _kinds(host):
    return list(
        CacheEvent.objects.filter(host=host)
        .order_by("created_at", "id")
        .values_list("kind", flat=True)
    )


def test_a_plain_model_folder_is_filled_into_cache_form_and_catalogued(
    cache_host, carol, django_capture_on_commit_callbacks
):
    tiny_model(cache_host.imports / "tiny-bert")
    with django_capture_on_commit_callbacks(execute=True):
        row = cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO, actor=carol)
    assert row.status == CacheStatus.FILLING
    cache_host.run(django_capture_on_commit_callbacks)

    repo = cache_host.cache / "hub" / FOLDER
    revision = (repo / "refs" / "main").read_text()
    snapshot = repo / "snapshots" / revision
    # Hub layout: snapshot files are relative links to content-addressed blobs.
    assert os.readlink(snapshot / "config.json").startswith("../../blobs/")
    assert (
        snapshot / "1_Pooling" / "config.json"
    ).read_text() == '{"pooling_mode_mean_tokens": true}'
    assert (snapshot / "model.safetensors").read_bytes() == b"\x00" * 4096
    row = CachedModel.objects.get(host=cache_host, repo_id=REPO)
    assert row.status == CacheStatus.READY
    assert row.revision == revision and row.files == 4 and row.size_bytes > 4096
    assert _kinds(cache_host) == ["fill_requested", "filled"]
    assert CacheEvent.objects.get(kind="fill_requested").actor == carol


def test_filling_the_same_files_twice_gives_the_same_revision(
    cache_host, django_capture_on_commit_callbacks
):
    tiny_model(cache_host.imports / "tiny-bert")
    for _ in range(2):
        with django_capture_on_commit_callbacks(execute=True):
            cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO)
        cache_host.run(django_capture_on_commit_callbacks)
    assert len(os.listdir(cache_host.cache / "hub" / FOLDER / "snapshots")) == 1
    assert CachedModel.objects.get(repo_id=REPO).status == CacheStatus.READY


def _tar_gz(path, members: dict[str, bytes], links: dict[str, str] | None = None):
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)


def test_an_archive_of_a_hugging_face_cache_snapshot_is_merged_as_it_is(
    cache_host, django_capture_on_commit_callbacks
):
    rev, blob = "a" * 40, "b" * 64
    base = "hub/models--sentence-transformers--all-MiniLM-L6-v2"
    _tar_gz(
        cache_host.imports / "minilm.tar.gz",
        {f"{base}/blobs/{blob}": b'{"model_type": "bert"}', f"{base}/refs/main": rev.encode()},
        {f"{base}/snapshots/{rev}/config.json": f"../../blobs/{blob}"},
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert cache_fill_request(host=cache_host, source="minilm.tar.gz") is None  # no repo_id
    cache_host.run(django_capture_on_commit_callbacks)

    config = (
        cache_host.cache
        / "hub/models--sentence-transformers--all-MiniLM-L6-v2/snapshots"
        / rev
        / "config.json"
    )
    assert config.read_text() == '{"model_type": "bert"}'
    row = CachedModel.objects.get(repo_id="sentence-transformers/all-MiniLM-L6-v2")
    assert row.status == CacheStatus.READY and row.revision == rev and row.files == 1


def test_an_archive_whose_links_leave_it_is_refused_and_nothing_lands_in_the_cache(
    cache_host, django_capture_on_commit_callbacks
):
    _tar_gz(
        cache_host.imports / "evil.tar",
        {"model/config.json": b"{}"},
        {"model/model.safetensors": "/etc/shadow"},
    )
    with django_capture_on_commit_callbacks(execute=True):
        cache_fill_request(host=cache_host, source="evil.tar", repo_id="acme/evil")
    cache_host.run(django_capture_on_commit_callbacks)
    row = CachedModel.objects.get(repo_id="acme/evil")
    assert row.status == CacheStatus.FAILED and "could not be unpacked" in row.reason
    assert not (cache_host.cache / "hub" / "models--acme--evil").exists()
    assert [p.name for p in (cache_host.cache / "hub").iterdir()] == []  # no temp left over
    assert _kinds(cache_host) == ["fill_requested", "fill_failed"]


def test_a_source_outside_the_import_directory_is_refused_by_the_agent(
    cache_host, django_capture_on_commit_callbacks, tmp_path
):
    """The control plane names a file; the agent reads only its own import directory, even
    when the message was signed by the control plane (DESIGN: trust boundaries)."""
    tiny_model(tmp_path / "elsewhere")
    with django_capture_on_commit_callbacks(execute=True):
        cache_fill_request(host=cache_host, source="../elsewhere", repo_id=REPO)
    cache_host.run(django_capture_on_commit_callbacks)
    row = CachedModel.objects.get(repo_id=REPO)
    assert row.status == CacheStatus.FAILED and "outside the import directory" in row.reason
    assert not (cache_host.cache / "hub" / FOLDER).exists()


def test_eviction_removes_the_model_from_disk_and_catalog(
    cache_host, carol, django_capture_on_commit_callbacks
):
    tiny_model(cache_host.imports / "tiny-bert")
    with django_capture_on_commit_callbacks(execute=True):
        cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO)
    cache_host.run(django_capture_on_commit_callbacks)

    with django_capture_on_commit_callbacks(execute=True):
        row = cache_evict_request(host=cache_host, repo_id=REPO, actor=carol)
    assert row.status == CacheStatus.EVICTING
    cache_host.run(django_capture_on_commit_callbacks)

    assert not (cache_host.cache / "hub" / FOLDER).exists()
    assert not CachedModel.objects.filter(repo_id=REPO).exists()
    assert _kinds(cache_host) == ["fill_requested", "filled", "evict_requested", "evicted"]


def test_eviction_is_refused_while_an_instance_launched_with_the_model_is_up(
    cache_host, alice, image, django_capture_on_commit_callbacks, a100
):
    from gpurental.rentals.services import lifecycle as lc

    tiny_model(cache_host.imports / "tiny-bert")
    with django_capture_on_commit_callbacks(execute=True):
        cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO)
    cache_host.run(django_capture_on_commit_callbacks)
    lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1, hf_model=REPO)

    with pytest.raises(CacheRefused, match="still up") as refused:
        cache_evict_request(host=cache_host, repo_id=REPO)
    assert refused.value.field == "repo_id"
    assert CachedModel.objects.get(repo_id=REPO).status == CacheStatus.READY
    with django_capture_on_commit_callbacks(execute=True):
        cache_evict_request(host=cache_host, repo_id=REPO, force=True)
    cache_host.run(django_capture_on_commit_callbacks)
    assert not CachedModel.objects.filter(repo_id=REPO).exists()


def test_listing_follows_what_the_host_really_has(cache_host, django_capture_on_commit_callbacks):
    """A model copied in by hand appears; one deleted by hand disappears; both logged."""
    tiny_model(cache_host.imports / "tiny-bert")
    with django_capture_on_commit_callbacks(execute=True):
        cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO)
    cache_host.run(django_capture_on_commit_callbacks)
    agent_cache.cache_evict(cache_dir=cache_host.cache, repo_id=REPO)  # behind our back
    (tmp := cache_host.imports / "other").mkdir()
    tiny_model(tmp)
    agent_cache.cache_fill(
        cache_dir=cache_host.cache,
        import_dir=cache_host.imports,
        source="other",
        repo_id="acme/other",
    )

    with django_capture_on_commit_callbacks(execute=True):
        cache_list_request(host=cache_host)
    cache_host.run(django_capture_on_commit_callbacks)

    assert list(CachedModel.objects.values_list("repo_id", "status")) == [
        ("acme/other", CacheStatus.READY)
    ]
    assert _kinds(cache_host)[-2:] == ["disappeared", "appeared"]


def test_a_forged_report_changes_nothing(cache_host, make_host, a100):
    from gpurental.modelcache.tasks import modelcache_report
    from tests.messages import signed

    other = make_host("node2", a100)
    fake = {"repo_id": REPO, "revisions": [], "refs": {}, "size_bytes": 1, "files": 1}
    # node2's key, claiming to be node1; then node1's name with no valid signature.
    modelcache_report(**{**signed(other, kind="listing", data={"repos": [fake]}), "host": "node1"})
    modelcache_report(host="node1", kind="listing", data={"repos": [fake]}, sig="0" * 64)
    assert not CachedModel.objects.exists()


def test_the_management_command_fills_lists_and_evicts(
    cache_host, django_capture_on_commit_callbacks, capsys
):
    tiny_model(cache_host.imports / "tiny-bert")
    with django_capture_on_commit_callbacks(execute=True):
        call_command(
            "modelcache", "fill", "--host", "node1", "tiny-bert", "--repo-id", REPO, "--wait", "0"
        )
    cache_host.run(django_capture_on_commit_callbacks)
    call_command("modelcache", "ls")
    out = capsys.readouterr().out
    assert "node1" in out and REPO in out and "ready" in out

    with django_capture_on_commit_callbacks(execute=True):
        call_command("modelcache", "evict", "--host", "node1", REPO, "--wait", "0")
    cache_host.run(django_capture_on_commit_callbacks)
    call_command("modelcache", "ls")
    assert "no models cached" in capsys.readouterr().out

    with pytest.raises(CommandError, match="not a Hugging Face repository id"):
        call_command("modelcache", "fill", "--host", "node1", "x", "--repo-id", "../etc")
    with pytest.raises(CommandError, match="no host 'nope'"):
        call_command("modelcache", "ls", "--host", "nope")


def test_a_host_without_a_shared_cache_is_refused_by_name(make_host, a100):
    host = make_host("bare", a100)
    with pytest.raises(CacheRefused, match="no shared Hugging Face cache") as refused:
        cache_fill_request(host=host, source="m.tar", repo_id=REPO)
    assert refused.value.field == "host"


def test_a_request_the_agent_never_answered_stops_blocking_a_new_one_after_three_hours(
    cache_host, django_capture_on_commit_callbacks
):
    import datetime as dt

    from django.utils import timezone

    tiny_model(cache_host.imports / "tiny-bert")
    asked = timezone.now()
    cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO, now=asked)  # lost
    with pytest.raises(CacheRefused, match="filling already"):
        cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO)
    later = asked + dt.timedelta(hours=3, seconds=1)
    with django_capture_on_commit_callbacks(execute=True):
        cache_fill_request(host=cache_host, source="tiny-bert", repo_id=REPO, now=later)
    cache_host.run(django_capture_on_commit_callbacks)
    assert CachedModel.objects.get(repo_id=REPO).status == CacheStatus.READY
