"""The database itself refuses double booking of a GPU."""

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, transaction

from gpurental.rentals.models import Allocation
from tests.factories import AllocationFactory, GPUFactory, InstanceFactory, period

pytestmark = pytest.mark.backend  # PostgreSQL's exclusion and check constraints

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _allocate(gpu, start, hours):
    return Allocation.objects.create(
        gpu=gpu, instance=InstanceFactory(), period=period(start, hours)
    )


@pytest.mark.django_db
def test_overlapping_allocations_of_one_gpu_are_refused():
    gpu = GPUFactory()
    _allocate(gpu, T0, 2)
    with (
        pytest.raises(IntegrityError, match="allocation_no_gpu_double_booking"),
        transaction.atomic(),
    ):
        _allocate(gpu, T0.replace(hour=13), 2)
    assert Allocation.objects.filter(gpu=gpu).count() == 1


@pytest.mark.django_db
def test_back_to_back_allocations_of_one_gpu_are_accepted():
    gpu = GPUFactory()
    _allocate(gpu, T0, 1)
    _allocate(gpu, T0.replace(hour=13), 1)  # [12:00, 13:00) then [13:00, 14:00)
    assert Allocation.objects.filter(gpu=gpu).count() == 2


@pytest.mark.django_db
def test_open_ended_allocation_blocks_every_later_start():
    gpu = GPUFactory()
    _allocate(gpu, T0, None)  # an on-demand instance holds [start, ∞) while it runs
    with pytest.raises(IntegrityError), transaction.atomic():
        _allocate(gpu, datetime(2027, 1, 1, tzinfo=UTC), 1)


@pytest.mark.django_db
def test_same_period_on_two_different_gpus_is_fine():
    first, second = GPUFactory(), GPUFactory()
    _allocate(first, T0, 2)
    _allocate(second, T0, 2)
    assert Allocation.objects.count() == 2


@pytest.mark.django_db
def test_allocation_needs_an_instance_or_a_reservation():
    with pytest.raises(IntegrityError, match="allocation_has_holder"), transaction.atomic():
        AllocationFactory(instance=None)


@pytest.mark.django_db
def test_allocation_period_must_have_a_start():
    with pytest.raises(IntegrityError, match="allocation_period_starts"), transaction.atomic():
        AllocationFactory(period=period(None, None))
