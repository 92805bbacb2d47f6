"""images/jupyter-cpu/hf_cache_seed.py, the entrypoint's layer of links over the shared,
read-only Hugging Face cache, on the real filesystem (the docker test runs it in the image)."""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import pytest

from gpurental.agent import modelcache
from tests.modelcache.conftest import tiny_model

SCRIPT = Path(__file__).resolve().parents[2] / "images" / "jupyter-cpu" / "hf_cache_seed.py"


@pytest.fixture(scope="module")
def seeder():
    spec = importlib.util.spec_from_file_location("hf_cache_seed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read_only(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            p = Path(root) / name
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.fixture
def shared(tmp_path):
    imports, cache = tmp_path / "imports", tmp_path / "shared"
    tiny_model(imports / "a")
    tiny_model(imports / "b", weights=b"\x01" * 100)
    modelcache.cache_fill(cache_dir=cache, import_dir=imports, source="a", repo_id="acme/a")
    modelcache.cache_fill(cache_dir=cache, import_dir=imports, source="b", repo_id="acme/b")
    return cache


def test_every_shared_file_reads_through_the_writable_cache_and_new_files_can_be_added(
    seeder, shared, tmp_path
):
    hub = tmp_path / "home" / "hub"
    made, removed = seeder.seed(shared, hub)
    assert made > 0 and removed == 0
    repo = hub / "models--acme--a"
    revision = (repo / "refs" / "main").read_text()
    assert (repo / "snapshots" / revision / "model.safetensors").read_bytes() == b"\x00" * 4096
    assert (repo / "snapshots" / revision / "1_Pooling" / "config.json").exists()
    # Its folders are the instance's own: the hub can add a blob, a snapshot, a ref.
    (repo / "blobs" / "new").write_bytes(b"n")
    (repo / "snapshots" / ("f" * 40)).mkdir()
    (repo / "refs" / "main").write_text("f" * 40)
    # …while the shared files stay as they were.
    assert (shared / "hub" / "models--acme--a" / "refs" / "main").read_text() == revision
    assert seeder.seed(shared, hub) == (0, 0)  # again at the next start: nothing to do


def test_a_model_evicted_from_the_shared_cache_leaves_no_dangling_links(seeder, shared, tmp_path):
    hub = tmp_path / "home" / "hub"
    seeder.seed(shared, hub)
    modelcache.cache_evict(cache_dir=shared, repo_id="acme/b")
    made, removed = seeder.seed(shared, hub)
    assert made == 0 and removed > 0
    assert not (hub / "models--acme--b").exists()
    assert (hub / "models--acme--a").exists()


def test_a_read_only_shared_cache_is_enough(seeder, shared, tmp_path):
    _read_only(shared)
    try:
        hub = tmp_path / "home" / "hub"
        seeder.seed(shared, hub)
        revision = (hub / "models--acme--a" / "refs" / "main").read_text()
        assert (hub / "models--acme--a" / "snapshots" / revision / "config.json").exists()
    finally:
        for root, dirs, files in os.walk(shared):
            for name in dirs + files:
                p = Path(root) / name
                if not p.is_symlink():
                    p.chmod(p.stat().st_mode | stat.S_IWUSR)
