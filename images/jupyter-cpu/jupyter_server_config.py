# Server defaults for gpurental instances (loaded from /etc/jupyter).
# Instances often run where nothing outside can be reached: make JupyterLab ask
# no one for updates or news instead of waiting on a blocked connection.
c = get_config()  # noqa: F821  (provided by Jupyter when it loads this file)
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.news_url = None
# Terminals open a login shell in the workspace, like the notebook file browser.
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-l"]}
# Behind the gpurental gateway (gpurental/gateway/http.py): the token stays out of pages
# (the gateway adds it to each request), client addresses come from X-Forwarded-For, and
# idle kernel sockets are pinged so that nothing on the way closes them.
c.ServerApp.jpserver_extensions = {"gpurental_gateway_ext": True}
c.ServerApp.trust_xheaders = True
c.ServerApp.websocket_ping_interval = 30
# The customer is root in the container (the engine maps it to an unprivileged host uid).
c.ServerApp.allow_root = True
