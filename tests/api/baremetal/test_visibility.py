"""Dedicated hosts keep the rules every resource keeps (tests/api/resources.py): leases
are their tenant's own; the dedicated plans are the same for everyone."""

from datetime import timedelta

from django.utils import timezone

from gpurental.baremetal.services import lease_book
from tests.api.resources import OwnedResourceRules, PublicResourceRules
from tests.baremetal.conftest import h100, leasable, whole_host_plan  # noqa: F401 (fixtures)


class TestLeaseRules(OwnedResourceRules):
    list_url = "/api/v1/leases/"

    def make(self, request, owner):
        plan = request.getfixturevalue("whole_host_plan")
        request.getfixturevalue("leasable")(f"leased-{owner.pk}")  # a whole host each
        return lease_book(user=owner, plan=plan, end=timezone.now() + timedelta(hours=2))


class TestDedicatedPlanRules(PublicResourceRules):
    list_url = "/api/v1/dedicated-plans/"
    unknown_id = "no-such-plan"

    def sample(self, request):
        return request.getfixturevalue("whole_host_plan").slug
