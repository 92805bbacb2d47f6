"""The agent's network measurement: Debian's iperf3 against a real ``iperf3 -s``."""

import socket

import pytest

from gpurental.agent.acceptance import iperf3_measure, last_json_line

pytestmark = pytest.mark.slow


def test_iperf3_measures_throughput_and_round_trip(iperf3_server):
    figures = iperf3_measure(address="127.0.0.1", port=iperf3_server, seconds=1)
    assert "error" not in figures, figures
    assert figures["throughput_gbps"] > 0
    assert figures["latency_ms"] is not None and figures["latency_ms"] >= 0


def test_iperf3_without_a_server_says_so():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    figures = iperf3_measure(address="127.0.0.1", port=port, seconds=1)
    assert "error" in figures and "iperf3" in figures["error"]


def test_iperf3_missing_on_the_host_is_named():
    figures = iperf3_measure(address="127.0.0.1", port=5201, seconds=1, binary="no-such-iperf3")
    assert figures == {"error": "iperf3 is not installed on this host (apt-get install -y iperf3)"}


def test_the_probes_result_is_its_last_json_line():
    assert last_json_line('warning: x\n{"device": "cpu"}\n') == {"device": "cpu"}
    assert last_json_line("Traceback ...\nKeyError\n") is None
