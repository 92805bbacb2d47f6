"""Run the HTTP gateway: ``python -m gpurental.gateway [--host H] [--port P]``.

It needs the platform's settings (database, Redis, SECRET_KEY), like the web process.
"""

from __future__ import annotations

import argparse
import logging
import os


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpurental.settings")
    # Route look-ups run on the event loop's few worker threads, for the process's whole
    # life: each keeps its database connection (checked before reuse) instead of opening
    # one per look-up (~4 ms on loopback, on the path of every first request to an origin).
    os.environ.setdefault("DATABASE_CONN_MAX_AGE", "300")
    import django

    django.setup()
    from aiohttp import web
    from django.conf import settings

    from gpurental.gateway.http import Gateway

    parser = argparse.ArgumentParser(prog="python -m gpurental.gateway", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("GATEWAY_BIND", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=settings.GATEWAY_PORT)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    print(
        f"gateway: *.{settings.GATEWAY_DOMAIN} on {args.host}:{args.port} "
        f"(links: {settings.GATEWAY_SCHEME}://<instance>.{settings.GATEWAY_DOMAIN}:{settings.GATEWAY_PORT}/)",
        flush=True,
    )
    web.run_app(
        Gateway().app(),
        host=args.host,
        port=args.port,
        access_log=None,
        print=None,
        shutdown_timeout=5,
    )


if __name__ == "__main__":
    main()
