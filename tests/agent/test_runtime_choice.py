"""The runtime is explicit: customer code runs outside Docker only when asked for by name
(GPURENTAL_RUNTIME=process) or with DEBUG on, never because Docker happened to be down."""

from __future__ import annotations

import pytest

from gpurental.agent import __main__ as agent_main
from gpurental.agent.config import AgentConfig, ConfigError

BASE = {
    "GPURENTAL_BROKER_URL": "memory://",
    "GPURENTAL_HOST_NAME": "node1",
    "GPURENTAL_HOST_TOKEN": "t",
}


@pytest.fixture
def no_docker(monkeypatch):
    monkeypatch.setattr(agent_main, "docker_problem", lambda: "no Docker Engine answers")


def config(tmp_path, **env) -> AgentConfig:
    return AgentConfig.from_env({**BASE, "GPURENTAL_AGENT_DIR": str(tmp_path), **env})


def test_auto_without_docker_refuses_to_start(tmp_path, no_docker):
    with pytest.raises(ConfigError, match="runs customer code only in Docker"):
        agent_main.choose_runtime(config(tmp_path))


def test_docker_by_name_without_docker_refuses_to_start(tmp_path, no_docker):
    with pytest.raises(ConfigError, match="GPURENTAL_RUNTIME=docker but no Docker Engine"):
        agent_main.choose_runtime(config(tmp_path, GPURENTAL_RUNTIME="docker"))


def test_process_by_name_or_with_debug_is_allowed(tmp_path, no_docker):
    runtime, why = agent_main.choose_runtime(config(tmp_path, GPURENTAL_RUNTIME="process"))
    assert runtime.name == "process" and "GPURENTAL_RUNTIME=process" in why
    runtime, why = agent_main.choose_runtime(config(tmp_path, DEBUG="1"))
    assert runtime.name == "process" and "DEBUG is on" in why


def test_the_agent_exits_with_the_reason(tmp_path, no_docker, monkeypatch, capsys):
    for key, value in {**BASE, "GPURENTAL_AGENT_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("DEBUG", raising=False)
    monkeypatch.delenv("GPURENTAL_RUNTIME", raising=False)
    monkeypatch.setenv("GPURENTAL_GPU_SOURCE", "simulated")
    assert agent_main.main([]) == 2
    assert "runs customer code only in Docker" in capsys.readouterr().err


def test_the_network_sandbox_pool_is_two_unless_set(tmp_path):
    assert config(tmp_path).net_pool == 2
    assert config(tmp_path, GPURENTAL_NET_POOL="0").net_pool == 0


@pytest.mark.parametrize("value", ["-1", "two", "17", "", "²"])
def test_a_bad_network_sandbox_pool_is_refused_naming_the_variable(tmp_path, value):
    with pytest.raises(ConfigError, match="GPURENTAL_NET_POOL=.*whole number from 0 to 16"):
        config(tmp_path, GPURENTAL_NET_POOL=value)
