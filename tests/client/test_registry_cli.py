"""`gpurental registry login|list|logout` and the SDK's ``registry_logins``, against the
stand-in API: what they send, what they print, and the password never echoed."""

from __future__ import annotations

import io

import pytest

from gpurental.client import Client
from tests.client.conftest import API_KEY
from tests.client.test_cli import run

LOGIN = {
    "id": "5b0c5e8e-4f7a-4d5e-9a43-0d7c9c1f0e11",
    "registry": "ghcr.io",
    "username": "alice",
    "created_at": "2026-12-06T10:00:00Z",
    "updated_at": "2026-12-06T10:00:00Z",
}
URL = "/api/v1/registry-logins/"


def test_login_reads_the_password_from_stdin_and_never_prints_it(logged_in, capsys, monkeypatch):
    logged_in.reply("POST", URL, (201, LOGIN))
    monkeypatch.setattr("sys.stdin", io.StringIO("tok-3141\n"))
    code, out, err = run(capsys, "registry", "login", "ghcr.io", "-u", "alice", "--password-stdin")
    assert code == 0, err
    assert logged_in.requests[-1].body == {
        "registry": "ghcr.io",
        "username": "alice",
        "password": "tok-3141",
    }
    assert "Saved the login alice@ghcr.io" in out and "tok-3141" not in out + err


def test_login_without_a_terminal_or_stdin_flag_is_a_usage_error(logged_in, capsys):
    code, _, err = run(capsys, "registry", "login", "ghcr.io", "-u", "alice")
    assert code == 2 and "--password-stdin" in err
    assert not logged_in.requests


def test_list_and_logout_by_registry_name(logged_in, capsys):
    logged_in.reply("GET", URL, (200, {"next": None, "results": [LOGIN]}))
    logged_in.reply("DELETE", f"{URL}{LOGIN['id']}/", (204, None))
    code, out, _ = run(capsys, "registry", "list")
    assert code == 0 and "ghcr.io" in out and "alice" in out
    code, out, err = run(capsys, "registry", "logout", "ghcr.io")
    assert code == 0, err
    assert "Deleted the login for ghcr.io" in out
    assert logged_in.requests[-1].method == "DELETE"


def test_the_sdk_launches_your_own_image_by_reference(api):
    api.reply("POST", "/api/v1/instances/", (201, {"id": "i-1", "status": "pending"}))
    client = Client(api_key=API_KEY, base_url=api.url)
    client.create_instance(gpu_type="A10G", image="ghcr.io/team/train:1")
    assert api.requests[-1].body["image"] == "ghcr.io/team/train:1"
    with pytest.raises(ValueError, match="either framework= .* or image="):
        client.create_instance(gpu_type="A10G", framework="pytorch-2.1", image="a/b:1")


SAVED = {
    "id": "0c3f0c1e-8f4b-4c8e-9d55-7d2a3c1b9e01",
    "name": "with-hello",
    "reference": "127.0.0.1:5000/a7/with-hello:20261206-120000",
    "status": "saving",
    "status_reason": "",
    "size_bytes": 0,
    "created_at": "2026-12-06T12:00:00Z",
}


def test_save_image_waits_until_ready_and_says_how_to_launch_it(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/i-1/save-image/", (202, SAVED))
    logged_in.reply(
        "GET",
        f"/api/v1/saved-images/{SAVED['id']}/",
        (200, {**SAVED, "status": "ready", "size_bytes": 512_000_000}),
    )
    code, out, err = run(capsys, "save-image", "i-1", "with-hello")
    assert code == 0, err
    assert logged_in.requests[0].body == {"name": "with-hello"}
    assert f"Saved with-hello: {SAVED['reference']} (0.51 GB)" in out
    assert f"--image {SAVED['reference']}" in out


def test_a_failed_save_exits_with_the_host_s_reason(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/i-1/save-image/", (202, SAVED))
    logged_in.reply(
        "GET",
        f"/api/v1/saved-images/{SAVED['id']}/",
        (200, {**SAVED, "status": "failed", "status_reason": "the registry refused the push"}),
    )
    code, _, err = run(capsys, "save-image", "i-1", "with-hello")
    assert code != 0 and "the registry refused the push" in err


def test_launch_mounts_volumes_and_volume_commands(logged_in, capsys):
    from tests.client.conftest import instance

    logged_in.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))
    code, _, err = run(
        capsys,
        "launch",
        "--gpu",
        "A10G",
        "--image",
        "jupyter-cpu",
        "--volume",
        "ds",
        "--volume",
        "ckpt:/mnt/ckpt",
        "--no-wait",
    )
    assert code == 0, err
    assert logged_in.requests[-1].body["volumes"] == [
        {"volume": "ds", "mount_path": "/data"},
        {"volume": "ckpt", "mount_path": "/mnt/ckpt"},
    ]
    volume = {
        "id": "v-1",
        "name": "ds",
        "host": "node1",
        "size_gb": 20,
        "used_bytes": 0,
        "in_use": False,
        "mount_path": "",
    }
    logged_in.reply("POST", "/api/v1/volumes/", (201, volume))
    code, out, _ = run(capsys, "volume-create", "ds", "--size", "20", "--host", "node1")
    assert code == 0 and "Created volume ds (20 GB on node1)" in out
    assert logged_in.requests[-1].body == {"name": "ds", "size_gb": 20, "host": "node1"}
    code, _, err = run(
        capsys, "launch", "--gpu", "A10G", "--image", "x", "--volume", "ds", "--volume", "ds"
    )
    assert code == 2 and "each volume once" in err
    # The list says what each costs a month.
    priced = {**volume, "monthly_cost": "1.40", "currency": "USD"}
    logged_in.reply("GET", "/api/v1/volumes/", (200, {"results": [priced], "next": None}))
    code, out, err = run(capsys, "volumes")
    assert code == 0, err
    assert "PER MONTH" in out and "1.40 USD" in out
    # Detach, by name: looked up in the list, then posted by id.
    logged_in.reply("POST", "/api/v1/volumes/v-1/detach/", (200, volume))
    code, out, err = run(capsys, "volume-detach", "ds")
    assert code == 0, err
    assert out == "Volume ds is free: the next launch on node1 may mount it\n"
    assert logged_in.requests[-1].path == "/api/v1/volumes/v-1/detach/"
    # Resize, by name.
    logged_in.reply("POST", "/api/v1/volumes/v-1/resize/", (200, {**volume, "size_gb": 50}))
    code, out, err = run(capsys, "volume-resize", "ds", "--size", "50")
    assert (code, out) == (0, "Volume ds is 50 GB now\n"), err
    assert logged_in.requests[-1].body == {"size_gb": 50}


def test_snapshot_commands(logged_in, capsys):
    snapshot = {
        "id": "s-1",
        "name": "before",
        "volume": "v-1",
        "source_name": "ds",
        "status": "saving",
        "size_bytes": 0,
    }
    ready = {
        **snapshot,
        "status": "ready",
        "size_bytes": 3_000_000_000,
        "monthly_cost": "0.09",
        "currency": "USD",
    }
    logged_in.reply("POST", "/api/v1/snapshots/", (201, snapshot))
    logged_in.reply("GET", "/api/v1/snapshots/s-1/", (200, ready))
    code, out, err = run(capsys, "snapshot-create", "ds", "before")
    assert code == 0, err
    assert out.startswith(
        "Snapshot before of ds is in the storage (3.00 GB); use it with: gpurental snapshot-restore"
    )
    assert logged_in.received("POST")[-1].body == {"volume": "ds", "name": "before"}

    logged_in.reply("GET", "/api/v1/snapshots/", (200, {"results": [ready], "next": None}))
    code, out, _ = run(capsys, "snapshots")
    assert code == 0 and "before" in out and "0.09 USD" in out

    restored = {
        "id": "v-2",
        "name": "copy",
        "host": "node2",
        "size_gb": 20,
        "status": "available",
        "used_bytes": 0,
        "in_use": False,
        "mount_path": "",
    }
    logged_in.reply("POST", "/api/v1/snapshots/s-1/restore/", (201, restored))
    code, out, err = run(capsys, "snapshot-restore", "before", "--host", "node2", "--name", "copy")
    assert code == 0, err
    assert out.startswith("Volume copy (20 GB on node2): available")
    assert logged_in.requests[-1].body == {"host": "node2", "name": "copy"}

    logged_in.reply("DELETE", "/api/v1/snapshots/s-1/", (204, None))
    code, out, _ = run(capsys, "snapshot-delete", "before")
    assert (code, out) == (0, "Deleted snapshot before\n")


def test_zones_in_the_cli_launch_volume_create_and_the_gpu_list(logged_in, capsys):
    from tests.client.test_cli import instance

    logged_in.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))
    code, _, err = run(capsys, "launch", "--gpu", "A10G", "--image", "jupyter-cpu",
                       "--zone", "east-1a", "--no-wait")  # fmt: skip
    assert code == 0, err
    assert logged_in.received("POST")[-1].body["zone"] == "east-1a"

    volume = {"id": "v-1", "name": "ds", "host": "node1", "zone": "east-1a", "size_gb": 20}
    logged_in.reply("POST", "/api/v1/volumes/", (201, volume))
    code, out, err = run(capsys, "volume-create", "ds", "--size", "20", "--zone", "east-1a")
    assert code == 0, err
    assert logged_in.requests[-1].body == {"name": "ds", "size_gb": 20, "zone": "east-1a"}
    code, _, err = run(capsys, "volume-create", "ds", "--size", "20")
    assert code == 2 and "--host" in err and "--zone" in err  # one of the two is needed

    zones = [{"zone": "east-1a", "region": "east-1", "label": "", "gpus_free": 2,
              "gpus_total": 4}]  # fmt: skip
    model = {"slug": "a10g", "short_name": "A10G", "name": "A10G", "memory_gb": 24,
             "interconnect": "pcie", "gpus_free": 2, "gpus_total": 4, "zones": zones}  # fmt: skip
    logged_in.reply("GET", "/api/v1/gpu-models/", (200, {"results": [model], "next": None}))
    logged_in.reply("GET", "/api/v1/plans/", (200, {"results": [], "next": None}))
    code, out, err = run(capsys, "gpus")
    assert code == 0, err
    assert "A10G by zone: east-1a 2/4" in out
