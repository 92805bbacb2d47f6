"""``gpurental ssh-keys list|add FILE|delete ID`` and ``gpurental ssh ID``."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, subcommands
from gpurental.client.cli.exit_codes import INVALID_STATE, OK, UsageError
from gpurental.client.cli.output import print_json, say, table, warn, when


def _key_dict(key) -> dict:
    return key.raw


def cmd_ssh_keys_list(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        keys = client.ssh_keys.list()
    if args.json:
        print_json([_key_dict(k) for k in keys])
    elif not keys:
        say("No SSH keys; add one with: gpurental ssh-keys add ~/.ssh/id_ed25519.pub")
    else:
        table(
            ["ID", "NAME", "TYPE", "FINGERPRINT", "LAST USED"],
            [
                [k.id, k.name, k.algorithm, k.fingerprint, when(k.last_used_at) or "never"]
                for k in keys
            ],
        )
    return OK


def cmd_ssh_keys_add(args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        path = Path(args.file).expanduser()
        if not path.is_file():
            raise UsageError(
                f"{args.file}: no such file (give a public key, e.g. ~/.ssh/id_ed25519.pub)"
            )
        text = path.read_text()
    with logged_in_client() as client:
        key = client.ssh_keys.add(text, name=args.name or "")
    if args.json:
        print_json(_key_dict(key))
    else:
        say(f"Added SSH key {key.name} ({key.fingerprint}); id {key.id}")
    return OK


def cmd_ssh_keys_delete(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        client.ssh_keys.delete(args.id)
    if args.json:
        print_json({"deleted": args.id})
    else:
        say(f"Deleted SSH key {args.id}")
    return OK


def ssh_argv(access: dict, extra: list[str]) -> list[str]:
    """The ssh command line for the API's ``ssh`` field of an instance."""
    return ["ssh", "-p", str(access["port"]), *extra, f"{access['user']}@{access['host']}"]


def _own_flags(args: argparse.Namespace) -> list[str]:
    """Take --print/--json given after the id; the rest (after --) is for ssh."""
    rest = list(args.ssh_args)
    while rest and rest[0] in ("--print", "--json"):
        setattr(args, rest.pop(0).lstrip("-"), True)
    if rest and rest[0] == "--":
        rest.pop(0)
    return rest


def cmd_ssh(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        instance = client.get_instance(args.id)
    access = instance.raw.get("ssh")
    if not access:
        warn(
            f"instance {instance.id} has no SSH now: it is {instance.status}"
            + ("" if instance.status != "running" else ", and its image has no sshd")
        )
        return INVALID_STATE
    argv = ssh_argv(access, _own_flags(args))
    if args.json:
        print_json({"argv": argv, **access})
        return OK
    if args.print:
        say(" ".join(argv))
        return OK
    program = shutil.which("ssh")
    if program is None:
        raise UsageError(
            "no ssh client on this machine; install OpenSSH, then run: " + " ".join(argv)
        )
    os.execv(program, argv)  # noqa: S606 - the user's own ssh client, on their own command
    return OK  # pragma: no cover


def add_commands(command: AddCommand) -> None:
    p = command(
        "ssh", cmd_ssh, "open an SSH session to a running instance (through the SSH gateway)"
    )
    p.add_argument("id", help="instance id")
    p.add_argument(
        "--print", action="store_true", help="print the ssh command instead of running it"
    )
    # REMAINDER: everything after the id goes to ssh (after an optional --), except our own
    # flags right after the id (argparse cannot mix them with a trailing list by itself).
    p.add_argument("ssh_args", nargs=argparse.REMAINDER, help="-- then more arguments for ssh")

    keys = command("ssh-keys", cmd_ssh_keys_list, "your SSH public keys: list, add FILE, delete ID")
    sub = subcommands(keys, "ssh_keys_command", "list|add|delete")
    sub("list", cmd_ssh_keys_list, "list your SSH keys")
    add = sub("add", cmd_ssh_keys_add, "add a public key (a .pub file, or - for stdin)")
    add.add_argument("file", help="e.g. ~/.ssh/id_ed25519.pub, or - to read stdin")
    add.add_argument("--name", help="what it is (default: the key's comment)")
    delete = sub("delete", cmd_ssh_keys_delete, "delete a key by its id")
    delete.add_argument("id", help="SSH key id (gpurental ssh-keys list)")
