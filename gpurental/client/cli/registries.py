"""Your own images from the command line: ``gpurental registry login REGISTRY -u USER |
logout REGISTRY | list`` (the logins a launch of ``--image REGISTRY/REPO:TAG`` pulls
with), and ``gpurental save-image ID NAME``, ``saved-images``, ``saved-image-delete``."""

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

    command("saved-images", cmd_saved_images, "your instances saved as images")
    save = command(
        "save-image", cmd_save_image, "save a running or stopped instance as your image NAME"
    )
    save.add_argument("id", help="instance id")
    save.add_argument("name", help="lowercase letters, digits, '.', '_' or '-'")
    save.add_argument(
        "--no-wait", dest="wait", action="store_false", help="return at once, while it saves"
    )
    delete = command("saved-image-delete", cmd_saved_image_delete, "delete a saved image")
    delete.add_argument("image", help="its name or id")

    command("volumes", cmd_volumes, "your volumes: data apart from any one instance")
    create = command("volume-create", cmd_volume_create, "create a volume on a host or in a zone")
    create.add_argument("name")
    create.add_argument("--size", type=int, required=True, metavar="GB")
    where = create.add_mutually_exclusive_group(required=True)
    where.add_argument("--host", help="the host it lives on (gpurental ls shows hosts)")
    where.add_argument("--zone", help="or a zone: it lives on a host there (gpurental gpus)")
    remove = command("volume-delete", cmd_volume_delete, "delete a volume and its data, for good")
    remove.add_argument("volume", help="its name or id")
    command("snapshots", cmd_snapshots, "your volumes' snapshots in the object storage")
    snap = command(
        "snapshot-create",
        cmd_snapshot_create,
        "snapshot a volume, or a stopped instance's /workspace (--instance), into the storage",
    )
    snap.add_argument("volume", help="its name or id (free, or its instance stopped)")
    snap.add_argument("name")
    snap.add_argument(
        "--instance",
        action="store_true",
        help="the first argument is a stopped instance: snapshot its /workspace (then "
        "gpurental launch … --workspace-from NAME)",
    )
    snap.add_argument(
        "--no-wait", dest="wait", action="store_false", help="return at once, while it uploads"
    )
    restore = command(
        "snapshot-restore", cmd_snapshot_restore, "restore a snapshot into a new volume on a host"
    )
    restore.add_argument("snapshot", help="its name or id")
    restore.add_argument("--host", required=True, help="the host the new volume lives on")
    restore.add_argument("--name", required=True, help="the new volume's name")
    restore.add_argument("--size", type=int, metavar="GB", help="default: the volume's size")
    restore.add_argument(
        "--no-wait", dest="wait", action="store_false", help="return at once, while it restores"
    )
    drop = command("snapshot-delete", cmd_snapshot_delete, "delete a snapshot, for good")
    drop.add_argument("snapshot", help="its name or id")
    grow = command("volume-resize", cmd_volume_resize, "make a volume larger (never smaller)")
    grow.add_argument("volume", help="its name or id")
    grow.add_argument("--size", type=int, required=True, metavar="GB")
    detach = command(
        "volume-detach",
        cmd_volume_detach,
        "take a volume from the stopped instance that holds it (for the next launch)",
    )
    detach.add_argument("volume", help="its name or id")


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 1e9:.2f} GB" if size_bytes else "-"


def cmd_saved_images(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        images = client.saved_images.list()
    if args.json:
        print_json([image.raw for image in images])
    elif not images:
        say("No saved images; save an instance with: gpurental save-image ID NAME")
    else:
        table(
            ["NAME", "STATUS", "SIZE", "PER MONTH", "SAVED", "REFERENCE"],
            [
                [
                    i.name,
                    i.status,
                    _size(i.size_bytes),
                    _per_month(i),
                    when(i.created_at),
                    i.reference,
                ]
                for i in images
            ],
        )
    return OK


def cmd_save_image(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if not args.json and args.wait:
            say(f"Saving instance {args.id} as {args.name} (committed and pushed by its host)…")
        image = client.saved_images.save(args.id, args.name, wait=args.wait)
    if args.json:
        print_json(image.raw)
    elif image.status == "ready":
        say(f"Saved {image.name}: {image.reference} ({_size(image.size_bytes)})")
        say(f"Launch it with: gpurental launch --gpu MODEL --image {image.reference}")
    else:
        say(f"Saving {image.name} ({image.status}); see: gpurental saved-images")
    return OK


def cmd_saved_image_delete(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        client.saved_images.delete(args.image)
    if args.json:
        print_json({"deleted": args.image})
    else:
        say(f"Deleted saved image {args.image}")
    return OK


def cmd_volumes(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        volumes = client.volumes.list()
    if args.json:
        print_json([v.raw for v in volumes])
    elif not volumes:
        say("No volumes; create one with: gpurental volume-create NAME --size GB --host HOST")
    else:
        table(
            ["NAME", "HOST", "SIZE", "USED", "MOUNTED", "PER MONTH"],
            [
                [
                    v.name,
                    v.host,
                    f"{v.size_gb} GB",
                    _size(v.used_bytes),
                    f"{v.mount_path} (in use)" if v.in_use else "no",
                    _per_month(v),
                ]
                for v in volumes
            ],
        )
    return OK


def cmd_volume_create(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        volume = client.volumes.create(args.name, args.size, args.host, zone=args.zone)
    if args.json:
        print_json(volume.raw)
    else:
        say(
            f"Created volume {volume.name} ({volume.size_gb} GB on {volume.host}); mount it "
            f"with: gpurental launch … --volume {volume.name}:/data"
        )
    return OK


def cmd_snapshots(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        snapshots = client.snapshots.list()
    if args.json:
        print_json([s.raw for s in snapshots])
    elif not snapshots:
        say("No snapshots; make one with: gpurental snapshot-create VOLUME NAME")
    else:
        table(
            ["NAME", "OF", "STATUS", "SIZE", "PER MONTH"],
            [
                [s.name, s.source_name, s.status, _size(s.size_bytes), _per_month(s)]
                for s in snapshots
            ],
        )
    return OK


def cmd_snapshot_create(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if args.instance:
            snapshot = client.snapshots.create_workspace(args.volume, args.name, wait=args.wait)
        else:
            snapshot = client.snapshots.create(args.volume, args.name, wait=args.wait)
    if args.json:
        print_json(snapshot.raw)
    elif snapshot.status == "ready":
        then = (
            f"gpurental launch … --workspace-from {snapshot.name}"
            if snapshot.instance
            else f"gpurental snapshot-restore {snapshot.name} --host HOST --name NEW"
        )
        say(
            f"Snapshot {snapshot.name} of {snapshot.source_name} is in the storage "
            f"({_size(snapshot.size_bytes)}); use it with: {then}"
        )
    else:
        say(f"Snapshot {snapshot.name}: {snapshot.status}")
    return OK


def cmd_snapshot_restore(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        volume = client.snapshots.restore(
            args.snapshot, args.host, args.name, size_gb=args.size, wait=args.wait
        )
    if args.json:
        print_json(volume.raw)
    else:
        say(
            f"Volume {volume.name} ({volume.size_gb} GB on {volume.host}): "
            f"{volume.raw.get('status', '')}; mount it with: gpurental launch … --volume "
            f"{volume.name}:/data"
        )
    return OK


def cmd_snapshot_delete(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        client.snapshots.delete(args.snapshot)
    if args.json:
        print_json({"deleted": args.snapshot})
    else:
        say(f"Deleted snapshot {args.snapshot}")
    return OK


def cmd_volume_resize(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        volume = client.volumes.resize(args.volume, args.size)
    if args.json:
        print_json(volume.raw)
    else:
        say(f"Volume {volume.name} is {volume.size_gb} GB now")
    return OK


def cmd_volume_detach(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        volume = client.volumes.detach(args.volume)
    if args.json:
        print_json(volume.raw)
    else:
        say(f"Volume {volume.name} is free: the next launch on {volume.host} may mount it")
    return OK


def cmd_volume_delete(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        client.volumes.delete(args.volume)
    if args.json:
        print_json({"deleted": args.volume})
    else:
        say(f"Deleted volume {args.volume} and its data")
    return OK


def _per_month(stored) -> str:
    """What a volume or saved image costs a month, with its currency; "—" when unknown."""
    if stored.monthly_cost is None:
        return "—"
    return f"{stored.monthly_cost} {stored.raw.get('currency', '')}".strip()
