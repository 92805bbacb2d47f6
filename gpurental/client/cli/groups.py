"""Elastic groups: ``gpurental group apply FILE | quote FILE | ls | show ID_OR_NAME |
rotate-key ID_OR_NAME [--overlap SECONDS] | delete ID``.

``apply`` and ``quote`` read the spec from FILE, its format from the name's ending
(.json, .yaml/.yml, .hcl/.tf), or from stdin with ``-`` (say ``--format``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, subcommands
from gpurental.client.cli.exit_codes import OK, UNEXPECTED, USAGE, UsageError
from gpurental.client.cli.output import confirm, money, print_json, say, table, warn, when
from gpurental.client.groups import EXTENSIONS, FORMATS, Group, format_of


def _read_spec(args: argparse.Namespace) -> tuple[str, str | None]:
    """(the spec's text, its format) from FILE or stdin."""
    if args.file == "-":
        return sys.stdin.read(), args.format
    fmt = args.format or format_of(args.file)
    if fmt is None:
        raise UsageError(
            f"cannot tell the format of {args.file!r} from its name; name it "
            f"{', '.join(EXTENSIONS)} or pass --format {'|'.join(FORMATS)}"
        )
    try:
        with open(args.file, encoding="utf-8") as f:
            return f.read(), fmt
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{args.file} is not UTF-8 text") from None


def _price_lines(price: dict[str, Any] | None) -> list[str]:
    if not price:
        return []
    cur = price.get("currency") or ""
    return [
        f"  per replica: {money(price.get('replica_hourly_rate'), cur)}/h "
        f"({money(price.get('replica_off_peak_rate'), cur)}/h off-peak, "
        f"{price.get('off_peak_start')}–{price.get('off_peak_end')})",
        f"  at min ({price.get('min_replicas')}): {money(price.get('min_hourly'), cur)}/h; "
        f"at max ({price.get('max_replicas')}): {money(price.get('max_hourly'), cur)}/h",
        f"  warm pool ({price.get('warm_pool_size')}): "
        f"{money(price.get('warm_pool_hourly'), cur)}/h. {price.get('warm_replica_note') or ''}",
    ]


def cmd_apply(args: argparse.Namespace) -> int:
    text, fmt = _read_spec(args)
    with logged_in_client() as client:
        group = client.apply_group(text, format=fmt)
    if args.json:
        print_json(group.raw)
        return OK
    if group.created:
        say(f"group {group.name} created: {group.id}")
        say(f"  endpoint: {group.endpoint_url}")
        say(f"  endpoint key (shown once, keep it): {group.endpoint_key}")
        for line in _price_lines(group.price):
            say(line)
    elif group.changes:
        say(f"group {group.name} changed:")
        for change in group.changes:
            say(f"  {change}")
    else:
        say(f"group {group.name} unchanged")
    return OK


def cmd_quote(args: argparse.Namespace) -> int:
    text, fmt = _read_spec(args)
    with logged_in_client() as client:
        quote = client.quote_group(text, format=fmt)
    if args.json:
        print_json(quote)
        return OK
    spec = quote.get("spec") or {}
    verb = "would change your group" if quote.get("exists") else "would create group"
    say(
        f"{verb} {quote.get('name')}: {spec.get('min_nodes')}–{spec.get('max_nodes')} × "
        f"{spec.get('gpu_count')} {quote.get('instance_type')} running {quote.get('image')} "
        f"(port {quote.get('port')}), warm pool {(spec.get('warm_pool') or {}).get('size', 0)}"
    )
    for line in _price_lines(quote.get("price")):
        say(line)
    return OK


def _ready(group: Group) -> int:
    return sum(
        1 for r in group.replicas if r.get("role") == "serving" and r.get("status") == "running"
    )


def cmd_ls(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        groups = client.list_groups()
    if args.json:
        print_json([g.raw for g in groups])
        return OK
    table(
        ["ID", "NAME", "STATUS", "GPU", "MIN-MAX", "DESIRED", "WARM", "ENDPOINT"],
        [
            [
                g.id,
                g.name,
                g.status,
                f"{g.gpu_count}x {g.instance_type}",
                f"{g.min_nodes}-{g.max_nodes}",
                g.desired_replicas,
                g.warm_pool_size,
                g.endpoint_url,
            ]
            for g in groups
        ],
    )
    return OK


def cmd_show(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        group = client.find_group(args.id)
    if args.json:
        print_json(group.raw)
        return OK
    say(f"group {group.name} ({group.id}): {group.status}")
    say(
        f"  {group.min_nodes}–{group.max_nodes} × {group.gpu_count} {group.instance_type} "
        f"running {group.image} on port {group.port}; desired {group.desired_replicas}, "
        f"warm pool {group.warm_pool_size}"
    )
    say(f"  endpoint: {group.endpoint_url}")
    for line in _price_lines(group.price):
        say(line)
    load = group.load
    if load:
        say(
            f"load at {when(load.get('at'))}: {load.get('ready')} ready, "
            f"{load.get('provisioning')} provisioning, {load.get('warm')} warm; "
            f"{load.get('rps', 0):.1f} rps, p50 {_ms(load.get('latency_p50_ms'))}, "
            f"p99 {_ms(load.get('latency_p99_ms'))}, queued {load.get('queued', 0):.1f}, "
            f"GPU {_pct(load.get('gpu_util'))}"
        )
    else:
        say("load: no sample yet")
    say("")
    if group.replicas:
        table(
            ["REPLICA", "ROLE", "STATUS", "HOST"],
            [[r.get("id"), r.get("role"), r.get("status"), r.get("host")] for r in group.replicas],
        )
    else:
        say("no replicas")
    say("")
    say("recent events:")
    for event in group.events:
        say(f"  {when(event.created_at)}  {event.kind:8} {event.reason}")
    return OK


def _ms(value: Any) -> str:
    return f"{value:.0f} ms" if isinstance(value, int | float) else "-"


def _pct(value: Any) -> str:
    return f"{value:.0f} %" if isinstance(value, int | float) else "-"


def cmd_delete(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        if not args.yes:
            group = client.find_group(args.id)
            question = (
                f"Delete group {group.name} ({group.id})? Its {len(group.replicas)} "
                "replicas are terminated."
            )
            if not confirm(question, "deleting terminates every replica; pass --yes"):
                warn("not deleted")
                return UNEXPECTED
            target: Any = group.id
        else:
            target = client.find_group(args.id).id
        group = client.delete_group(target)
    if args.json:
        print_json(group.raw)
    else:
        done = "deleted" if group.status == "deleted" else "deleting: its replicas terminate"
        say(f"group {group.name} ({group.id}): {done}")
    return OK


def cmd_rotate_key(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        group = client.find_group(args.id)
        rotated = client.rotate_group_endpoint_key(group.id, overlap_s=args.overlap)
    if args.json:
        print_json(
            {
                "endpoint_key": rotated.endpoint_key,
                "previous_key_until": rotated.previous_key_until.isoformat()
                if rotated.previous_key_until
                else None,
            }
        )
        return OK
    say(f"group {group.name}: new endpoint key (shown once, keep it): {rotated.endpoint_key}")
    if rotated.previous_key_until:
        say(f"  the previous key keeps working until {when(rotated.previous_key_until)}")
    else:
        say("  the previous key stopped working now")
    return OK


def add_commands(command: AddCommand) -> None:
    p = command("group", _usage, "elastic groups: apply a spec, quote, list, show, delete")
    sub_command = subcommands(p, "group_command", "SUBCOMMAND")

    for name, handler, help in (
        ("apply", cmd_apply, "create the group a spec names, or change what differs"),
        ("quote", cmd_quote, "check a spec and show its price; creates nothing"),
    ):
        q = sub_command(name, handler, help)
        q.add_argument(
            "file", metavar="FILE", help="the spec (.json, .yaml, .yml, .hcl, .tf; - stdin)"
        )
        q.add_argument(
            "--format", choices=FORMATS, help="the spec's format (default: FILE's ending)"
        )
    sub_command("ls", cmd_ls, "list your groups")
    q = sub_command("show", cmd_show, "a group: replicas, load, recent events")
    q.add_argument("id", metavar="ID_OR_NAME")
    q = sub_command("rotate-key", cmd_rotate_key, "a new endpoint key; the old one for a while")
    q.add_argument("id", metavar="ID_OR_NAME")
    q.add_argument(
        "--overlap",
        type=int,
        metavar="SECONDS",
        help="how long the current key keeps working (default 86400; 0: it stops now)",
    )
    q = sub_command("delete", cmd_delete, "delete a group: its replicas terminate")
    q.add_argument("id", metavar="ID_OR_NAME")
    q.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _usage(args: argparse.Namespace) -> int:
    warn(
        "say what to do: gpurental group apply|quote FILE, ls, show ID_OR_NAME, "
        "rotate-key ID_OR_NAME, delete ID"
    )
    return USAGE
