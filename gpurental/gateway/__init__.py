"""The instance gateway: every instance at an origin of its own, through the platform.

- ``routes``: which instance a host name means, who may reach it and where it listens.
- ``tickets``: one-time tickets that log the owner in at an instance's origin.
- ``http``: the HTTP and websocket proxy (``python -m gpurental.gateway``).
- ``sshkeys``: the keys between the SSH gateway and instances' sshd.
"""
