"""ASGI entry point for Daphne: HTTP through Django, websockets through Channels."""

import gc
import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpurental.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402 - needs Django set up first
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from gpurental.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Static files are served by the app itself, so one `make demo` needs no web server in front.
        "http": ASGIStaticFilesHandler(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

# What the imports made lives as long as the process: moved out of the collector's sight,
# so that a full collection during a request walks only that request's objects. On a
# list of 200 instances this halved the slowest requests (bench/api.py, 2026-12-08).
gc.collect()
gc.freeze()
