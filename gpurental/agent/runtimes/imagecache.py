"""The customers' images a host keeps after pulling them, least recently used out.

The engine keeps every image it pulled; nothing says when one was last used. This file
(``images.json`` in the agent's directory) does: each pull or launch of a customer's
image marks it used. When they add up to more than the limit, the least recently used
ones that no container holds are removed (the engine refuses to remove one in use). The
list goes out with each heartbeat, and placement prefers hosts that have the image.
The platform's own images are not in it: they are never removed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable


class ImageCache:
    def __init__(self, path: str, *, limit_bytes: int, clock: Callable[[], float] = time.time):
        self.path, self.limit_bytes, self.clock = path, limit_bytes, clock
        self._lock = threading.Lock()
        self._entries = self._load()  # reference → {"bytes", "last_used"}
        self.version = 0  # changes with the entries: the heartbeat sends a changed listing

    def _load(self) -> dict[str, dict]:
        try:
            with open(self.path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, dict)}

    def _save(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(self._entries, f)
        os.replace(tmp, self.path)

    def used(self, reference: str, size_bytes: int) -> None:
        with self._lock:
            self._entries[reference] = {"bytes": int(size_bytes), "last_used": self.clock()}
            self.version += 1
            self._save()

    def forget(self, reference: str) -> None:
        with self._lock:
            if self._entries.pop(reference, None) is not None:
                self.version += 1
                self._save()

    def listing(self) -> list[dict]:
        """For the heartbeat: [{"ref", "bytes", "last_used"}], most recently used first."""
        with self._lock:
            items = sorted(self._entries.items(), key=lambda kv: -kv[1].get("last_used", 0))
        return [{"ref": ref, **entry} for ref, entry in items]

    def over_limit(self) -> list[str]:
        """References to remove, least recently used first, until the rest fit the limit."""
        with self._lock:
            items = sorted(self._entries.items(), key=lambda kv: kv[1].get("last_used", 0))
            total = sum(entry.get("bytes", 0) for _, entry in items)
        victims = []
        for ref, entry in items:
            if total <= self.limit_bytes:
                break
            victims.append(ref)
            total -= entry.get("bytes", 0)
        return victims
