"""DockerRuntime against the real Docker Engine and the real gpurental/jupyter-cpu image."""

from __future__ import annotations

import docker.errors
import pytest
import requests

from gpurental.agent.runtimes import ImageNotFound, RuntimeFailure
from gpurental.agent.runtimes.base import LABEL_INSTANCE, LABEL_MANAGED, ignore_progress
from gpurental.agent.runtimes.docker import (
    ROOT_CAPABILITIES,
    container_name,
    create_kwargs,
    volume_name,
)

pytestmark = pytest.mark.docker


def status(started, token: str | None) -> int:
    headers = {"Authorization": f"token {token}"} if token else {}
    url = f"http://{started.host}:{started.port}/api/status"
    return requests.get(url, headers=headers, timeout=5).status_code


def read_workspace_file(runtime, instance_id: str, name: str) -> str:
    container = runtime.client.containers.get(container_name(instance_id))
    code, output = container.exec_run(["cat", f"/workspace/{name}"])
    assert code == 0, output
    return output.decode()


def exists(collection, name: str) -> bool:
    try:
        collection.get(name)
    except docker.errors.NotFound:
        return False
    return True


@pytest.fixture(scope="module")
def running(docker_runtime, make_spec):
    """One started instance shared by the read-only assertions below."""
    spec = make_spec()
    try:
        started = docker_runtime.start(spec, ignore_progress)
        inspect = docker_runtime.client.api.inspect_container(container_name(spec.instance_id))
        yield spec, started, inspect
    finally:
        docker_runtime.remove(spec.instance_id)


def test_jupyter_answers_with_the_token_and_refuses_without(running):
    _, started, _ = running
    assert status(started, running[0].token) == 200
    assert status(started, None) == 403
    assert status(started, "wrong-token") == 403


def test_port_is_published_only_on_the_bind_address(running):
    _, started, inspect = running
    bindings = inspect["HostConfig"]["PortBindings"]["8888/tcp"]
    assert bindings == [{"HostIp": "127.0.0.1", "HostPort": ""}]
    published = inspect["NetworkSettings"]["Ports"]["8888/tcp"]
    assert published == [{"HostIp": "127.0.0.1", "HostPort": str(started.port)}]
    assert started.host == "127.0.0.1"


def test_container_is_hardened_and_limited(running):
    _, _, inspect = running
    host = inspect["HostConfig"]
    assert host["Privileged"] is False
    assert host["SecurityOpt"] == ["no-new-privileges:true"]
    assert host["CapDrop"] == ["ALL"]
    # Root inside needs these few back (chown, apt's setuid to _apt, sshd's chroot); never
    # SYS_ADMIN, NET_ADMIN or NET_RAW.
    assert sorted(host["CapAdd"]) == sorted(ROOT_CAPABILITIES)
    assert not {"SYS_ADMIN", "NET_ADMIN", "NET_RAW", "CAP_SYS_ADMIN"} & set(host["CapAdd"])
    assert host["PidsLimit"] == 256
    assert host["Memory"] == 768 * 1024 * 1024
    assert host["NanoCpus"] == 1_500_000_000
    assert not host["DeviceRequests"]
    assert inspect["Config"]["User"] in ("", "root")  # the image's user: root
    assert host["UsernsMode"] == ""  # the engine's remapping applies (not "host")
    sources = [m.get("Source", "") for m in inspect["Mounts"]]
    assert not any("docker.sock" in source for source in sources)


def test_container_and_volume_carry_the_instance_labels(running, docker_runtime):
    spec, _, inspect = running
    expected = {LABEL_INSTANCE: spec.instance_id, LABEL_MANAGED: "true"}
    assert expected.items() <= inspect["Config"]["Labels"].items()
    volume = docker_runtime.client.volumes.get(volume_name(spec.instance_id))
    assert volume.attrs["Labels"] == expected
    workspace = [m for m in inspect["Mounts"] if m["Destination"] == "/workspace"]
    assert [m["Name"] for m in workspace] == [volume_name(spec.instance_id)]


def test_simulated_gpus_are_only_named_in_the_environment(running):
    spec, _, inspect = running
    env = dict(item.split("=", 1) for item in inspect["Config"]["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert env["JUPYTER_TOKEN"] == spec.token


def test_second_start_of_a_running_instance_reuses_its_container(running, docker_runtime):
    spec, started, _ = running
    again = docker_runtime.start(spec, ignore_progress)
    assert again == started


def test_list_instances_reports_the_running_instance(running, docker_runtime):
    spec, _, _ = running
    assert docker_runtime.list_instances()[spec.instance_id] == "running"


def test_logs_tail_shows_jupyter_output(running, docker_runtime):
    spec, _, _ = running
    logs = docker_runtime.logs_tail(spec.instance_id, lines=50)
    assert "Jupyter Server" in logs
    assert spec.token not in logs


def test_workspace_survives_stop_and_start(docker_runtime, make_spec, cleanup):
    spec = make_spec()
    cleanup(docker_runtime, spec.instance_id)
    docker_runtime.start(spec, ignore_progress)
    container = docker_runtime.client.containers.get(container_name(spec.instance_id))
    code, output = container.exec_run(["sh", "-c", "echo kept > /workspace/note.txt"])
    assert code == 0, output

    docker_runtime.stop(spec.instance_id)
    assert not exists(docker_runtime.client.containers, container_name(spec.instance_id))
    assert docker_runtime.list_instances()[spec.instance_id] == "stopped"

    restarted = docker_runtime.start(spec, ignore_progress)
    assert restarted.container_id != container.id
    assert read_workspace_file(docker_runtime, spec.instance_id, "note.txt") == "kept\n"


def test_remove_deletes_container_and_volume(docker_runtime, make_spec, cleanup):
    spec = make_spec()
    cleanup(docker_runtime, spec.instance_id)
    docker_runtime.start(spec, ignore_progress)

    docker_runtime.remove(spec.instance_id)
    docker_runtime.remove(spec.instance_id)  # repeating it is harmless

    assert not exists(docker_runtime.client.containers, container_name(spec.instance_id))
    assert not exists(docker_runtime.client.volumes, volume_name(spec.instance_id))
    assert spec.instance_id not in docker_runtime.list_instances()


def test_missing_image_is_reported_and_leaves_nothing_behind(docker_runtime, make_spec, cleanup):
    spec = make_spec(image="gpurental/not-built:never")
    cleanup(docker_runtime, spec.instance_id)

    with pytest.raises(ImageNotFound) as error:
        docker_runtime.start(spec, ignore_progress)

    assert "gpurental/not-built:never is not on this host" in str(error.value)
    assert "make images" in str(error.value)
    assert spec.instance_id not in docker_runtime.list_instances()


def test_container_that_exits_at_once_is_reported_with_its_logs(docker_runtime, make_spec, cleanup):
    spec = make_spec(command=("sh", "-c", "echo 'no GPU for you' >&2; exit 3"))
    cleanup(docker_runtime, spec.instance_id)

    with pytest.raises(RuntimeFailure) as error:
        docker_runtime.start(spec, ignore_progress)

    message = str(error.value)
    assert "exited with code 3" in message
    assert "no GPU for you" in message
    # Nothing half-started stays behind; only the (empty) workspace volume is kept.
    assert not exists(docker_runtime.client.containers, container_name(spec.instance_id))
    assert docker_runtime.list_instances()[spec.instance_id] == "stopped"


def test_gpus_on_a_host_without_the_nvidia_toolkit_fail_with_advice(
    docker_runtime, make_spec, cleanup
):
    if "nvidia" in docker_runtime.client.info().get("Runtimes", {}):
        pytest.skip("this host has the NVIDIA runtime; the failure cannot happen here")
    spec = make_spec(gpu_source="nvml", gpu_indices=(0,), gpu_uuids=("GPU-00000000-fake",))
    cleanup(docker_runtime, spec.instance_id)

    with pytest.raises(RuntimeFailure) as error:
        docker_runtime.start(spec, ignore_progress)

    assert "NVIDIA Container Toolkit" in str(error.value)
    assert not exists(docker_runtime.client.containers, container_name(spec.instance_id))


def test_nvml_gpus_are_requested_by_uuid_and_named_explicitly(make_spec):
    spec = make_spec(gpu_source="nvml", gpu_indices=(2, 3), gpu_uuids=("GPU-aaa", "GPU-bbb"))

    kwargs = create_kwargs(spec)

    [request] = kwargs["device_requests"]
    assert request["DeviceIDs"] == ["GPU-aaa", "GPU-bbb"]
    assert request["Capabilities"] == [["gpu"]]
    assert kwargs["environment"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaa,GPU-bbb"


def test_nvml_host_without_gpus_in_the_plan_exposes_none(make_spec):
    spec = make_spec(gpu_source="nvml", gpu_indices=(), gpu_uuids=())

    kwargs = create_kwargs(spec)

    assert kwargs["device_requests"] == []
    assert kwargs["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_template_env_cannot_override_the_token(make_spec):
    spec = make_spec(env={"JUPYTER_TOKEN": "", "EXTRA": "1"})

    env = create_kwargs(spec)["environment"]

    assert env["JUPYTER_TOKEN"] == spec.token
    assert env["EXTRA"] == "1"


def test_hf_cache_is_mounted_read_only(make_spec, tmp_path):
    spec = make_spec(hf_cache_dir=str(tmp_path))

    kwargs = create_kwargs(spec)

    [hf] = [m for m in kwargs["mounts"] if m["Target"] == "/models/huggingface"]
    assert hf["Source"] == str(tmp_path)
    assert hf["ReadOnly"] is True
    assert hf["Type"] == "bind"
    # HF_HOME is the instance's own, writable; the entrypoint links the shared files into it.
    assert kwargs["environment"]["HF_HOME"] == "/workspace/.cache/huggingface"
    assert kwargs["environment"]["GPURENTAL_HF_SHARED"] == "/models/huggingface"


def test_agents_sharing_an_engine_see_only_their_own_instances(docker_runtime, make_spec, cleanup):
    from gpurental.agent.runtimes.docker import DockerRuntime

    alpha = DockerRuntime(client=docker_runtime.client, ready_timeout_s=60, host_name="alpha")
    beta = DockerRuntime(client=docker_runtime.client, ready_timeout_s=60, host_name="beta")
    spec = make_spec()
    cleanup(alpha, spec.instance_id)
    alpha.start(spec, lambda message: None)
    assert alpha.list_instances().get(spec.instance_id) == "running"
    assert spec.instance_id not in beta.list_instances()
