"""A Jupyter Server extension for instances behind the gpurental gateway.

The gateway adds JupyterLab's token to every request it passes on, so the browser never
needs it. JupyterLab would still write it into every page it serves (its page config),
which would hand the token to the browser and its history: this blanks it there. The
frontend then authenticates with what the gateway adds.
"""

from __future__ import annotations


def _jupyter_server_extension_points():
    return [{"module": "gpurental_gateway_ext"}]


def _blank_token(serverapp) -> None:
    page_config = serverapp.web_app.settings.setdefault("page_config_data", {})
    page_config["token"] = ""


def _load_jupyter_server_extension(serverapp) -> None:
    from tornado.ioloop import IOLoop

    _blank_token(serverapp)
    # JupyterLab sets the token when it loads, which may come after this extension: blank
    # it again once every extension has loaded, before the first request is served.
    IOLoop.current().add_callback(_blank_token, serverapp)
