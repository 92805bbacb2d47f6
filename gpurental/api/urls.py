from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import DefaultRouter

from gpurental.api.account import urls as account
from gpurental.api.baremetal import urls as baremetal
from gpurental.api.billing import urls as billing
from gpurental.api.catalog import urls as catalog
from gpurental.api.errors import not_found
from gpurental.api.groups import urls as groups
from gpurental.api.instances import urls as instances
from gpurental.api.notifications import urls as notifications
from gpurental.api.payments import urls as payments
from gpurental.api.registries import urls as registries
from gpurental.api.reservations import urls as reservations
from gpurental.api.savedimages import urls as savedimages
from gpurental.api.sshkeys import urls as sshkeys
from gpurental.api.teams import urls as teams
from gpurental.api.volumes import urls as volumes

# In this order: the API root lists the resources, and the schema their paths, as here.
RESOURCES = [
    catalog,
    instances,
    account,
    sshkeys,
    registries,
    savedimages,
    volumes,
    reservations,
    billing,
    groups,
    notifications,
    payments,
    baremetal,
    teams,
]

router = DefaultRouter()
router.include_format_suffixes = False  # JSON only: no /instances.json variants
for resource in RESOURCES:
    router.registry.extend(resource.router.registry)

v1 = [
    *(pattern for resource in RESOURCES for pattern in resource.urlpatterns),
    *router.urls,
]

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script as a file: no inline script (CSP).
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("v1/", include((v1, "api"), namespace="api")),
    # Last: anything else under /api/ is a JSON 404 in the API's error shape.
    re_path(r"^[\s\S]*$", not_found, name="api-not-found"),  # newlines too
]
