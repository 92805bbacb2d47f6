"""The agent's sampler: GPU readings (NVML through the fake pynvml, simulated), one
message per host per tick stamped with the holding instance, per-minute batches."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from gpurental.agent.activity import CpuMeter, Holding, Holdings, KernelProbe, kernels_active
from gpurental.agent.config import AgentConfig, ConfigError
from gpurental.agent.gpus import NvmlSource, SimulatedSource
from gpurental.agent.sampler import (
    MinuteAggregator,
    Sampler,
    SamplerThread,
    telemetry_url_from_broker,
)
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice

IID_A = "11111111-1111-4111-8111-111111111111"
IID_B = "22222222-2222-4222-8222-222222222222"


def _devices(count=2, **fields):
    return [FakeDevice(uuid=f"GPU-{i}", **fields) for i in range(count)]


# --- NVML ---------------------------------------------------------------------


def test_nvml_sample_reads_utilisation_memory_temperature_power_and_clock():
    devices = _devices(2)
    devices[1].utilization, devices[1].memory_used = 87, 40 * 1024**3
    devices[1].temperature, devices[1].power_mw, devices[1].sm_clock = 71, 412_345, 1755
    fake_pynvml.install(devices)
    source = NvmlSource(module=fake_pynvml)
    first, second = source.sample()
    assert (first.util, first.stale) == (0.0, False)
    assert second.util == 87.0
    assert (second.mem_used, second.mem_total) == (40 * 1024**3, 81559 * 1024 * 1024)
    assert (second.temp, second.power, second.sm_clock) == (71.0, 412.3, 1755)
    source.close()


def test_nvml_sampling_keeps_handles_and_never_lists_processes():
    fake_pynvml.install(_devices(4))
    source = NvmlSource(module=fake_pynvml)
    for _ in range(5):
        source.sample()
    calls = fake_pynvml.state.calls
    assert calls["nvmlInit"] == 1
    assert calls["nvmlDeviceGetHandleByIndex"] == 4
    assert calls["nvmlDeviceGetUtilizationRates"] == 20
    assert calls["nvmlDeviceGetComputeRunningProcesses"] == 0
    source.close()


def test_nvml_unsupported_power_is_none_not_stale():
    fake_pynvml.install(_devices(1, power_supported=False))
    source = NvmlSource(module=fake_pynvml)
    (gpu,) = source.sample()
    assert gpu.power is None and gpu.util == 0.0 and not gpu.stale
    source.close()


def test_a_hanging_gpu_is_stale_without_stalling_the_others_or_piling_up_calls():
    hang = threading.Event()
    devices = _devices(3)
    devices[1].hang = hang
    devices[2].utilization = 55
    fake_pynvml.install(devices)
    source = NvmlSource(module=fake_pynvml)
    try:
        started = time.monotonic()
        samples = source.sample(deadline_s=0.2)
        assert time.monotonic() - started < 1.0
        assert [s.stale for s in samples] == [False, True, False]
        assert samples[1].util is None and samples[2].util == 55.0
        samples = source.sample(deadline_s=0.2)  # still stuck: not asked again
        assert [s.stale for s in samples] == [False, True, False]
        assert fake_pynvml.state.calls["nvmlDeviceGetUtilizationRates"] == 5
    finally:
        hang.set()
    time.sleep(0.05)
    devices[1].hang = None
    assert [s.stale for s in source.sample(deadline_s=1)] == [False, False, False]
    source.close()


# --- simulated ----------------------------------------------------------------


def _settle(source, activity, ticks=10):
    for _ in range(ticks):
        samples = source.sample(activity=activity)
    return samples


def test_simulated_gpus_idle_near_zero_and_busy_ones_show_load():
    source = SimulatedSource(host_name="lab", model_name="NVIDIA A100-SXM4-80GB", count=3)
    idle, busy, quiet = _settle(source, {1: 1.0, 2: 0.0})
    assert idle.util == 0.0 and idle.mem_used == 0
    assert busy.util > 85 and busy.mem_used > 0.5 * busy.mem_total
    assert busy.power > 300 and busy.temp > idle.temp and busy.sm_clock > idle.sm_clock
    assert quiet.util < 5  # held but its container does nothing: idle, memory allocated
    assert quiet.mem_used > 0


def test_simulated_load_falls_when_the_work_stops():
    source = SimulatedSource(host_name="lab", count=1)
    assert _settle(source, {0: 1.0})[0].util > 85
    assert _settle(source, {0: 0.0})[0].util < 5


def test_simulated_unknown_activity_walks_but_is_never_idle_and_is_seeded_per_gpu():
    def run():
        source = SimulatedSource(host_name="lab", count=2)
        return [[s.util for s in source.sample(activity={0: None, 1: None})] for _ in range(60)]

    series = run()
    assert series == run()  # deterministic
    assert min(min(tick) for tick in series[10:]) >= 15
    assert [tick[0] for tick in series] != [tick[1] for tick in series]


# --- holdings and activity ------------------------------------------------------


def test_holdings_survive_a_restart_and_the_newest_start_wins_a_gpu(tmp_path):
    path = tmp_path / "holdings.json"
    holdings = Holdings(path)
    holdings.track(Holding(IID_A, (0, 1), token="secret"))
    holdings.track(Holding(IID_B, (1,)))
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    again = Holdings(path)
    assert {i: h.instance_id for i, h in again.by_gpu().items()} == {0: IID_A, 1: IID_B}


def test_heartbeat_prunes_only_holdings_listed_before_they_started(tmp_path):
    holdings = Holdings()
    listed_at = time.monotonic()
    holdings.track(Holding(IID_A, (0,)))  # started after the runtime was listed
    holdings.keep_only(set(), listed_at=listed_at)
    assert [h.instance_id for h in holdings.snapshot()] == [IID_A]
    holdings.keep_only(set(), listed_at=time.monotonic())
    assert holdings.snapshot() == []


def test_cpu_meter_sees_a_busy_process_tree():
    # A shell whose child spins: the tree's CPU time is what counts.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys; subprocess.run([sys.executable, '-c', 'while True: pass'])",
        ],
        start_new_session=True,  # its own process group, so the spinning child goes with it
    )
    try:
        meter = CpuMeter()
        holding = Holding(IID_A, (0,), container_id=f"pid:{proc.pid}")
        assert meter.cores_used([holding], time.monotonic()) == {IID_A: None}
        time.sleep(0.6)
        cores = meter.cores_used([holding], time.monotonic())[IID_A]
        assert cores is not None and cores > 0.3
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_cpu_meter_reads_a_docker_cgroup_and_says_unknown_otherwise(tmp_path):
    scope = tmp_path / "system.slice" / "docker-abc.scope"
    scope.mkdir(parents=True)
    (scope / "cpu.stat").write_text("usage_usec 1000000\nuser_usec 900000\n")
    meter = CpuMeter(cgroup=str(tmp_path))
    holdings = [Holding(IID_A, (0,), container_id="abc"), Holding(IID_B, (1,), container_id="zzz")]
    meter.cores_used(holdings, 100.0)
    (scope / "cpu.stat").write_text("usage_usec 3000000\n")
    assert meter.cores_used(holdings, 102.0) == {IID_A: 1.0, IID_B: None}


def test_kernel_activity_from_jupyterlab_kernels():
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    old = (now - timedelta(minutes=10)).isoformat().replace("+00:00", "Z")
    recent = (now - timedelta(seconds=20)).isoformat().replace("+00:00", "Z")
    assert not kernels_active([], now=now)
    assert not kernels_active([{"execution_state": "idle", "last_activity": old}], now=now)
    assert kernels_active([{"execution_state": "busy", "last_activity": old}], now=now)
    assert kernels_active([{"execution_state": "idle", "last_activity": recent}], now=now)


def test_kernel_probe_asks_each_instance_with_its_token():
    holdings = Holdings()
    holdings.track(Holding(IID_A, (0,), address="127.0.0.1", port=9001, token="t-a"))
    holdings.track(Holding(IID_B, (1,), address="127.0.0.1", port=9002, token="t-b"))
    asked = []

    def fetch(address, port, token):
        asked.append((port, token))
        return [{"execution_state": "busy"}] if port == 9001 else None

    probe = KernelProbe(holdings, fetch=fetch)
    probe.probe_once()
    assert sorted(asked) == [(9001, "t-a"), (9002, "t-b")]
    assert probe.active() == {IID_A: True, IID_B: None}


# --- the tick ---------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.messages, self.batches = [], []

    def publish(self, message):
        self.messages.append(message)

    def send_batch(self, minutes, simulated):
        self.batches.append((minutes, simulated))


def _sampler(source, holdings, recorder, **kwargs):
    return Sampler(
        host_name="node1",
        source=source,
        holdings=holdings,
        publish=recorder.publish,
        send_batch=recorder.send_batch,
        **kwargs,
    )


def test_one_message_per_host_per_tick_stamped_with_the_holding_instance():
    holdings = Holdings()
    holdings.track(Holding(IID_A, (0,)))
    recorder = Recorder()
    sampler = _sampler(SimulatedSource(host_name="node1", count=3), holdings, recorder)
    sampler.tick(now=1000.0, now_mono=1.0)
    sampler.tick(now=1001.0, now_mono=2.0)
    assert len(recorder.messages) == 2
    message = recorder.messages[0]
    assert (message["type"], message["host"], message["simulated"]) == (
        "telemetry.sample",
        "node1",
        True,
    )
    assert [(g["index"], g["instance"]) for g in message["gpus"]] == [
        (0, IID_A),
        (1, None),
        (2, None),
    ]
    assert set(message["gpus"][0]) >= {"util", "mem_used", "mem_total", "temp", "power", "sm_clock"}


def test_nvml_hosts_say_they_are_not_simulated():
    fake_pynvml.install(_devices(1))
    recorder = Recorder()
    source = NvmlSource(module=fake_pynvml)
    _sampler(source, Holdings(), recorder).tick(now=1000.0, now_mono=1.0)
    assert recorder.messages[0]["simulated"] is False
    source.close()


def test_a_failing_publish_does_not_stop_the_rollups():
    recorder = Recorder()

    def broken(message):
        raise ConnectionError("redis is down")

    sampler = Sampler(
        host_name="node1",
        source=SimulatedSource(host_name="node1", count=1),
        holdings=Holdings(),
        publish=broken,
        send_batch=recorder.send_batch,
        batch_interval=60,
    )
    for second in range(130):
        sampler.tick(now=6000.0 + second, now_mono=float(second))
    assert sampler.failures == 130
    assert [row["minute"] for row in recorder.batches[0][0]] == [6000]


def test_minute_batches_carry_averages_and_maxima_and_are_sent_once():
    recorder = Recorder()
    holdings = Holdings()
    holdings.track(Holding(IID_A, (0,)))
    sampler = _sampler(
        SimulatedSource(host_name="node1", count=2),
        holdings,
        recorder,
        batch_interval=60,
        kernels=lambda: {IID_A: True},
    )
    start = 6000.0  # a minute boundary
    for second in range(185):
        sampler.tick(now=start + second, now_mono=float(second))
    sent = [row for batch, _ in recorder.batches for row in batch]
    assert sorted({(row["minute"], row["gpu"]) for row in sent}) == [
        (6000, 0),
        (6000, 1),
        (6060, 0),
        (6060, 1),
        (6120, 0),
        (6120, 1),
    ]
    assert len(sent) == 6  # nothing twice
    row = next(r for r in sent if (r["minute"], r["gpu"]) == (6060, 0))
    assert row["n"] == 60 and row["instance"] == IID_A and row["kernel_active"] is True
    assert row["util_max"] >= row["util_avg"]
    idle = next(r for r in sent if (r["minute"], r["gpu"]) == (6060, 1))
    assert idle["instance"] is None and idle["util_avg"] == 0.0 and idle["kernel_active"] is None
    assert all(simulated for _, simulated in recorder.batches)


def test_unsent_batches_are_kept_and_sent_later():
    sent = []
    fail = [True]

    def send_batch(minutes, simulated):
        if fail[0]:
            raise ConnectionError("broker down")
        sent.append(list(minutes))

    sampler = Sampler(
        host_name="node1",
        source=SimulatedSource(host_name="node1", count=1),
        holdings=Holdings(),
        publish=None,
        send_batch=send_batch,
        batch_interval=60,
    )
    for second in range(125):
        sampler.tick(now=6000.0 + second, now_mono=float(second))
    fail[0] = False
    for second in range(125, 185):
        sampler.tick(now=6000.0 + second, now_mono=float(second))
    assert [[row["minute"] for row in batch] for batch in sent] == [[6000, 6060, 6120]]


def test_stale_gpus_do_not_count_in_the_minute():
    aggregator = MinuteAggregator()
    aggregator.add(60.0, [{"index": 0, "util": 50.0, "mem_used": 1, "mem_total": 2}], {})
    aggregator.add(61.0, [{"index": 0, "util": None, "stale": True}], {})
    (row,) = aggregator.pop_complete(120.0)
    assert (row["n"], row["util_avg"]) == (1, 50.0)


def test_sampler_thread_ticks_about_once_a_second_and_stops():
    recorder = Recorder()
    sampler = _sampler(SimulatedSource(host_name="node1", count=1), Holdings(), recorder)
    thread = SamplerThread(sampler, interval=0.05)
    thread.start()
    time.sleep(0.5)
    thread.stopped.set()
    thread.join(2)
    assert not thread.is_alive()
    assert 5 <= len(recorder.messages) <= 12


# --- configuration ------------------------------------------------------------------


def test_telemetry_url_follows_a_redis_broker():
    assert telemetry_url_from_broker("redis+socket:///v/redis.sock") == "unix:///v/redis.sock"
    assert (  # the same database as the broker's (settings.celery_url, the other way)
        telemetry_url_from_broker("redis+socket:///v/redis.sock?virtual_host=3")
        == "unix:///v/redis.sock?db=3"
    )
    assert telemetry_url_from_broker("redis://h:6379/0") == "redis://h:6379/0"
    assert telemetry_url_from_broker("amqp://guest@h//") is None
    base = {
        "GPURENTAL_BROKER_URL": "amqp://h//",
        "GPURENTAL_HOST_NAME": "n",
        "GPURENTAL_HOST_TOKEN": "t",
    }
    assert AgentConfig.from_env(base).live_telemetry_url is None
    config = AgentConfig.from_env({**base, "GPURENTAL_TELEMETRY_URL": "redis://r:6379/1"})
    assert config.live_telemetry_url == "redis://r:6379/1"
    with pytest.raises(ConfigError, match="GPURENTAL_SAMPLE_INTERVAL"):
        AgentConfig.from_env({**base, "GPURENTAL_SAMPLE_INTERVAL": "0"})
    assert AgentConfig.from_env(base).telemetry_layer == "core"
    with pytest.raises(ConfigError, match="CHANNEL_LAYER_BACKEND"):
        AgentConfig.from_env({**base, "GPURENTAL_TELEMETRY_LAYER": "kafka"})


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc")
def test_cpu_meter_says_unknown_for_a_process_that_is_gone():
    assert CpuMeter().cpu_seconds("pid:999999999") is None
