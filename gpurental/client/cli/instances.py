"""Instances: the GPUs on offer, launch, list, open, stop/start/restart, terminate, idle stop."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, Handler, idle_minutes, positive_int
from gpurental.client.cli.exit_codes import INTERRUPTED, OK, UNEXPECTED, UsageError
from gpurental.client.cli.output import (
    Progress,
    ask,
    instance_line,
    print_json,
    say,
    table,
    warn,
)
from gpurental.client.errors import InvalidState, Timeout
from gpurental.client.models import STATUSES


def _model_keys(model: dict[str, Any]) -> set[str]:
    return {str(model[k]) for k in ("slug", "short_name", "name") if model.get(k)}


def _plan_model_key(plan: dict[str, Any]) -> str | None:
    value = plan.get("gpu_model")
    if isinstance(value, dict):
        value = value.get("slug") or value.get("short_name") or value.get("name")
    return str(value) if value else None


def _per_gpu_rate(plan: dict[str, Any]) -> Decimal | None:
    try:
        rate = Decimal(str(plan["hourly_rate"]))
        count = int(plan.get("gpu_count") or 1)
    except (KeyError, InvalidOperation, ValueError):
        return None
    # Shown with the places the server uses for rates; rounded once, here, for display.
    places = Decimal(1).scaleb(min(rate.as_tuple().exponent, -2))
    return (rate / count).quantize(places, rounding=ROUND_HALF_UP)


def cmd_gpus(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        models = client.gpu_models()
        plans = client.plans()
    rows = []
    for model in models:
        keys = _model_keys(model)
        priced = [
            (rate, plan.get("currency") or "")
            for plan in plans
            if _plan_model_key(plan) in keys and (rate := _per_gpu_rate(plan)) is not None
        ]
        rate, currency = min(priced, key=lambda p: p[0]) if priced else (None, "")
        rows.append(
            {
                **model,
                "price_per_gpu_hour": str(rate) if rate is not None else None,
                "price_currency": currency or None,
            }
        )
    if args.json:
        print_json(rows)
        return OK
    table(
        ["GPU", "NAME", "MEMORY", "INTERCONNECT", "FREE", "PRICE/GPU-HOUR"],
        [
            [
                row.get("short_name") or row.get("slug"),
                row.get("name"),
                f"{row['memory_gb']} GB" if row.get("memory_gb") is not None else None,
                row.get("interconnect") or None,
                f"{row.get('gpus_free', '?')}/{row.get('gpus_total', '?')}",
                f"from {row['price_per_gpu_hour']} {row['price_currency'] or ''}".rstrip()
                if row["price_per_gpu_hour"]
                else None,
            ]
            for row in rows
        ],
    )
    for row in rows:
        if row.get("zones"):  # free/total per zone: launch --zone to pick one
            zones = ", ".join(
                f"{z['zone']} {z['gpus_free']}/{z['gpus_total']}" for z in row["zones"]
            )
            say(f"{row.get('short_name') or row.get('slug')} by zone: {zones}")
    return OK


def _volume_mounts(values: list[str] | None) -> dict[str, str] | None:
    """--volume NAME[:PATH] (PATH /data when left out), each once."""
    mounts: dict[str, str] = {}
    for value in values or []:
        name, _, path = value.partition(":")
        if not name or name in mounts:
            raise UsageError(f"--volume {value!r}: give NAME or NAME:/path, each volume once")
        mounts[name] = path or "/data"
    return mounts or None


def cmd_launch(args: argparse.Namespace) -> int:
    if args.plan and args.count is not None:
        raise UsageError("--count goes with --gpu; a plan fixes the GPU count")
    with logged_in_client() as client:
        instance = client.create_instance(
            gpu_type=args.gpu,
            framework=args.image,
            model_repo=args.model_repo,
            model=args.model,
            gpu_count=args.count or 1,
            plan=args.plan,
            name=args.name,
            idle_stop_minutes=args.idle_stop,
            volumes=_volume_mounts(args.volume),
            workspace_from=args.workspace_from,
            zone=args.zone,
        )
        if instance.raw.get("image_alias") and not args.json:
            # The article's "pytorch-2.1" and the like: say which image it stands for.
            warn(f"{instance.raw['image_alias']} is an alias of the image {instance.image}")
        if not args.wait:
            if args.json:
                print_json(instance.raw)
            else:
                say(instance_line(instance))
            return OK
        try:
            with Progress(sys.stderr) as progress:
                url = instance.connect(timeout=args.timeout, on_progress=progress.update)
        except KeyboardInterrupt:
            warn(f"stopped waiting; instance {instance.id} keeps launching (see `gpurental ls`)")
            return INTERRUPTED
        except Timeout as exc:
            raise Timeout(
                f"{exc.message}; it may still start: `gpurental ls`, "
                f"or `gpurental terminate {instance.id}`",
                instance=instance,
            ) from exc
    if args.json:
        print_json(instance.raw)
    else:
        say(url)
    return OK


def cmd_ls(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        instances = client.list_instances(status=args.status)
    if args.json:
        print_json([i.raw for i in instances])
        return OK
    table(
        ["ID", "NAME", "STATUS", "GPUS", "HOST", "CREATED"],
        [
            [
                i.id,
                i.name or None,
                i.status,
                f"{i.gpu_count}x {i.gpu_model}" if i.gpu_model else None,
                i.host,
                i.created_at.astimezone().strftime("%Y-%m-%d %H:%M") if i.created_at else None,
            ]
            for i in instances
        ],
    )
    return OK


def cmd_open(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        instance = client.get_instance(args.id)
        if instance.status != "running":
            hint = (
                f"; start it with `gpurental start {instance.id}`"
                if instance.status == "stopped"
                else ""
            )
            raise InvalidState(
                f"instance {instance.id} is {instance.status}, not running{hint}",
                code="invalid_state",
            )
        link = client.connect(instance.id, port=getattr(args, "port", None))
    if args.json:
        print_json({"id": instance.id, **link})
        return OK
    say(link["url"])
    warn(f"the link logs its holder in once and expires at {link['expires_at']}")
    if not args.print:
        webbrowser.open(link["url"])
    return OK


def _action(name: str) -> Handler:
    def command(args: argparse.Namespace) -> int:
        with logged_in_client() as client:
            instance = getattr(client, name)(args.id)
        if args.json:
            print_json(instance.raw)
        else:
            say(instance_line(instance))
        return OK

    command.__name__ = f"cmd_{name}"
    return command


def cmd_start(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        instance = client.start(args.id, without_gpus=args.without_gpus)
    if args.json:
        print_json(instance.raw)
    else:
        say(instance_line(instance))
    return OK


def cmd_terminate(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if not args.yes:
            if not sys.stdin.isatty():
                raise UsageError("terminating deletes the instance's /workspace; pass --yes")
            instance = client.get_instance(args.id)
            answer = ask(
                f"Terminate instance {instance.id} ({instance.name or 'unnamed'}, "
                f"{instance.status})? Its /workspace volume is deleted. [y/N] "
            )
            if answer.lower() not in ("y", "yes"):
                warn("not terminated")
                return UNEXPECTED
        instance = client.terminate(args.id)
    if args.json:
        print_json(instance.raw)
    else:
        say(instance_line(instance))
    return OK


def cmd_idle_stop(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        instance = client.set_idle_policy(args.id, args.minutes)
    if args.json:
        print_json(instance.raw)
        return OK
    policy = (
        f"stops after {instance.idle_stop_minutes} idle minutes (never deleted)"
        if instance.idle_stop_minutes
        else "idle auto-stop is off"
    )
    say(f"{instance_line(instance)}; {policy}")
    return OK


def add_commands(command: AddCommand) -> None:
    command("gpus", cmd_gpus, "GPU models: free/total and the lowest price per GPU-hour")

    p = command("launch", cmd_launch, "launch an instance and print its JupyterLab URL")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--gpu", metavar="MODEL", help="GPU model short name or slug (A10G)")
    what.add_argument("--plan", metavar="SLUG", help="a plan (fixes GPU model and count)")
    p.add_argument("--count", type=positive_int, help="GPUs, with --gpu (default 1)")
    p.add_argument(
        "--image",
        required=True,
        metavar="SLUG|REFERENCE",
        help="a catalog image (pytorch-2.1), or your own (ghcr.io/team/train:1), pulled "
        "with the login saved by `gpurental registry login`",
    )
    p.add_argument("--name", help="a name to tell instances apart")
    p.add_argument("--zone", help="run only on a host in this zone (gpurental gpus lists them)")
    p.add_argument(
        "--volume",
        action="append",
        metavar="NAME[:PATH]",
        help="mount your volume at PATH (default /data); the instance runs on its host",
    )
    p.add_argument(
        "--workspace-from",
        metavar="SNAPSHOT",
        help="start with the files of a snapshot of another instance's /workspace "
        "(gpurental snapshot-create INSTANCE NAME --instance)",
    )
    p.add_argument(
        "--model-repo", choices=["huggingface"], help="mount the host's shared model cache"
    )
    p.add_argument(
        "--model",
        metavar="ORG/NAME",
        help="a Hugging Face model from the hosts' shared caches (hosts with it first)",
    )
    p.add_argument(
        "--idle-stop",
        type=idle_minutes,
        metavar="MINUTES",
        help="stop it after this many idle minutes ('off': never; default: the plan's)",
    )
    p.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait until JupyterLab answers, then print its URL (default: wait)",
    )
    p.add_argument("--timeout", type=float, default=600, help="seconds to wait (default 600)")

    p = command("ls", cmd_ls, "list your instances")
    p.add_argument("--status", choices=STATUSES)

    p = command(
        "open",
        cmd_open,
        "open an instance's JupyterLab in a browser (a one-time link that logs you in)",
    )
    p.add_argument("id")
    p.add_argument("--print", action="store_true", help="only print the link (so does --json)")
    p.add_argument("--port", type=int, help="another HTTP port the image declares")

    for name, text in (
        ("stop", "stop an instance (its /workspace is kept)"),
        ("restart", "restart an instance"),
    ):
        command(name, _action(name), text).add_argument("id")

    p = command("start", cmd_start, "start a stopped instance again")
    p.add_argument("id")
    p.add_argument(
        "--without-gpus",
        action="store_true",
        help="no-GPU mode: no GPU, a few vCPUs, at the plan's no_gpu_hourly_rate (to reach "
        "its data while its GPUs are taken)",
    )

    p = command("terminate", cmd_terminate, "terminate an instance and delete its /workspace")
    p.add_argument("id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    p = command("idle-stop", cmd_idle_stop, "set an instance's idle auto-stop (or 'off')")
    p.add_argument("id")
    p.add_argument("minutes", type=idle_minutes, metavar="MINUTES|off")
