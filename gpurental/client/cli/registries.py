"""``gpurental registry login REGISTRY -u USER | logout REGISTRY | list``: the logins a
launch of your own image (``gpurental launch --image REGISTRY/REPO:TAG``) pulls with."""

from __future__ import annotations

import argparse
import getpass
import sys

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, subcommands
from gpurental.client.cli.exit_codes import OK, UsageError
from gpurental.client.cli.output import print_json, say, table, when


def cmd_registry_list(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        logins = client.registry_logins.list()
    if args.json:
        print_json([login.raw for login in logins])
    elif not logins:
        say("No registry logins; save one with: gpurental registry login REGISTRY -u USER")
    else:
        table(
            ["REGISTRY", "USERNAME", "SAVED", "ID"],
            [[x.registry, x.username, when(x.updated_at), x.id] for x in logins],
        )
    return OK


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    elif sys.stdin.isatty():
        password = getpass.getpass(f"Password (or token) for {args.username}@{args.registry}: ")
    else:
        raise UsageError("give the password on stdin with --password-stdin")
    if not password:
        raise UsageError("the password is empty")
    return password


def cmd_registry_login(args: argparse.Namespace) -> int:
    password = _password(args)
    with logged_in_client() as client:
        login = client.registry_logins.save(args.registry, args.username, password)
    if args.json:
        print_json(login.raw)
    else:
        say(
            f"Saved the login {login.username}@{login.registry}; launches of "
            f"{login.registry}/… images pull with it"
        )
    return OK


def cmd_registry_logout(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        client.registry_logins.delete(args.registry)
    if args.json:
        print_json({"deleted": args.registry})
    else:
        say(f"Deleted the login for {args.registry}")
    return OK


def add_commands(command: AddCommand) -> None:
    p = command("registry", cmd_registry_list, "logins to private registries: list, login, logout")
    sub = subcommands(p, "registry_command", "list|login|logout")
    sub("list", cmd_registry_list, "list your registry logins (never their passwords)")
    login = sub("login", cmd_registry_login, "save the login for a registry (replaces one)")
    login.add_argument("registry", help="host[:port], e.g. ghcr.io")
    login.add_argument("-u", "--username", required=True)
    login.add_argument(
        "--password-stdin", action="store_true", help="read the password or token from stdin"
    )
    logout = sub("logout", cmd_registry_logout, "delete the login for a registry")
    logout.add_argument("registry", help="the registry (or the login's id)")
