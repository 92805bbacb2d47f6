"""Who the command acts as: ``gpurental login``, and the client every other command uses."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from gpurental.client import config
from gpurental.client.cli.args import AddCommand
from gpurental.client.cli.exit_codes import OK, UsageError
from gpurental.client.cli.output import ask, print_json, say
from gpurental.client.client import Client
from gpurental.client.errors import AuthenticationError


def logged_in_client() -> Client:
    # Key and URL: environment first, then what `gpurental login` saved.
    key, url = config.resolve()
    if not key:
        raise AuthenticationError("not logged in: run `gpurental login` or set GPURENTAL_API_KEY")
    return Client(api_key=key, base_url=url)


def cmd_login(args: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty()
    try:
        saved = config.load_config()
    except config.ConfigError:
        saved = {}  # logging in again is how a broken file gets fixed
    url = args.url or os.environ.get(config.ENV_URL)
    if not url:
        url = saved.get("url") or config.DEFAULT_URL
        if interactive:
            url = ask(f"Server URL [{url}]: ") or url
    key = args.api_key or os.environ.get(config.ENV_API_KEY)
    if not key:
        # Reading the key from a prompt or stdin keeps it out of argv and shell history.
        if interactive:
            key = getpass.getpass("API key: ", stream=sys.stderr)
        else:
            key = sys.stdin.readline()
        key = key.strip()
    if not key:
        raise UsageError("no API key given (--api-key, GPURENTAL_API_KEY, prompt or stdin)")
    with Client(api_key=key, base_url=url) as client:
        try:
            me = client.me()
        except AuthenticationError as exc:
            raise AuthenticationError(
                f"the server at {client.base_url} refused this API key: {exc.message}",
                status=exc.status,
                code=exc.code,
            ) from exc
        path = config.save_config({"url": client.base_url, "api_key": key})
    email = me.get("email", "")
    if args.json:
        print_json({"url": client.base_url, "email": email, "config": str(path)})
    else:
        say(f"Logged in to {client.base_url} as {email}; saved to {path}")
    return OK


def add_commands(command: AddCommand) -> None:
    p = command("login", cmd_login, "check an API key against a server and save both")
    p.add_argument("--api-key", help="API key (gpr_…); prompted for, or read from stdin")
    p.add_argument("--url", help=f"server URL (default {config.DEFAULT_URL})")
