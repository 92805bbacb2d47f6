"""Instances keep the rules every resource keeps (tests/api/resources.py)."""

from gpurental.rentals.services.lifecycle import instance_launch
from tests.api.resources import OwnedResourceRules


class TestInstanceRules(OwnedResourceRules):
    list_url = "/api/v1/instances/"

    def make(self, request, owner):
        a100, image = request.getfixturevalue("a100"), request.getfixturevalue("image")
        request.getfixturevalue("node")  # free GPUs
        request.getfixturevalue("sent")  # the agent's commands, recorded
        return instance_launch(user=owner, gpu_model=a100, gpu_count=1, image=image)
