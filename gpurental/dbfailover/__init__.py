"""Django's PostgreSQL backend, waiting out a failover (``ENGINE = "gpurental.dbfailover"``).

A new connection that fails (no primary answers: it died, and its replica is not yet
promoted) is tried again with a growing pause, for up to ``DATABASE_CONNECT_RETRY_S``
seconds (default 0: not at all). A request then waits for the promoted primary instead of
failing; only the requests whose connection was open when the primary died fail. With
DATABASE_URL naming both servers and ``target_session_attrs=read-write`` (deploy/), libpq
picks whichever one takes writes at each attempt.
"""
