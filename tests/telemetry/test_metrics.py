"""Prometheus /metrics: who may read it, and output a Prometheus parser accepts."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from gpurental.fleet.models import Host
from gpurental.rentals.services import lifecycle as lc
from tests.telemetry.conftest import host_message

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"(,|$)')


def parse(text: str) -> tuple[dict[str, str], list[tuple[str, dict, float]]]:
    """A strict reader of the text format: every sample's family has HELP and TYPE first."""
    types, samples = {}, []
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, raw_labels, value = match.groups()
        labels = {}
        if raw_labels:
            body = raw_labels[1:-1]
            found = LABEL.findall(body)
            assert "".join(f'{k}="{v}"{sep}' for k, v, sep in found) == body, line
            labels = {k: v for k, v, _ in found}
        family = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or family in types, f"{name} has no TYPE line"
        samples.append((name, labels, float(value)))
    return types, samples


def values(samples, name, **where):
    return [v for n, labels, v in samples if n == name and where.items() <= labels.items()]


def test_metrics_need_staff_or_the_bearer_token(client, alice, carol, settings):
    settings.METRICS_TOKEN = "s3cret-token"
    response = client.get("/metrics")
    assert response.status_code == 401 and "Bearer" in response["WWW-Authenticate"]
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-token")
    assert ok.status_code == 200 and ok["Content-Type"].startswith("text/plain; version=0.0.4")
    client.force_login(alice)
    assert client.get("/metrics").status_code == 403
    client.force_login(carol)
    assert client.get("/metrics").status_code == 200


def test_no_token_configured_means_no_token_works(client, settings, db):
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_gpu_gauges_come_from_the_latest_samples_with_the_holding_instance(
    client, carol, alice, run_instance, publisher, node1, a100
):
    mine = run_instance(alice)
    (gpu,) = mine.gpu_indices
    other = next(i for i in range(4) if i != gpu)
    publisher.publish(host_message((gpu, str(mine.pk), 42.5), (other, None, 0.0), ts=time.time()))
    client.force_login(carol)
    types, samples = parse(client.get("/metrics").content.decode())
    assert types["DCGM_FI_DEV_GPU_UTIL"] == "gauge"
    assert values(samples, "DCGM_FI_DEV_GPU_UTIL", host="node1", gpu=str(gpu)) == [42.5]
    (labels,) = [
        labels
        for name, labels, _ in samples
        if name == "DCGM_FI_DEV_GPU_UTIL" and labels["gpu"] == str(gpu)
    ]
    uuid = node1.gpus.get(index=gpu).uuid
    assert labels == {
        "gpu": str(gpu),
        "UUID": uuid,
        "device": f"nvidia{gpu}",
        "modelName": a100.nvml_names[0],
        "Hostname": "node1",
        "host": "node1",
        "instance_id": str(mine.pk),
        "customer": str(alice.pk),
        "simulated": "true",
    }
    assert "instance" not in labels and "job" not in labels  # Prometheus's own
    assert values(samples, "DCGM_FI_DEV_GPU_UTIL", gpu=str(other), instance_id="") == [0.0]
    assert values(samples, "DCGM_FI_DEV_FB_USED", gpu=str(gpu)) == [4.25e9 / 2**20]
    assert values(samples, "DCGM_FI_DEV_FB_FREE", gpu=str(gpu)) == [
        (85_899_345_920 - 4.25e9) / 2**20
    ]
    assert values(samples, "DCGM_FI_DEV_GPU_TEMP", gpu=str(gpu)) == [40.0]
    assert values(samples, "DCGM_FI_DEV_POWER_USAGE", gpu=str(gpu)) == [100.0]
    assert values(samples, "DCGM_FI_DEV_SM_CLOCK", gpu=str(gpu)) == [1410.0]
    (age,) = values(samples, "gpurental_host_sample_age_seconds", host="node1")
    assert 0 <= age < 15


def test_fleet_counters_and_the_launch_duration_histogram(
    client, carol, alice, bob, image, a100, node1, sent
):
    fast = lc.instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1, now=T0)
    lc.instance_report_running(
        instance_id=str(fast.pk), port=40000, container_id="a", now=T0 + timedelta(seconds=7)
    )
    slow = lc.instance_launch(user=bob, image=image, gpu_model=a100, gpu_count=1, now=T0)
    lc.instance_report_running(
        instance_id=str(slow.pk), port=40001, container_id="b", now=T0 + timedelta(seconds=95)
    )
    broken = lc.instance_launch(user=bob, image=image, gpu_model=a100, gpu_count=1, now=T0)
    lc.instance_report_failed(instance_id=str(broken.pk), reason="image missing", now=T0)
    client.force_login(carol)
    types, samples = parse(client.get("/metrics").content.decode())
    assert values(samples, "gpurental_instances", status="running") == [2]
    assert values(samples, "gpurental_instances", status="failed") == [1]
    assert values(samples, "gpurental_instances", status="stopped") == [0]
    assert types["gpurental_instance_launches_total"] == "counter"
    assert values(samples, "gpurental_instance_launches_total") == [3]
    assert values(samples, "gpurental_instance_failures_total") == [1]
    name = "gpurental_instance_launch_duration_seconds"
    assert types[name] == "histogram"
    buckets = {labels["le"]: v for n, labels, v in samples if n == f"{name}_bucket"}
    assert (buckets["5"], buckets["10"], buckets["60"], buckets["120"], buckets["+Inf"]) == (
        0,
        1,
        1,
        2,
        2,
    )
    assert list(buckets.values()) == sorted(buckets.values())  # cumulative
    assert values(samples, f"{name}_count") == [2]
    assert values(samples, f"{name}_sum") == [102.0]


def test_label_values_are_escaped(client, carol, a100, make_host):
    make_host("evil", a100, count=1)
    client.force_login(carol)
    Host.objects.filter(name="evil").update(name='e"v\\il')
    text = client.get("/metrics").content.decode()
    parse(text)  # still well-formed
    assert 'host="e\\"v\\\\il"' in text


def test_each_hosts_heartbeat_age_is_exported(client, carol, a100, make_host):
    make_host("fresh", a100, count=1)
    make_host("quiet", a100, count=1, last_heartbeat_at=timezone.now() - timedelta(seconds=90))
    client.force_login(carol)
    types, samples = parse(client.get("/metrics").content.decode())
    name = "gpurental_host_heartbeat_age_seconds"
    assert types[name] == "gauge"
    (fresh,) = values(samples, name, host="fresh")
    (quiet,) = values(samples, name, host="quiet")
    assert 0 <= fresh < 5
    assert 90 <= quiet < 95
