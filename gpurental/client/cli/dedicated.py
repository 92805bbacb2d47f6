"""Dedicated hosts: the plans, lease a whole host, list, launch into one, end, cancel."""

from __future__ import annotations

import argparse

from gpurental.client.cli.account import logged_in_client
from gpurental.client.cli.args import AddCommand, hours_arg, time_arg
from gpurental.client.cli.exit_codes import OK
from gpurental.client.cli.output import instance_line, money, print_json, say, table, when
from gpurental.client.dedicated import Lease


def _line(lease: Lease) -> str:
    rate = "reserved" if lease.reserved else "on-demand"
    line = (
        f"lease {lease.id}: {lease.status}, {lease.host} ({lease.plan}) from {when(lease.start)} "
        f"to {when(lease.end)}, {rate} rate; billed {money(lease.charged, lease.currency)}"
    )
    if lease.instance_id:
        line += f"; instance {lease.instance_id}"
    return line


def cmd_plans(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        plans = client.dedicated.plans()
    if args.json:
        print_json(plans)
        return OK
    table(
        ["PLAN", "GPUS", "VCPUS", "MEMORY", "PER HOUR", "OFF-PEAK", "RESERVED"],
        [
            [
                p["slug"],
                f"{p['gpu_count']}x {p['gpu_model']}",
                p["vcpus"],
                f"{p['memory_gb']} GB",
                money(p["rates"]["peak"], p["currency"]),
                money(p["rates"]["off_peak"], p["currency"]),
                money(p["rates"]["reserved"], p["currency"]),
            ]
            for p in plans
        ],
    )
    return OK


def cmd_lease(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        lease = client.dedicated.book(
            args.plan,
            hours=args.hours,
            end=args.end,
            start=args.start,
            host_network=args.host_network,
        )
    print_json(lease.raw) if args.json else say(_line(lease))
    return OK


def cmd_leases(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        leases = client.dedicated.list()
    if args.json:
        print_json([lease.raw for lease in leases])
    else:
        for lease in leases:
            say(_line(lease))
    return OK


def cmd_lease_launch(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        instance = client.dedicated.launch(args.id, args.image)
    print_json(instance.raw) if args.json else say(instance_line(instance))
    return OK


def cmd_lease_end(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        lease = client.dedicated.end(args.id)
    print_json(lease.raw) if args.json else say(_line(lease))
    return OK


def cmd_lease_cancel(args: argparse.Namespace) -> int:
    with logged_in_client() as client:
        lease = client.dedicated.cancel(args.id)
    print_json(lease.raw) if args.json else say(_line(lease))
    return OK


def add_commands(command: AddCommand) -> None:
    command("dedicated-plans", cmd_plans, "whole hosts offered for lease, with their rates")
    p = command("lease", cmd_lease, "lease a whole host (starting now unless --start)")
    p.add_argument("plan", metavar="PLAN", help="a dedicated plan's slug")
    length = p.add_mutually_exclusive_group(required=True)
    length.add_argument("--hours", type=hours_arg, metavar="H", help="how long")
    length.add_argument("--end", type=time_arg, metavar="TIME", help="ISO 8601, exclusive")
    p.add_argument("--start", type=time_arg, metavar="TIME", help="book ahead (reserved rate)")
    p.add_argument("--host-network", action="store_true", help="where the operator allows it")
    command("leases", cmd_leases, "list your dedicated-host leases")
    p = command("lease-launch", cmd_lease_launch, "an instance on every GPU of a leased host")
    p.add_argument("id", metavar="LEASE_ID")
    p.add_argument("--image", required=True, metavar="SLUG")
    p = command("lease-end", cmd_lease_end, "end a lease that started at booking; billing stops")
    p.add_argument("id", metavar="LEASE_ID")
    p = command("lease-cancel", cmd_lease_cancel, "cancel a booked lease before its start")
    p.add_argument("id", metavar="LEASE_ID")
