"""``gpurental webhooks list|add URL|delete ID|deliveries [--endpoint ID]|resend DELIVERY_ID``."""

from __future__ import annotations

import argparse

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, subcommands
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
    sub = subcommands(hooks, "webhooks_command", "list|add|delete|deliveries|resend")
    sub("list", cmd_webhooks_list, "list your webhook endpoints")
    add = sub("add", cmd_webhooks_add, "register an endpoint (prints its signing secret once)")
    add.add_argument("url", help="https://… on a public address")
    add.add_argument("--events", help="comma-separated event names (default: every event)")
    add.add_argument("--description", help="what it is for")
    delete = sub("delete", cmd_webhooks_delete, "delete an endpoint by its id")
    delete.add_argument("id", help="endpoint id (gpurental webhooks list)")
    deliveries = sub("deliveries", cmd_webhooks_deliveries, "the delivery log, newest first")
    deliveries.add_argument("--endpoint", help="only this endpoint's deliveries (its id)")
    resend = sub("resend", cmd_webhooks_resend, "send a delivery again now")
    resend.add_argument("id", help="delivery id (gpurental webhooks deliveries)")
