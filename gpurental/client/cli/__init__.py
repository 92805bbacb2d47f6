"""The ``gpurental`` command line: rent GPU containers from a terminal or a script.

    gpurental login [--api-key KEY] [--url URL]
    gpurental gpus
    gpurental launch (--gpu MODEL [--count N] | --plan SLUG) --image SLUG|REGISTRY/REPO:TAG
                     [--name NAME] [--model-repo huggingface] [--idle-stop MINUTES]
                     [--volume NAME[:PATH]]…
                     [--wait | --no-wait]
    gpurental ls [--status STATUS]
    gpurental open ID [--print]
    gpurental stop ID | start ID | restart ID
    gpurental terminate ID [--yes]
    gpurental idle-stop ID MINUTES|off
    gpurental ssh ID [--print] [-- SSH ARGS…]
    gpurental ssh-keys [list] | ssh-keys add FILE [--name NAME] | ssh-keys delete ID
    gpurental registry [list] | registry login REGISTRY -u USER [--password-stdin]
    gpurental registry logout REGISTRY
    gpurental save-image ID NAME [--no-wait] | saved-images | saved-image-delete NAME
    gpurental volumes | volume-create NAME --size GB --host HOST | volume-delete NAME
    gpurental webhooks [list] | webhooks add URL [--events E1,E2] [--description TEXT]
    gpurental webhooks delete ID | webhooks deliveries [--endpoint ID] | webhooks resend ID
    gpurental reserve MODEL COUNT --start TIME (--hours H | --end TIME) --image SLUG [--yes]
    gpurental reservations
    gpurental cancel-reservation ID [--yes]
    gpurental relaunch RESERVATION_ID
    gpurental availability [MODEL] [--hours N] [--hourly]
    gpurental dedicated-plans
    gpurental lease PLAN (--hours H | --end TIME) [--start TIME] [--host-network]
    gpurental leases | lease-launch ID --image SLUG | lease-end ID | lease-cancel ID
    gpurental redeem CODE | topup AMOUNT | payments
    gpurental autotopup [show] | autotopup set [--threshold X] [--amount Y] [--cap Z]
    gpurental autotopup off | autotopup card [--remove]
    gpurental usage [--month YYYY-MM] [--csv]
    gpurental invoices
    gpurental invoice ID [--pdf FILE | --csv FILE]
    gpurental group apply FILE [--format json|yaml|hcl]   (FILE: .json .yaml .yml .hcl .tf, - stdin)
    gpurental group quote FILE [--format json|yaml|hcl]
    gpurental group ls | group show ID_OR_NAME | group delete ID_OR_NAME [--yes]
    gpurental group rotate-key ID_OR_NAME [--overlap SECONDS]

Times are ISO 8601 (2026-12-03T10:00Z); without an offset, they are your local time.
Every command takes --json: machine-readable JSON on stdout and nothing else there.
Errors go to stderr as "gpurental: <message>". GPURENTAL_API_KEY and GPURENTAL_URL
override what `gpurental login` saved (GPURENTAL_CONFIG names the file).

Exit codes (scripts can rely on them):
  0  ok
  1  unexpected error
  2  usage error (bad arguments, or input the server rejected)
  3  authentication failed, permission denied, or no API key configured
  4  not found
  5  no capacity or quota exceeded
  6  invalid state (the instance's or reservation's status does not allow it)
  7  launch failed (the instance ended failed or lost)
  8  timeout
  9  server unreachable
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from gpurental import __version__
from gpurental.client.cli import (
    account,
    billing,
    dedicated,
    groups,
    instances,
    payments,
    registries,
    reservations,
    ssh,
    webhooks,
)
from gpurental.client.cli.args import Handler
from gpurental.client.cli.exit_codes import (
    AUTH,
    EXIT_CODES,
    INTERRUPTED,
    INVALID_STATE,
    LAUNCH_FAILED,
    NO_CAPACITY,
    NOT_FOUND,
    OK,
    TIMEOUT,
    UNEXPECTED,
    UNREACHABLE,
    USAGE,
    UsageError,
    exit_code_for,
)
from gpurental.client.cli.output import warn
from gpurental.client.errors import GpuRentalError

__all__ = [
    "AUTH",
    "EXIT_CODES",
    "INTERRUPTED",
    "INVALID_STATE",
    "LAUNCH_FAILED",
    "NOT_FOUND",
    "NO_CAPACITY",
    "OK",
    "TIMEOUT",
    "UNEXPECTED",
    "UNREACHABLE",
    "USAGE",
    "build_parser",
    "exit_code_for",
    "main",
]

EXIT_CODES_HELP = "Exit codes" + (__doc__ or "").split("Exit codes", 1)[1]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"gpurental: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gpurental",
        description="Rent GPU containers with JupyterLab from a gpurental server.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpurental {__version__}")
    parser.add_argument("--json", action="store_true", help="machine-readable JSON on stdout")
    # SUPPRESS: a subcommand's default must not undo `gpurental --json ls`.
    common = _Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="JSON on stdout"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, handler: Handler, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            help=help,
            description=help,
            parents=[common],
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.set_defaults(handler=handler)
        return p

    # In this order in `gpurental --help`.
    for group in (
        account,
        instances,
        ssh,
        registries,
        reservations,
        dedicated,
        groups,
        billing,
        payments,
        webhooks,
    ):
        group.add_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else USAGE
    if not args.command:
        parser.print_help(sys.stderr)
        return USAGE
    try:
        return args.handler(args)
    except UsageError as exc:
        warn(str(exc))
        return USAGE
    except GpuRentalError as exc:
        warn(str(exc))
        return exit_code_for(exc)
    except KeyboardInterrupt:
        warn("interrupted")
        return INTERRUPTED
    except BrokenPipeError:
        # `gpurental ls | head` closed stdout early: not worth a traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    except Exception as exc:
        warn(f"unexpected error: {exc!r} (GPURENTAL_DEBUG=1 shows the traceback)")
        if os.environ.get("GPURENTAL_DEBUG"):
            traceback.print_exc()
        return UNEXPECTED
