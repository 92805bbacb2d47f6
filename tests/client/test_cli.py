"""The ``gpurental`` command: output, JSON, exit codes, config file."""

from __future__ import annotations

import io
import json
import stat
import time
from pathlib import Path

import pytest

from gpurental.client import cli
from gpurental.client.cli import instances, output
from gpurental.client.models import Instance
from tests.client.conftest import API_KEY, error, instance

URL = "https://7.gw.example/lab"
LINK = "https://7.gw.example/_gw/enter?t=one-time"
LINKED = {"url": LINK, "expires_at": "2025-03-01T10:01:09Z", "origin": "https://7.gw.example"}
GPU_MODELS = [
    {
        "slug": "nvidia-a10g",
        "name": "NVIDIA A10G",
        "short_name": "A10G",
        "memory_gb": 24,
        "interconnect": "PCIe",
        "gpus_total": 8,
        "gpus_free": 3,
    },
    {
        "slug": "nvidia-a100-80gb",
        "name": "NVIDIA A100 80GB",
        "short_name": "A100",
        "memory_gb": 80,
        "interconnect": "NVLink",
        "gpus_total": 8,
        "gpus_free": 0,
    },
]
PLANS = [
    {
        "slug": "a10g-x1",
        "gpu_model": "nvidia-a10g",
        "gpu_count": 1,
        "hourly_rate": "0.90",
        "currency": "USD",
    },
    {
        "slug": "a10g-x4",
        "gpu_model": "nvidia-a10g",
        "gpu_count": 4,
        "hourly_rate": "3.40",
        "currency": "USD",
    },
]


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_documents_the_exit_codes(capsys):
    code, out, _ = run(capsys, "--help")

    assert code == 0
    assert "9  server unreachable" in out
    assert "5  no capacity or quota exceeded" in out


def test_ls_json_is_the_api_list_and_nothing_else(logged_in, capsys):
    logged_in.reply("GET", "/api/v1/instances/", (200, [instance(1), instance(2, "running")]))

    code, out, err = run(capsys, "ls", "--json")

    assert code == 0
    assert [i["id"] for i in json.loads(out)] == [1, 2]
    assert err == ""


def test_json_flag_may_come_before_the_command(logged_in, capsys):
    logged_in.reply("GET", "/api/v1/instances/", (200, []))

    code, out, _ = run(capsys, "--json", "ls")

    assert (code, json.loads(out)) == (0, [])


def test_ls_table_shows_status_gpus_and_host(logged_in, capsys):
    logged_in.reply("GET", "/api/v1/instances/", (200, [instance(12, "running")]))

    code, out, _ = run(capsys, "ls", "--status", "running")

    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["ID", "NAME", "STATUS", "GPUS", "HOST", "CREATED"]
    assert row.split()[:6] == ["12", "notebook", "running", "1x", "A10G", "gpu-01"]
    assert logged_in.received()[0].query == {"status": ["running"]}


def test_gpus_shows_free_over_total_and_cheapest_price_per_gpu(logged_in, capsys):
    logged_in.reply("GET", "/api/v1/gpu-models/", (200, GPU_MODELS))
    logged_in.reply("GET", "/api/v1/plans/", (200, {"next": None, "results": PLANS}))

    code, out, _ = run(capsys, "gpus")
    _, json_out, _ = run(capsys, "gpus", "--json")

    assert code == 0
    a10g, a100 = out.splitlines()[1:]
    assert "3/8" in a10g and "from 0.85 USD" in a10g
    assert "0/8" in a100 and a100.endswith("-")
    rows = json.loads(json_out)
    assert rows[0]["price_per_gpu_hour"] == "0.85"
    assert rows[1]["price_per_gpu_hour"] is None


def test_launch_waits_and_prints_only_the_url_on_stdout(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))
    logged_in.reply(
        "GET",
        "/api/v1/instances/7/",
        (
            200,
            instance(
                status="provisioning",
                events=[{"to_status": "provisioning", "step": "pulling image"}],
            ),
        ),
        (200, instance(status="running", jupyter_url=URL)),
    )
    logged_in.reply("POST", "/api/v1/instances/7/connect/", (201, LINKED))

    code, out, err = run(
        capsys, "launch", "--gpu", "A10G", "--image", "pytorch-2.1", "--model-repo", "huggingface"
    )

    assert code == 0
    assert out == f"{LINK}\n"
    assert "instance 7: provisioning - pulling image" in err  # stderr is no TTY: plain lines
    assert "\r" not in err
    assert logged_in.received("POST")[0].body == {
        "gpu_model": "A10G",
        "gpu_count": 1,
        "image": "pytorch-2.1",
        "model_repo": "huggingface",
    }


def test_launch_no_wait_json_prints_the_new_instance(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))

    code, out, _ = run(
        capsys, "launch", "--plan", "a10g-x1", "--image", "jupyter-cpu", "--no-wait", "--json"
    )

    assert code == 0
    assert json.loads(out)["status"] == "pending"
    assert logged_in.received("POST")[0].body == {"plan": "a10g-x1", "image": "jupyter-cpu"}


@pytest.mark.parametrize(
    ("answer", "exit_code", "message"),
    [
        (error(409, "no_capacity", "no A10G free on any host; 3 free from 14:00"), 5, "14:00"),
        (error(409, "quota_exceeded", "your quota is 2 GPUs; 2 in use"), 5, "quota"),
        (error(400, "validation_error", "unknown image", image=["no such image"]), 2, "image"),
        (error(401, "not_authenticated", "API key revoked"), 3, "revoked"),
    ],
)
def test_launch_refusals_exit_with_their_code_and_the_servers_message(
    logged_in, capsys, answer, exit_code, message
):
    logged_in.reply("POST", "/api/v1/instances/", answer)

    code, out, err = run(capsys, "launch", "--gpu", "A10G", "--image", "pytorch-2.1", "--json")

    assert code == exit_code
    assert out == ""
    assert err.startswith("gpurental: ")
    assert message in err


def test_launch_that_fails_exits_7_with_the_reason(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))
    logged_in.reply(
        "GET",
        "/api/v1/instances/7/",
        (200, instance(status="failed", status_reason="JupyterLab did not answer within 120s")),
    )

    code, _, err = run(capsys, "launch", "--gpu", "A10G", "--image", "pytorch-2.1")

    assert code == 7
    assert "gpurental: instance 7 is failed: JupyterLab did not answer within 120s" in err


def test_launch_still_provisioning_at_the_timeout_exits_8(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/", (201, instance(status="pending")))
    logged_in.reply("GET", "/api/v1/instances/7/", (200, instance(status="provisioning")))

    code, _, err = run(
        capsys, "launch", "--gpu", "A10G", "--image", "pytorch-2.1", "--timeout", "0"
    )

    assert code == 8
    assert "gpurental terminate 7" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["launch", "--image", "pytorch-2.1"],
        ["launch", "--gpu", "A10G", "--plan", "a10g-x1", "--image", "pytorch-2.1"],
        ["launch", "--plan", "a10g-x1", "--count", "2", "--image", "pytorch-2.1"],
        ["launch", "--gpu", "A10G", "--count", "0", "--image", "pytorch-2.1"],
        ["ls", "--status", "sleeping"],
        [],
    ],
)
def test_bad_arguments_exit_2_without_calling_the_server(logged_in, capsys, argv):
    code, out, err = run(capsys, *argv)

    assert code == 2
    assert out == ""
    assert err
    assert logged_in.requests == []


def test_spinner_draws_the_latest_step_on_a_terminal():
    stream = TTY()
    with output.Progress(stream) as progress:
        progress.update(
            Instance.from_api(
                instance(status="provisioning", events=[{"step": "creating container"}])
            )
        )
        deadline = time.monotonic() + 5
        while "creating container" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)

    drawn = stream.getvalue()
    assert "\r\x1b[K" in drawn
    assert "instance 7: provisioning - creating container" in drawn
    assert drawn.endswith("\r\x1b[K")  # the line is cleared for what comes next


def test_open_prints_the_url_and_opens_a_browser(logged_in, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr(instances.webbrowser, "open", opened.append)
    logged_in.reply(
        "GET", "/api/v1/instances/7/", *[(200, instance(status="running", jupyter_url=URL))] * 2
    )
    logged_in.reply("POST", "/api/v1/instances/7/connect/", *[(201, LINKED)] * 2)

    code, out, _ = run(capsys, "open", "7")
    code_print, out_print, err = run(capsys, "open", "7", "--print")

    assert (code, out, code_print, out_print) == (0, f"{LINK}\n", 0, f"{LINK}\n")
    assert "logs its holder in once" in err
    assert opened == [LINK]  # a new link each time: a link works once


def test_open_unknown_instance_exits_4(logged_in, capsys):
    code, out, err = run(capsys, "open", "999")

    assert code == 4
    assert out == ""
    assert "gpurental: no route /api/v1/instances/999/" in err


def test_open_stopped_instance_exits_6_and_says_how_to_start_it(logged_in, capsys):
    logged_in.reply("GET", "/api/v1/instances/7/", (200, instance(status="stopped")))

    code, _, err = run(capsys, "open", "7")

    assert code == 6
    assert "gpurental start 7" in err


def test_stop_on_invalid_state_exits_6(logged_in, capsys):
    logged_in.reply(
        "POST", "/api/v1/instances/7/stop/", error(409, "invalid_state", "instance 7 is stopped")
    )

    code, _, err = run(capsys, "stop", "7")

    assert (code, err) == (6, "gpurental: instance 7 is stopped\n")


def test_start_prints_the_new_status(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/7/start/", (200, instance(status="pending")))

    code, out, _ = run(capsys, "start", "7")

    assert (code, out) == (0, "instance 7 (notebook): pending\n")


def test_start_without_gpus_asks_for_no_gpu_mode(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/7/start/", (200, instance(status="pending")))

    code, out, _ = run(capsys, "start", "7", "--without-gpus")

    assert (code, out) == (0, "instance 7 (notebook): pending\n")
    assert logged_in.received("POST")[0].body == {"without_gpus": True}


def test_terminate_without_a_terminal_needs_yes(logged_in, capsys):
    code, _, err = run(capsys, "terminate", "7")

    assert code == 2
    assert "--yes" in err
    assert logged_in.requests == []


def test_terminate_yes_json(logged_in, capsys):
    logged_in.reply("POST", "/api/v1/instances/7/terminate/", (200, instance(status="terminating")))

    code, out, _ = run(capsys, "terminate", "7", "--yes", "--json")

    assert (code, json.loads(out)["status"]) == (0, "terminating")


def test_unreachable_server_exits_9_naming_the_url(closed_port_url, sleeps, monkeypatch, capsys):
    monkeypatch.setenv("GPURENTAL_API_KEY", API_KEY)
    monkeypatch.setenv("GPURENTAL_URL", closed_port_url)

    code, out, err = run(capsys, "ls", "--json")

    assert code == 9
    assert out == ""
    assert closed_port_url in err


def test_missing_api_key_exits_3_and_points_to_login(capsys):
    code, out, err = run(capsys, "ls")

    assert code == 3
    assert out == ""
    assert "gpurental login" in err


def test_login_saves_url_and_key_mode_600_and_later_commands_use_them(api, sleeps, capsys):
    api.reply("GET", "/api/v1/me/", (200, {"email": "alice@example.com"}))
    api.reply("GET", "/api/v1/instances/", (200, []))

    code, out, _ = run(capsys, "login", "--api-key", API_KEY, "--url", api.url, "--json")

    assert code == 0
    saved = json.loads(out)
    assert saved["email"] == "alice@example.com"
    path = Path(saved["config"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": api.url, "api_key": API_KEY}
    assert run(capsys, "ls", "--json")[:2] == (0, "[]\n")
    assert api.received("GET", "/api/v1/instances/")[0].headers["Authorization"] == (
        f"Bearer {API_KEY}"
    )


def test_login_reads_the_key_from_stdin_when_not_a_terminal(api, sleeps, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{API_KEY}\n"))
    api.reply("GET", "/api/v1/me/", (200, {"email": "alice@example.com"}))

    code, out, _ = run(capsys, "login", "--url", api.url)

    assert code == 0
    assert "alice@example.com" in out
    assert API_KEY not in out


def test_login_with_a_refused_key_exits_3_and_saves_nothing(api, sleeps, capsys, tmp_path):
    api.reply("GET", "/api/v1/me/", error(401, "authentication_failed", "invalid API key"))

    code, _, err = run(capsys, "login", "--api-key", "gpr_wrong", "--url", api.url)

    assert code == 3
    assert "invalid API key" in err
    assert not (tmp_path / "config" / "config.json").exists()


def test_login_replaces_a_broken_config_file(api, sleeps, capsys, tmp_path):
    path = tmp_path / "config" / "config.json"
    path.parent.mkdir()
    path.write_text("{not json")
    assert run(capsys, "ls")[0] == 3
    api.reply("GET", "/api/v1/me/", (200, {"email": "alice@example.com"}))

    code, _, _ = run(capsys, "login", "--api-key", API_KEY, "--url", api.url)

    assert code == 0
    assert json.loads(path.read_text())["api_key"] == API_KEY


def test_launch_by_an_alias_says_which_image_it_runs(logged_in, capsys):
    reply = instance(status="pending", image="pytorch-2.13", image_alias="pytorch-2.1")
    logged_in.reply("POST", "/api/v1/instances/", (201, reply))

    code, out, err = run(capsys, "launch", "--gpu", "A10G", "--image", "pytorch-2.1", "--no-wait")

    assert code == 0 and out.startswith("instance 7")
    assert "gpurental: pytorch-2.1 is an alias of the image pytorch-2.13" in err
