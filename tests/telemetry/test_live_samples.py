"""Live GPU samples over websockets: owners see only their own GPUs, staff see hosts and
the fleet, everyone else is turned away with a clear close code."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from gpurental.rentals.services import lifecycle as lc
from gpurental.routing import websocket_urlpatterns
from gpurental.telemetry.consumers import (
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
)
from gpurental.telemetry.feed import FleetFeed, fleet_feed
from tests.telemetry.conftest import host_message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backend]


def _communicator(user, path):
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    return communicator


async def _drain_snapshot(communicator):
    first = await communicator.receive_json_from(timeout=5)
    assert first["type"] == "snapshot"
    return first


async def _telemetry(communicator, timeout=3):
    """The next telemetry message (skipping other live events)."""
    while True:
        message = await communicator.receive_json_from(timeout=timeout)
        if message["type"] in ("telemetry", "fleet"):
            return message


async def _fleet_frame_with(communicator, host):
    """The next fleet frame that carries ``host``."""
    while True:
        frame = await _telemetry(communicator)
        if host in frame["hosts"]:
            return frame


def _refused(user, path):
    async def attempt():
        communicator = _communicator(user, path)
        connected, code = await communicator.connect()
        if not connected:
            await communicator.wait(timeout=0.5)  # finish the refused consumer in this loop
        else:
            await communicator.disconnect()
        return connected, code

    return async_to_sync(attempt)()


def test_owners_see_only_their_own_gpu_and_never_the_neighbours(
    alice, bob, run_instance, publisher
):
    mine, theirs = run_instance(alice), run_instance(bob)
    (a_gpu,), (b_gpu,) = mine.gpu_indices, theirs.gpu_indices
    assert a_gpu != b_gpu
    message = host_message(
        (a_gpu, str(mine.pk), 11.0), (b_gpu, str(theirs.pk), 99.0), (3, None, 50.0)
    )

    async def session():
        alice_ws = _communicator(alice, f"/ws/instances/{mine.pk}/")
        bob_ws = _communicator(bob, f"/ws/instances/{theirs.pk}/")
        assert (await alice_ws.connect())[0] and (await bob_ws.connect())[0]
        snapshot = await _drain_snapshot(alice_ws)
        assert snapshot["telemetry"] == {"host": "node1", "gpus": [a_gpu], "simulated": True}
        await _drain_snapshot(bob_ws)
        await sync_to_async(publisher.publish, thread_sensitive=False)(message)
        seen_by_alice = await _telemetry(alice_ws)
        seen_by_bob = await _telemetry(bob_ws)
        await alice_ws.disconnect()
        await bob_ws.disconnect()
        return seen_by_alice, seen_by_bob

    seen_by_alice, seen_by_bob = async_to_sync(session)()
    assert [(g["index"], g["util"]) for g in seen_by_alice["gpus"]] == [(a_gpu, 11.0)]
    assert [(g["index"], g["util"]) for g in seen_by_bob["gpus"]] == [(b_gpu, 99.0)]
    assert seen_by_alice["simulated"] is True
    assert "instance" not in seen_by_alice["gpus"][0]  # no other tenant's ids either


def test_a_chart_opened_later_starts_with_the_recent_samples_of_its_own_gpus_only(
    alice, bob, run_instance, publisher
):
    mine, theirs = run_instance(alice), run_instance(bob)
    (a_gpu,), (b_gpu,) = mine.gpu_indices, theirs.gpu_indices
    for ts, util in ((2000.0, 21.0), (2001.0, 22.0)):
        publisher.publish(
            host_message((a_gpu, str(mine.pk), util), (b_gpu, str(theirs.pk), 90.0), ts=ts)
        )

    async def session():
        ws = _communicator(alice, f"/ws/instances/{mine.pk}/")
        assert (await ws.connect())[0]
        await _drain_snapshot(ws)
        backfill = await ws.receive_json_from(timeout=3)
        await ws.disconnect()
        return backfill

    backfill = async_to_sync(session)()
    assert backfill["type"] == "telemetry_backfill"
    seen = [(s["ts"], [(g["index"], g["util"]) for g in s["gpus"]]) for s in backfill["samples"]]
    assert seen == [(2000.0, [(a_gpu, 21.0)]), (2001.0, [(a_gpu, 22.0)])]
    assert all(s["simulated"] for s in backfill["samples"])


def test_bob_cannot_watch_alices_gpus(alice, bob, run_instance):
    mine = run_instance(alice)
    assert _refused(bob, f"/ws/instances/{mine.pk}/") == (False, CLOSE_NOT_FOUND)
    assert _refused(bob, "/ws/hosts/node1/") == (False, CLOSE_FORBIDDEN)
    assert _refused(bob, "/ws/fleet/") == (False, CLOSE_FORBIDDEN)
    assert _refused(AnonymousUser(), "/ws/fleet/") == (False, CLOSE_UNAUTHENTICATED)
    assert _refused(AnonymousUser(), "/ws/hosts/node1/") == (False, CLOSE_UNAUTHENTICATED)


def test_a_gpu_the_agent_stamps_for_someone_else_is_not_forwarded(alice, run_instance, publisher):
    """Both checks must pass: the control plane's allocation and the agent's stamp."""
    mine = run_instance(alice)
    (gpu,) = mine.gpu_indices

    async def session():
        ws = _communicator(alice, f"/ws/instances/{mine.pk}/")
        await ws.connect()
        await _drain_snapshot(ws)
        stamped_elsewhere = host_message((gpu, "00000000-0000-4000-8000-000000000000", 70.0))
        await sync_to_async(publisher.publish, thread_sensitive=False)(stamped_elsewhere)
        unstamped = host_message((gpu, None, 71.0))
        await sync_to_async(publisher.publish, thread_sensitive=False)(unstamped)
        nothing = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return nothing

    assert async_to_sync(session)()


def test_a_stopped_instance_stops_streaming_its_old_gpu(alice, run_instance, publisher):
    mine = run_instance(alice)
    (gpu,) = mine.gpu_indices

    async def session():
        ws = _communicator(alice, f"/ws/instances/{mine.pk}/")
        await ws.connect()
        await _drain_snapshot(ws)

        def stop_and_finish():
            lc.instance_stop(instance=mine, actor=alice)
            lc.instance_report_stopped(instance_id=str(mine.pk))

        await database_sync_to_async(stop_and_finish)()
        events = [await ws.receive_json_from(timeout=5) for _ in range(2)]
        assert [e["status"] for e in events] == ["stopping", "stopped"]
        # Even a sample still stamped with this instance is not shown once the GPU is released.
        await sync_to_async(publisher.publish, thread_sensitive=False)(
            host_message((gpu, str(mine.pk), 42.0))
        )
        nothing = await ws.receive_nothing(timeout=0.5)
        await ws.disconnect()
        return nothing

    assert async_to_sync(session)()


def test_staff_watch_a_whole_host(carol, alice, run_instance, publisher):
    mine = run_instance(alice)

    async def session():
        ws = _communicator(carol, "/ws/hosts/node1/")
        assert (await ws.connect())[0]
        await _drain_snapshot(ws)
        await sync_to_async(publisher.publish, thread_sensitive=False)(
            host_message((0, str(mine.pk), 5.0), (1, None, 6.0))
        )
        message = await _telemetry(ws)
        await ws.disconnect()
        return message

    message = async_to_sync(session)()
    assert message["host"] == "node1"
    assert [(g["index"], g["util"]) for g in message["gpus"]] == [(0, 5.0), (1, 6.0)]
    assert _refused(carol, "/ws/hosts/no-such-host/") == (False, CLOSE_NOT_FOUND)


def test_staff_fleet_stream_batches_the_newest_sample_of_every_host(
    carol, a100, make_host, node1, publisher, monkeypatch
):
    make_host("node2", a100, count=2)
    monkeypatch.setattr(FleetFeed, "interval", 0.2)
    from gpurental.agent.sampler import ChannelPublisher

    async def session():
        ws = _communicator(carol, "/ws/fleet/")
        assert (await ws.connect())[0]
        snapshot = await _drain_snapshot(ws)
        other = ChannelPublisher(publisher.url, "node2", timeout_s=2, layer=publisher.layer_kind)
        send = sync_to_async(publisher.publish, thread_sensitive=False)
        await send(host_message((0, None, 10.0), ts=1.0))
        await send(host_message((0, None, 20.0), ts=2.0))  # the newer one wins
        await sync_to_async(other.publish, thread_sensitive=False)(
            host_message((1, None, 30.0), host="node2", ts=2.0)
        )
        await sync_to_async(other.close, thread_sensitive=False)()
        batch = {}
        while set(batch) != {"node1", "node2"}:
            batch.update((await _telemetry(ws))["hosts"])
        await ws.disconnect()
        return snapshot, batch

    snapshot, batch = async_to_sync(session)()
    assert snapshot["hosts"] == ["node1", "node2"]
    assert batch["node1"]["gpus"][0]["util"] == 20.0
    assert batch["node2"]["gpus"][0] == {
        "index": 1,
        "util": 30.0,
        "mem_used": 3_000_000_000,
        "mem_total": 85_899_345_920,
        "stale": False,
    }


def test_fleet_viewers_of_one_process_share_one_reader_and_one_frame(
    carol, node1, publisher, monkeypatch
):
    monkeypatch.setattr(FleetFeed, "interval", 0.2)

    async def session():
        first, second = _communicator(carol, "/ws/fleet/"), _communicator(carol, "/ws/fleet/")
        assert (await first.connect())[0] and (await second.connect())[0]
        await _drain_snapshot(first)
        await _drain_snapshot(second)
        feed = fleet_feed()
        shared = (len(feed.viewers), feed.task is not None)
        await sync_to_async(publisher.publish, thread_sensitive=False)(
            host_message((0, None, 42.0), ts=3.0)
        )
        frames = [await _fleet_frame_with(first, "node1"), await _fleet_frame_with(second, "node1")]
        await first.disconnect()
        still_running = feed.task is not None
        await second.disconnect()
        return shared, frames, still_running, feed.task

    shared, frames, still_running, task_after = async_to_sync(session)()
    assert shared == (2, True)
    assert frames[0] == frames[1] and frames[0]["hosts"]["node1"]["gpus"][0]["util"] == 42.0
    assert still_running and task_after is None  # the reader stops with the last viewer


def test_a_host_whose_sampler_goes_quiet_is_greyed_out_once(carol, node1, publisher, monkeypatch):
    import redis

    from gpurental.agent.sampler import latest_key

    monkeypatch.setattr(FleetFeed, "interval", 0.2)

    async def session():
        ws = _communicator(carol, "/ws/fleet/")
        assert (await ws.connect())[0]
        await _drain_snapshot(ws)
        await sync_to_async(publisher.publish, thread_sensitive=False)(
            host_message((0, None, 42.0), (1, None, 7.0), ts=5.0)
        )
        live = await _fleet_frame_with(ws, "node1")
        redis.Redis.from_url(publisher.url).delete(latest_key("node1"))  # as if it expired
        quiet = await _fleet_frame_with(ws, "node1")
        await asyncio.sleep(3 * FleetFeed.interval)  # frames go by without node1...
        await sync_to_async(publisher.publish, thread_sensitive=False)(
            host_message((0, None, 50.0), (1, None, 8.0), ts=6.0)
        )
        back = await _fleet_frame_with(ws, "node1")  # ...so the next with it is live again
        await ws.disconnect()
        return live, quiet, back

    live, quiet, back = async_to_sync(session)()
    assert back["hosts"]["node1"]["ts"] == 6.0
    assert [g["util"] for g in live["hosts"]["node1"]["gpus"]] == [42.0, 7.0]
    assert quiet["hosts"]["node1"]["gpus"] == [
        {"index": 0, "util": None, "stale": True},
        {"index": 1, "util": None, "stale": True},
    ]


def test_the_idle_warning_is_published_live_for_the_page_banner(alice, run_instance):
    from datetime import timedelta

    from django.utils import timezone

    from gpurental.telemetry.services import instance_idle_check, rollups_record

    now = timezone.now().replace(second=0, microsecond=0)
    mine = run_instance(alice, now=now - timedelta(minutes=10))
    mine.idle_stop_minutes = 10
    mine.save(update_fields=["idle_stop_minutes"])
    rows = [
        {
            "minute": int((now - m * timedelta(minutes=1)).timestamp()),
            "gpu": gpu,
            "n": 60,
            "util_avg": 0.0,
            "util_max": 0.0,
            "mem_avg": 0,
            "mem_max": 0,
            "mem_total": 1,
        }
        for m in range(1, 7)
        for gpu in mine.gpu_indices
    ]

    async def session():
        ws = _communicator(alice, f"/ws/instances/{mine.pk}/")
        await ws.connect()
        await _drain_snapshot(ws)

        def warn():
            rollups_record(host=mine.host, minutes=rows, simulated=True, now=now)
            return instance_idle_check(instance=mine, now=now)

        outcome = await database_sync_to_async(warn)()
        assert outcome == "warned", outcome
        event = await ws.receive_json_from(timeout=5)
        await ws.disconnect()
        again = _communicator(alice, f"/ws/instances/{mine.pk}/")
        await again.connect()
        snapshot = await _drain_snapshot(again)
        await again.disconnect()
        return outcome, event, snapshot

    outcome, event, snapshot = async_to_sync(session)()
    assert outcome == "warned"
    assert (event["type"], event["kind"], event["step"]) == ("event", "notice", "idle_warning")
    assert "will be stopped" in event["reason"] and event["stop_at"]
    assert snapshot["events"][-1]["step"] == "idle_warning" and snapshot["events"][-1]["stop_at"]
