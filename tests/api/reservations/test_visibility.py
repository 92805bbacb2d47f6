"""Reservations keep the rules every resource keeps (tests/api/resources.py)."""

from datetime import timedelta

from django.utils import timezone

from gpurental.rentals.services.reservations import reservation_book
from tests.api.resources import OwnedResourceRules


class TestReservationRules(OwnedResourceRules):
    list_url = "/api/v1/reservations/"

    def make(self, request, owner):
        a100, image = request.getfixturevalue("a100"), request.getfixturevalue("image")
        request.getfixturevalue("node")
        start = timezone.now().replace(second=0, microsecond=0) + timedelta(days=1)
        return reservation_book(
            user=owner,
            image=image,
            gpu_model=a100,
            gpu_count=1,
            start=start,
            end=start + timedelta(hours=4),
        )
