"""A real Prometheus scrapes a real web server of the platform; promtool checks what
``/metrics`` writes. Debian's ``prometheus`` package provides both."""

from __future__ import annotations

import socket
import subprocess
import time
from urllib.parse import urlsplit

import pytest
import requests

from gpurental.observability.collector import render
from tests.telemetry.conftest import host_message

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "prom-scrape-token"  # noqa: S105 - a test's own token


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def prometheus(prometheus_bin, live_server, settings, tmp_path):
    """Prometheus 2 scraping the live server's /metrics each second, as deploy/ says
    (bearer token, no honor_labels). Yields (its API base URL, the scrape target)."""
    settings.METRICS_TOKEN = TOKEN
    target = urlsplit(live_server.url).netloc
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "prometheus.yml").write_text(
        f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: gpurental
    metrics_path: /metrics
    authorization: {{type: Bearer, credentials_file: {tmp_path / "token"}}}
    static_configs: [{{targets: ["{target}"]}}]
"""
    )
    port = _free_port()
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(  # noqa: S603
        [
            prometheus_bin,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{base}/-/ready", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            assert time.monotonic() < deadline, "Prometheus did not get ready"
            time.sleep(0.2)
        yield base, target
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def query(base: str, expr: str) -> list[dict]:
    answer = requests.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def until(fn, what: str, *, keep_fresh=None, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if keep_fresh:
            keep_fresh()
        if found := fn():
            return found
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never had {what}")


def test_prometheus_finds_an_instances_gpus_by_instance_id_and_as_nvidias_dashboard_asks(
    prometheus, run_instance, alice, publisher
):
    base, target = prometheus
    mine = run_instance(alice)
    (gpu,) = mine.gpu_indices
    idle = next(i for i in range(4) if i != gpu)

    def publish():
        publisher.publish(
            host_message((gpu, str(mine.pk), 73.0), (idle, None, 0.0), ts=time.time())
        )

    series = until(
        lambda: query(base, f'DCGM_FI_DEV_GPU_UTIL{{instance_id="{mine.pk}"}}'),
        "the instance's GPU series",
        keep_fresh=publish,
    )
    (only,) = series
    labels = only["metric"]
    assert float(only["value"][1]) == 73.0
    assert labels["gpu"] == str(gpu) and labels["Hostname"] == "node1"
    assert labels["customer"] == str(alice.pk) and "@" not in labels["customer"]
    # Prometheus's own labels are the scrape target's: nothing was renamed on ingestion.
    assert labels["instance"] == target and labels["job"] == "gpurental"
    assert not any(name.startswith("exported_") for name in labels)

    # NVIDIA's dcgm-exporter dashboard: pick an instance (target), then its GPUs, then
    # DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}.
    def label_values(label, match):
        answer = requests.get(
            f"{base}/api/v1/label/{label}/values", params={"match[]": match}, timeout=5
        ).json()
        return answer["data"]

    assert label_values("instance", "DCGM_FI_DEV_GPU_TEMP") == [target]
    gpus = label_values("gpu", f'DCGM_FI_DEV_GPU_TEMP{{instance="{target}"}}')
    assert {str(gpu), str(idle)} <= set(gpus)
    nvidia = query(base, f'DCGM_FI_DEV_GPU_UTIL{{instance=~"{target}", gpu=~"{gpu}|{idle}"}}')
    assert sorted(float(s["value"][1]) for s in nvidia) == [0.0, 73.0]
    # The idle GPU is nobody's: its instance_id is empty.
    assert query(base, f'DCGM_FI_DEV_GPU_UTIL{{gpu="{idle}", instance_id=""}}')
    # And a platform series from the same scrape.
    running = query(base, 'gpurental_instances{status="running"}')
    assert [float(s["value"][1]) for s in running] == [1.0]


def test_promtool_accepts_the_exposition(promtool, run_instance, alice, publisher, settings):
    mine = run_instance(alice)
    (gpu,) = mine.gpu_indices
    publisher.publish(host_message((gpu, str(mine.pk), 50.0), ts=time.time()))
    text = render()
    assert b"DCGM_FI_DEV_GPU_UTIL{" in text
    done = subprocess.run(  # noqa: S603
        [promtool, "check", "metrics"], input=text, capture_output=True
    )
    out = (done.stdout + done.stderr).decode()
    # promtool's lint wants snake_case labels; dcgm-exporter's own label modelName is not,
    # and is kept so that NVIDIA's dashboards match. Anything else is a failure.
    problems = [
        line
        for line in out.splitlines()
        if line.strip() and "label names should be written in 'snake_case'" not in line
    ]
    assert not problems, out
    assert done.returncode in (0, 3), out  # 3: lint findings only (the one above)
