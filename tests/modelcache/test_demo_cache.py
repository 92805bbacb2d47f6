"""`make demo`'s local agent has a shared Hugging Face cache, so the README's
`modelcache fill --host local …` works there."""

from __future__ import annotations

from gpurental.agent.config import AgentConfig, read_env_file
from gpurental.console.demo import seed_demo
from gpurental.fleet.models import Host


def test_the_demo_agent_and_its_host_row_name_the_same_cache(db, tmp_path):
    env_file = tmp_path / "local-agent.env"
    seed_demo(agent_env=env_file)
    config = AgentConfig.from_env(read_env_file(env_file))
    host = Host.objects.get(name="local")
    assert config.hf_cache_dir == host.hf_cache_dir == str((tmp_path / "hf-cache").resolve())
    assert (tmp_path / "hf-cache" / "hub").is_dir()
    assert config.model_import_dir == str(tmp_path / "agent-local" / "model-imports")
    assert (tmp_path / "agent-local" / "model-imports").is_dir()
