"""Many launches at once for more GPUs than exist: the database decides, exactly."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from gpurental.rentals.exceptions import NoCapacity
from gpurental.rentals.models import Allocation, Instance
from gpurental.rentals.services.lifecycle import instance_launch
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.backend]


def _launch_all(users, image, model, count):
    barrier = threading.Barrier(len(users))

    def one(user):
        try:
            barrier.wait()
            return instance_launch(user=user, image=image, gpu_model=model, gpu_count=count)
        except NoCapacity as exc:
            return exc
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=len(users)) as pool:
        return list(pool.map(one, users))


def _assert_no_gpu_held_twice():
    with connection.cursor() as cursor:
        cursor.execute(
            """SELECT count(*) FROM rentals_allocation a JOIN rentals_allocation b
               ON a.gpu_id = b.gpu_id AND a.id < b.id AND a.period && b.period"""
        )
        assert cursor.fetchone()[0] == 0


def test_sixteen_single_gpu_launches_for_eight_gpus(a100, make_host, image, sent):
    make_host("node1", a100, count=5)
    make_host("node2", a100, count=3)
    users = [UserFactory() for _ in range(16)]
    results = _launch_all(users, image, a100, 1)
    launched = [r for r in results if isinstance(r, Instance)]
    refused = [r for r in results if isinstance(r, NoCapacity)]
    assert len(launched) == 8 and len(refused) == 8
    assert all(str(r).startswith("no 1× A100 free on any host") for r in refused)
    assert Allocation.objects.filter(period__upper_inf=True).count() == 8
    assert Allocation.objects.values("gpu").distinct().count() == 8
    _assert_no_gpu_held_twice()
    assert len(sent) == 8  # one start command per successful launch, none for refusals


def test_concurrent_multi_gpu_launches_never_split_or_share(a100, make_host, image, sent):
    make_host("node1", a100, count=4)
    make_host("node2", a100, count=4)
    users = [UserFactory() for _ in range(8)]
    results = _launch_all(users, image, a100, 2)
    launched = [r for r in results if isinstance(r, Instance)]
    assert len(launched) == 4
    for instance in launched:
        hosts = set(
            Allocation.objects.filter(instance=instance).values_list("gpu__host", flat=True)
        )
        assert len(hosts) == 1 and Allocation.objects.filter(instance=instance).count() == 2
    _assert_no_gpu_held_twice()
