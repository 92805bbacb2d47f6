"""ProcessRuntime: real JupyterLab subprocesses from this Python environment."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import requests

from gpurental.agent.runtimes import ImageNotFound, RuntimeFailure, make_runtime
from gpurental.agent.runtimes.base import ignore_progress
from gpurental.agent.runtimes.process import STATE_FILE, ProcessRuntime

pytestmark = pytest.mark.slow  # JupyterLab subprocesses


def contents_url(started, path: str) -> str:
    return f"http://{started.host}:{started.port}/api/contents/{path}"


def auth(spec) -> dict[str, str]:
    return {"Authorization": f"token {spec.token}"}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def server_environment(result) -> dict[str, str]:
    pid = int(result.container_id.removeprefix("pid:"))
    items = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(item.split("=", 1) for item in items if item)


@pytest.fixture
def runtime(tmp_path, jupyter_installed) -> ProcessRuntime:
    return make_runtime("process", base_dir=tmp_path / "instances", ready_timeout_s=60)


@pytest.fixture
def started(runtime, make_spec, cleanup):
    spec = make_spec()
    cleanup(runtime, spec.instance_id)
    return spec, runtime.start(spec, ignore_progress)


@pytest.fixture(scope="module")
def shared(tmp_path_factory, make_spec, jupyter_installed):
    """One server for the read-only checks, started while the agent holds a secret."""
    runtime = ProcessRuntime(base_dir=tmp_path_factory.mktemp("instances"), ready_timeout_s=60)
    spec = make_spec()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPURENTAL_HOST_TOKEN", "agent-secret")
        result = runtime.start(spec, ignore_progress)
    try:
        yield runtime, spec, result
    finally:
        runtime.remove(spec.instance_id)


def test_jupyter_answers_with_the_token_and_refuses_without(shared):
    _, spec, result = shared
    url = f"http://{result.host}:{result.port}/api/status"
    assert requests.get(url, headers=auth(spec), timeout=5).status_code == 200
    assert requests.get(url, timeout=5).status_code == 403
    assert result.host == "127.0.0.1"


def test_server_does_not_inherit_the_agent_environment(shared):
    _, spec, result = shared
    env = server_environment(result)
    assert "GPURENTAL_HOST_TOKEN" not in env
    assert env["JUPYTER_TOKEN"] == spec.token
    assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1"


def test_second_start_of_a_running_instance_reuses_its_server(shared):
    runtime, spec, first = shared
    assert runtime.start(spec, ignore_progress) == first


def test_workspace_survives_stop_and_start(started, runtime):
    spec, first = started
    note = {"type": "file", "format": "text", "content": "kept"}
    put = requests.put(contents_url(first, "note.txt"), json=note, headers=auth(spec), timeout=5)
    assert put.status_code == 201, put.text

    runtime.stop(spec.instance_id)
    assert not pid_alive(int(first.container_id.removeprefix("pid:")))
    assert runtime.list_instances()[spec.instance_id] == "stopped"

    second = runtime.start(spec, ignore_progress)
    got = requests.get(contents_url(second, "note.txt"), headers=auth(spec), timeout=5)
    assert got.json()["content"] == "kept"


def test_a_restarted_agent_finds_and_stops_the_running_server(started, runtime):
    spec, result = started
    restarted_agent = ProcessRuntime(base_dir=runtime.base_dir)

    assert restarted_agent.list_instances() == {spec.instance_id: "running"}
    restarted_agent.stop(spec.instance_id)

    assert restarted_agent.list_instances() == {spec.instance_id: "stopped"}
    assert runtime.list_instances() == {spec.instance_id: "stopped"}


def test_a_server_that_died_is_listed_as_exited(started, runtime):
    spec, result = started
    os.killpg(int(result.container_id.removeprefix("pid:")), signal.SIGKILL)
    runtime._children[spec.instance_id].wait(timeout=10)

    assert runtime.list_instances()[spec.instance_id] == "exited"


def test_remove_deletes_the_workspace(started, runtime):
    spec, _ = started
    instance_dir = runtime.base_dir / spec.instance_id

    runtime.remove(spec.instance_id)
    runtime.remove(spec.instance_id)  # repeating it is harmless

    assert not instance_dir.exists()
    assert spec.instance_id not in runtime.list_instances()


def test_process_that_exits_at_once_is_reported_with_its_logs(runtime, make_spec, cleanup):
    crash = "import sys; print('no GPU for you', file=sys.stderr); sys.exit(3)"
    spec = make_spec(command=(sys.executable, "-c", crash))
    cleanup(runtime, spec.instance_id)

    with pytest.raises(RuntimeFailure) as error:
        runtime.start(spec, ignore_progress)

    assert "exited with code 3" in str(error.value)
    assert "no GPU for you" in str(error.value)
    assert runtime.list_instances()[spec.instance_id] == "stopped"


def test_missing_jupyter_is_reported_as_a_missing_image(tmp_path, make_spec):
    runtime = ProcessRuntime(base_dir=tmp_path, jupyter=tmp_path / "nowhere" / "jupyter")

    with pytest.raises(ImageNotFound) as error:
        runtime.start(make_spec(), ignore_progress)

    assert "pip install jupyterlab" in str(error.value)


def test_state_file_of_an_unrelated_process_is_not_trusted(runtime, make_spec):
    # An agent restart can leave a pid file whose pid now belongs to someone else.
    spec = make_spec()
    instance_dir = runtime.base_dir / spec.instance_id
    instance_dir.mkdir(parents=True)
    state = {"pid": os.getpid(), "port": 1, "fingerprint": "x", "started": "0"}
    (instance_dir / STATE_FILE).write_text(json.dumps(state))

    assert runtime.list_instances() == {spec.instance_id: "exited"}
    runtime.stop(spec.instance_id)  # must not signal this test process
    assert runtime.list_instances() == {spec.instance_id: "stopped"}


def test_instance_ids_must_be_uuids(runtime, make_spec):
    with pytest.raises(ValueError, match="UUID"):
        make_spec(instance_id="../../etc")
    with pytest.raises(ValueError, match="UUID"):
        runtime.remove("../../etc")


def test_a_spec_with_volumes_is_refused_in_words(tmp_path, make_spec):
    from gpurental.agent.runtimes import RuntimeFailure
    from gpurental.agent.runtimes.process import ProcessRuntime

    runtime = ProcessRuntime(base_dir=str(tmp_path))
    spec = make_spec(volumes=(("gpurental-vol-x", "/data", "x"),))
    with pytest.raises(RuntimeFailure, match="cannot mount volumes"):
        runtime.start(spec, lambda *a, **k: None)
