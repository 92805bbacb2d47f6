"""``gpurental webhooks list|add URL|delete ID|deliveries [--endpoint ID]|resend DELIVERY_ID``."""

from __future__ import annotations

import argparse

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand
from gpurental.client.cli.exit_codes import OK
from gpurental.client.cli.output import print_json, say, table, when


def cmd_webhooks_list(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        endpoints = client.webhooks.list()
    if args.json:
        print_json([e.raw for e in endpoints])
    elif not endpoints:
        say("No webhook endpoints; add one with: gpurental webhooks add https://example.com/hook")
    else:
        table(
            ["ID", "URL", "EVENTS", "ACTIVE", "DESCRIPTION"],
            [
                [
                    e.id,
                    e.url,
                    ",".join(e.events) or "all",
                    "yes" if e.is_active else "no",
                    e.description,
                ]  # fmt: skip
                for e in endpoints
            ],
        )
    return OK


def cmd_webhooks_add(args: argparse.Namespace) -> int:
    events = [e.strip() for e in (args.events or "").split(",") if e.strip()]
    with logged_in_client() as client:
        endpoint = client.webhooks.create(
            args.url, events=events, description=args.description or ""
        )
    if args.json:
        print_json(endpoint.raw)
    else:
        say(f"Added webhook endpoint {endpoint.id} for {endpoint.url}")
        say(f"Signing secret (shown only now; keep it to check signatures): {endpoint.secret}")
    return OK


def cmd_webhooks_delete(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        client.webhooks.delete(args.id)
    if args.json:
        print_json({"deleted": args.id})
    else:
        say(f"Deleted webhook endpoint {args.id}")
    return OK


def cmd_webhooks_deliveries(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        deliveries = client.webhooks.deliveries(endpoint=args.endpoint)
    if args.json:
        print_json([d.raw for d in deliveries])
    elif not deliveries:
        say("No deliveries yet.")
    else:
        table(
            ["ID", "EVENT", "STATUS", "ATTEMPTS", "LAST CODE", "CREATED"],
            [
                [
                    d.id,
                    d.event,
                    d.status,
                    str(d.attempts),
                    str(d.last_status_code or ""),
                    when(d.created_at),
                ]  # fmt: skip
                for d in deliveries
            ],
        )
    return OK


def cmd_webhooks_resend(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        delivery = client.webhooks.resend(args.id)
    if args.json:
        print_json(delivery.raw)
    else:
        code = delivery.last_status_code or "no answer"
        say(f"Sent {delivery.event} again: {delivery.status} ({code}), attempt {delivery.attempts}")
    return OK


def add_commands(command: AddCommand) -> None:
    hooks = command(
        "webhooks",
        cmd_webhooks_list,
        "your webhook endpoints: list, add URL, delete ID, deliveries, resend DELIVERY_ID",
    )
    sub = hooks.add_subparsers(dest="webhooks_command", metavar="list|add|delete|deliveries|resend")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="JSON on stdout"
    )
    sub.add_parser("list", help="list your webhook endpoints", parents=[common]).set_defaults(
        handler=cmd_webhooks_list
    )
    add = sub.add_parser(
        "add", help="register an endpoint (prints its signing secret once)", parents=[common]
    )
    add.add_argument("url", help="https://… on a public address")
    add.add_argument("--events", help="comma-separated event names (default: every event)")
    add.add_argument("--description", help="what it is for")
    add.set_defaults(handler=cmd_webhooks_add)
    delete = sub.add_parser("delete", help="delete an endpoint by its id", parents=[common])
    delete.add_argument("id", help="endpoint id (gpurental webhooks list)")
    delete.set_defaults(handler=cmd_webhooks_delete)
    deliveries = sub.add_parser(
        "deliveries", help="the delivery log, newest first", parents=[common]
    )
    deliveries.add_argument("--endpoint", help="only this endpoint's deliveries (its id)")
    deliveries.set_defaults(handler=cmd_webhooks_deliveries)
    resend = sub.add_parser("resend", help="send a delivery again now", parents=[common])
    resend.add_argument("id", help="delivery id (gpurental webhooks deliveries)")
    resend.set_defaults(handler=cmd_webhooks_resend)
