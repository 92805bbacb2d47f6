"""The agent's side without Docker: what it reports when it cannot run the benchmark."""

from types import SimpleNamespace

from gpurental.agent.acceptance import acceptance_run


class Reports:
    def __init__(self):
        self.sent = []

    def acceptance(self, run_id, kind, **data):
        self.sent.append((run_id, kind, data))


def test_an_agent_on_the_process_runtime_says_the_benchmark_needs_docker():
    reporter = Reports()
    agent = SimpleNamespace(runtime=SimpleNamespace(name="process"), reporter=reporter)
    acceptance_run(agent, {"run_id": "r1", "image": "x", "gpu_source": "simulated"})
    assert [kind for _, kind, _ in reporter.sent] == ["started", "failed"]
    assert "GPURENTAL_RUNTIME=docker" in reporter.sent[1][2]["reason"]
