"""The REST API over 10,000 instances: latency and SQL queries per request.

    .venv/bin/python bench/api.py [--users 1000] [--instances 10000] [--requests 100]

Starts its own embedded PostgreSQL and Redis in a temp dir (never touches real data),
bulk-creates a fleet (1,000 hosts × 8 GPUs), ``--users`` customers and ``--instances``
instances across them in the states the API lists (pending, running, stopped,
terminated, failed, with their GPU allocations and transition events), of which 50
belong to one customer, alice, and a staff user, carol. Then, in this process, through
the whole Django and DRF stack (middleware, API-key authentication, scopes,
throttling in Redis, serializers: Django's test ``Client``, no HTTP socket), times:

- alice: her instance list, one instance's detail, and a launch (POST, the real
  ``instance_launch``; the start command to the agent is captured, not sent);
- carol (staff key): the list of every instance, first page and pages deep in it
  (``?limit=50&offset=…``, the API's pagination).

Prints p50/p99 per request kind and the SQL queries each made (Django's
``CaptureQueriesContext``), and checks every answer's status and size. Goal: API p50
under 30 ms with 10,000 instances.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import h100_catalog, percentile, setup_django  # noqa: E402

ALICE_INSTANCES = 50
# (status, share): what a fleet's instance table looks like after a while.
STATES = (
    ("running", 30),
    ("pending", 2),
    ("provisioning", 2),
    ("stopped", 25),
    ("terminated", 36),
    ("failed", 5),
)
HOLDING = {"running", "pending", "provisioning"}


def load(users: int, instances: int, hosts: int) -> dict:
    """Fleet, customers, instances, allocations and events, bulk-created."""
    from django.db import connection
    from django.utils import timezone

    from gpurental.accounts.models import User
    from gpurental.accounts.services import api_key_create
    from gpurental.billing.services import credit_add
    from gpurental.fleet.models import GPU, Host, HostStatus
    from gpurental.rentals.models import Allocation, Instance, InstanceEvent

    started = time.perf_counter()
    model, plans, image = h100_catalog()
    plan = plans[1]
    now = timezone.now()
    from gpurental.fleet.hostlink import seal_root

    sealed = seal_root(uuid.uuid4().hex)  # one root for all: nothing here checks a key
    fleet = Host.objects.bulk_create(
        Host(
            name=f"node{n:04d}",
            address=f"10.{n // 250}.{n % 250}.1",
            status=HostStatus.ACTIVE,
            token_hash=uuid.uuid4().hex,
            keys_sealed=sealed,  # commands to it are signed (fleet.hostlink)
            last_heartbeat_at=now + timedelta(days=1),  # no agents beat here; launches need it
            runtime="docker",
        )
        for n in range(hosts)
    )
    gpus = GPU.objects.bulk_create(
        (
            GPU(
                host=host,
                index=i,
                uuid=f"GPU-{host.name}-{i}",
                model=model,
                memory_mb=80 * 1024,
                nvlink_peers=[j for j in range(8) if j != i],
            )
            for host in fleet
            for i in range(8)
        ),
        batch_size=5000,
    )
    customers = User.objects.bulk_create(
        User(email=f"customer{n}@example.com", password="!", full_name=f"Customer {n}")  # noqa: S106
        for n in range(users)
    )
    alice = customers[0]
    alice.email, alice.gpu_quota = "alice@example.com", 1000
    alice.save(update_fields=["email", "gpu_quota"])
    carol = User.objects.create_user(
        email="carol@example.com", password=uuid.uuid4().hex, is_staff=True
    )
    credit_add(user=alice, amount=Decimal("1000000.00"), description="bench credit")

    rng = random.Random(42)
    kinds = [status for status, share in STATES for _ in range(share)]
    owners = [alice] * ALICE_INSTANCES + [
        customers[1 + n % (users - 1)] for n in range(instances - ALICE_INSTANCES)
    ]
    free = iter(gpus[8:])  # node0000 stays whole: alice's launches land there first
    rows, held = [], []
    for n, owner in enumerate(owners):
        status = kinds[n % len(kinds)] if n >= ALICE_INSTANCES else rng.choice(kinds)
        created = now - timedelta(hours=rng.randrange(2, 24 * 60))
        gpu = next(free) if status in HOLDING else rng.choice(gpus)
        instance = Instance(
            user=owner,
            name=f"job-{n}",
            plan=plan,
            gpu_model=model,
            gpu_count=1,
            image=image,
            host_id=gpu.host_id,
            status=status,
            status_changed_at=created + timedelta(minutes=1),
            jupyter_token=uuid.uuid4().hex,
            jupyter_port=30000 + n % 20000 if status == "running" else None,
            running_since=created + timedelta(minutes=1) if status != "failed" else None,
            stopped_at=created + timedelta(hours=1)
            if status in ("stopped", "terminated")
            else None,
            created_at=created,
        )
        rows.append(instance)
        held.append((instance, gpu, status))
    Instance.objects.bulk_create(rows, batch_size=2000)
    allocations, events = [], []
    from psycopg.types.range import Range

    for instance, gpu, status in held:
        start = instance.created_at
        if status in HOLDING:
            allocations.append(Allocation(gpu=gpu, instance=instance, period=Range(start, None)))
        steps = [("pending", "launched"), ("provisioning", "pulling"), ("running", "answering")]
        if status == "failed":
            steps = [("pending", "launched"), ("failed", "the image could not start")]
        elif status in ("stopped", "terminated"):
            steps += [("stopping", "stopped by owner"), ("stopped", "stopped")]
            if status == "terminated":
                steps += [("terminating", "terminated"), ("terminated", "volume removed")]
        elif status != "running":
            steps = steps[: 1 if status == "pending" else 2]
        previous = ""
        for k, (to_status, reason) in enumerate(steps):
            events.append(
                InstanceEvent(
                    instance=instance,
                    kind=InstanceEvent.Kind.TRANSITION,
                    from_status=previous,
                    to_status=to_status,
                    reason=reason,
                    created_at=start + timedelta(seconds=k),
                )
            )
            previous = to_status
    # Closed allocations of stopped instances would not change a read: only held ones.
    Allocation.objects.bulk_create(allocations, batch_size=5000)
    InstanceEvent.objects.bulk_create(events, batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    _, alice_key = api_key_create(user=alice, name="bench")
    _, carol_key = api_key_create(user=carol, name="bench staff", scopes=["read", "staff"])
    print(
        f"  loaded {hosts:,} hosts, {users:,} customers, {len(rows):,} instances, "
        f"{len(allocations):,} allocations, {len(events):,} events "
        f"in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    return {
        "alice_key": alice_key,
        "carol_key": carol_key,
        "alice_instance": str(rows[0].pk),
        "total": len(rows),
    }


def measure(client, method: str, path: str, runs: int, expect: int, **extra) -> dict:
    """Time ``runs`` requests (after one not counted); their statuses and query counts."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    timings, queries, sizes = [], [], []
    for run in range(runs + 1):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = getattr(client, method)(path, secure=True, **extra)
            elapsed = time.perf_counter() - started
        if response.status_code != expect:
            raise AssertionError(
                f"{method.upper()} {path}: {response.status_code}, not {expect}: "
                f"{response.content[:300]!r}"
            )
        if run:  # the first warms caches (URL resolver, serializers, the plan cache)
            timings.append(elapsed)
            queries.append(len(captured))
            sizes.append(len(response.content))
    body = json.loads(response.content)
    return {"timings": timings, "queries": queries, "sizes": sizes, "body": body}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--instances", type=int, default=10000)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=100, help="of each kind")
    parser.add_argument(
        "--smoke", action="store_true", help="a small size for CI: checks it runs and is sane"
    )
    args = parser.parse_args()
    if args.smoke:
        args.users, args.instances, args.hosts, args.requests = 20, 300, 50, 10
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-"))
    from gpurental import embedded

    try:
        setup_django(work / "var", API_THROTTLE_RATE="1000000/min")
        print(
            f"API benchmark: {args.instances:,} instances across {args.users:,} customers, "
            f"{args.requests} requests of each kind, in-process (Django test Client), "
            f"{os.cpu_count()} CPUs",
            flush=True,
        )
        ids = load(args.users, args.instances, args.hosts)
        # As the web server does once started (gpurental/asgi.py): what is there by now is
        # kept out of the garbage collector's full passes.
        gc.collect()
        gc.freeze()
        from django.test import Client

        from gpurental.rentals import hostcalls

        sent: list = []
        hostcalls.app.send_task = lambda name, kwargs=None, queue=None, **o: sent.append(queue)
        alice = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {ids['alice_key']}")
        carol = Client(HTTP_HOST="localhost", HTTP_AUTHORIZATION=f"Bearer {ids['carol_key']}")
        base = "/api/v1/instances/"
        total, n = ids["total"], args.requests
        # The same deep position as a keyset page: the next link of the page before it.
        before = carol.get(f"{base}?limit=50&offset={total - 150}", secure=True).json()
        deep_cursor = before["next"].split("/api/v1/instances/", 1)[1]
        results = {
            "alice: list (50)": measure(alice, "get", base, n, 200),
            "alice: detail": measure(alice, "get", f"{base}{ids['alice_instance']}/", n, 200),
            "carol (staff): list, page 1": measure(carol, "get", f"{base}?limit=50", n, 200),
            "carol (staff): list, deep page": measure(
                carol, "get", f"{base}?limit=50&offset={total - 100}", n, 200
            ),
            "carol (staff): list, deep by cursor": measure(
                carol, "get", f"{base}{deep_cursor}", n, 200
            ),
            "carol (staff): list, 200 a page": measure(carol, "get", f"{base}?limit=200", n, 200),
            "alice: launch": measure(
                alice,
                "post",
                base,
                n,
                201,
                data={"gpu_model": "H100", "gpu_count": 1, "image": "jupyter"},
                content_type="application/json",
            ),
        }
        alice_page = results["alice: list (50)"]["body"]
        staff_page = results["carol (staff): list, page 1"]["body"]
        # Sane, not fast: every answer had its status (checked above) and the right size.
        checks = [
            (alice_page["count"] == ALICE_INSTANCES, "alice's list counts her 50 instances"),
            (len(alice_page["results"]) == ALICE_INSTANCES, "alice's list shows them"),
            (staff_page["count"] == total, "the staff list counts every instance"),
            (len(staff_page["results"]) == 50, "a staff page holds 50"),
            (
                [i["id"] for i in results["carol (staff): list, deep by cursor"]["body"]["results"]]
                == [i["id"] for i in results["carol (staff): list, deep page"]["body"]["results"]],
                "the cursor page is the offset page at the same position",
            ),
            (len(results["carol (staff): list, 200 a page"]["body"]["results"]) == 200, "200"),
            (len(sent) == n + 1, "one start command per launch"),
            (bool(results["alice: detail"]["body"]["events"]), "the detail shows events"),
        ]
    finally:
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"  {'':34}{'p50 ms':>9}{'p99 ms':>9}{'queries':>9}{'KiB':>7}")
    for name, result in results.items():
        timings, queries = result["timings"], result["queries"]
        spread = (
            f"{min(queries)}" if min(queries) == max(queries) else f"{min(queries)}–{max(queries)}"
        )
        print(
            f"  {name:34}{percentile(timings, 0.5) * 1000:9.1f}{percentile(timings, 0.99) * 1000:9.1f}"
            f"{spread:>9}{statistics_mean(result['sizes']) / 1024:7.1f}"
        )
    print()
    print("  goal: API p50 under 30 ms with 10,000 instances (a figure, not a check)")
    failed = [what for ok, what in checks if not ok]
    for what in failed:
        print(f"  not sane: {what}")
    return 1 if failed else 0


def statistics_mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


if __name__ == "__main__":
    sys.exit(main())
