# Server defaults for gpurental instances (loaded from /etc/jupyter).
# Instances often run where nothing outside can be reached: make JupyterLab ask
# no one for updates or news instead of waiting on a blocked connection.
c = get_config()  # noqa: F821  (provided by Jupyter when it loads this file)
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.LabApp.news_url = None
# Terminals open a login shell in the workspace, like the notebook file browser.
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash", "-l"]}
