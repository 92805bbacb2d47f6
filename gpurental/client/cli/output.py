"""What the command shows: stdout for results, stderr for messages, prompts and progress."""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gpurental.client.cli.exit_codes import UsageError
from gpurental.client.models import Instance


def say(text: str = "") -> None:
    print(text, file=sys.stdout)


def warn(text: str) -> None:
    print(f"gpurental: {text}", file=sys.stderr)


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) if c is not None else "-" for c in row] for row in rows]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        say("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline().strip()


def confirm(question: str, refusal: str) -> bool:
    """Ask on a terminal; without one, refuse with ``refusal`` (a usage error)."""
    if not sys.stdin.isatty():
        raise UsageError(refusal)
    return ask(f"{question} [y/N] ").lower() in ("y", "yes")


def when(value: Any) -> str | None:
    """An API time, shown in the local time zone."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if not isinstance(value, datetime):
        return None
    return value.astimezone().strftime("%Y-%m-%d %H:%M %Z")


def money(amount: Any, currency: str = "") -> str:
    return f"{amount} {currency}".strip() if amount is not None else "-"


def instance_line(instance: Instance) -> str:
    line = f"instance {instance.id} ({instance.name or 'unnamed'}): {instance.status}"
    if instance.status_reason:
        line += f" ({instance.status_reason})"
    return line


class Progress:
    """Shows how a launch goes, on stderr: a spinner on a terminal, else one line a change."""

    FRAMES = "|/-\\"

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.text = "launching"
        self.started = time.monotonic()
        self._last_line = ""
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def update(self, instance: Instance) -> None:
        step = instance.latest_step
        self.text = f"instance {instance.id}: {instance.status}" + (f" - {step}" if step else "")
        if not self.tty and self.text != self._last_line:
            self._last_line = self.text
            print(self.text, file=self.stream, flush=True)

    def _spin(self) -> None:
        for frame in itertools.cycle(self.FRAMES):
            elapsed = time.monotonic() - self.started
            self.stream.write(f"\r\x1b[K{frame} {self.text} ({elapsed:.0f}s)")
            self.stream.flush()
            if self._done.wait(0.1):
                break

    def __enter__(self) -> Progress:
        if self.tty:
            self._thread = threading.Thread(target=self._spin, name="gpurental-spinner")
            self._thread.daemon = True
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
            self.stream.write("\r\x1b[K")
            self.stream.flush()
