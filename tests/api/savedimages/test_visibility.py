"""Saved images keep the rules every resource keeps (tests/api/resources.py)."""

from gpurental.images.models import SavedImage
from tests.api.resources import OwnedResourceRules
from tests.factories import ImageTemplateFactory


class TestSavedImageRules(OwnedResourceRules):
    list_url = "/api/v1/saved-images/"

    def make(self, request, owner):
        return SavedImage.objects.create(
            account=owner,
            name="env",
            reference=f"127.0.0.1:5999/a{owner.pk}/env:1",
            template=ImageTemplateFactory(),
        )
