"""The catalog keeps the rules every resource keeps (tests/api/resources.py): it is the
same for every customer, and only for customers."""

from tests.api.resources import PublicResourceRules


class TestGPUModelRules(PublicResourceRules):
    list_url = "/api/v1/gpu-models/"
    unknown_id = "no-such-gpu"

    def sample(self, request):
        return request.getfixturevalue("a100").slug


class TestPlanRules(PublicResourceRules):
    list_url = "/api/v1/plans/"
    unknown_id = "no-such-plan"

    def sample(self, request):
        return request.getfixturevalue("a100").plans.get(gpu_count=1).slug


class TestImageRules(PublicResourceRules):
    list_url = "/api/v1/images/"
    unknown_id = "no-such-image"

    def sample(self, request):
        return request.getfixturevalue("image").slug
