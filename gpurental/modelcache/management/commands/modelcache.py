"""python manage.py modelcache fill|ls|evict: operators' hands on hosts' model caches."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from gpurental.fleet.models import Host
from gpurental.modelcache import selectors
from gpurental.modelcache.models import CacheEvent
from gpurental.modelcache.services import (
    CacheRefused,
    cache_evict_request,
    cache_fill_request,
    cache_list_request,
)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


class Command(BaseCommand):
    help = (
        "Fill, list and evict hosts' shared Hugging Face caches. The host's agent does the "
        "work: fill reads a folder or .tar/.tar.gz archive from its import directory "
        "(GPURENTAL_MODEL_IMPORT_DIR), offline."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        fill = sub.add_parser("fill", help="fill a host's cache from its import directory")
        fill.add_argument("--host", required=True)
        fill.add_argument("source", help="folder or archive, relative to the import directory")
        fill.add_argument(
            "--repo-id", default="", help="org/name; required for a plain model folder"
        )
        fill.add_argument("--wait", type=float, default=600, help="seconds to wait (0: none)")
        ls = sub.add_parser("ls", help="what the catalog says each host has")
        ls.add_argument("--host", default="")
        ls.add_argument(
            "--refresh", action="store_true", help="ask the agent(s) first, and wait a little"
        )
        ls.add_argument("--wait", type=float, default=30)
        evict = sub.add_parser("evict", help="delete a model from a host's cache")
        evict.add_argument("--host", required=True)
        evict.add_argument("repo_id")
        evict.add_argument("--force", action="store_true", help="even while instances use it")
        evict.add_argument("--wait", type=float, default=120)

    def _host(self, name: str) -> Host:
        host = Host.objects.filter(name=name).first()
        if host is None:
            names = ", ".join(Host.objects.values_list("name", flat=True)) or "none"
            raise CommandError(f"no host {name!r}; hosts: {names}")
        return host

    def handle(self, *args, action, **options):
        try:
            getattr(self, f"_{action}")(**options)
        except CacheRefused as exc:
            raise CommandError(str(exc)) from exc

    def _outcome(self, host: Host, after: int, kinds: tuple[str, ...], repo_id: str, timeout):
        """The first event of ``kinds`` on ``host`` (for ``repo_id`` when named) written
        after event id ``after``: the agent's report on this request."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = CacheEvent.objects.filter(host=host, pk__gt=after, kind__in=kinds)
            if repo_id:
                events = events.filter(repo_id=repo_id)
            event = events.order_by("pk").first()
            if event is not None:
                return event
            time.sleep(0.5)
        raise CommandError(
            f"no report from {host.name}'s agent within {timeout:g} s; it keeps going: "
            "see `modelcache ls` later"
        )

    @staticmethod
    def _last_event(host: Host) -> int:
        return (
            CacheEvent.objects.filter(host=host)
            .order_by("-pk")
            .values_list("pk", flat=True)
            .first()
            or 0
        )

    def _fill(self, *, host, source, repo_id, wait, **_):
        host = self._host(host)
        after = self._last_event(host)
        cache_fill_request(host=host, source=source, repo_id=repo_id)
        self.stdout.write(f"asked {host.name}'s agent to fill its cache from {source}")
        if not wait:
            return
        kinds = (CacheEvent.Kind.FILLED, CacheEvent.Kind.FILL_FAILED)
        event = self._outcome(host, after, kinds, repo_id, wait)
        if event.kind == CacheEvent.Kind.FILL_FAILED:
            raise CommandError(f"fill failed: {event.reason}")
        row = selectors.cache_rows(host=host).filter(repo_id=event.repo_id).first()
        self.stdout.write(
            self.style.SUCCESS(
                f"{event.repo_id} is in {host.name}'s cache: revision {row.revision[:12]}, "
                f"{row.files} files, {_size(row.size_bytes)}"
            )
        )

    def _evict(self, *, host, repo_id, force, wait, **_):
        host = self._host(host)
        after = self._last_event(host)
        cache_evict_request(host=host, repo_id=repo_id, force=force)
        self.stdout.write(f"asked {host.name}'s agent to evict {repo_id}")
        if not wait:
            return
        kinds = (CacheEvent.Kind.EVICTED, CacheEvent.Kind.EVICT_FAILED)
        event = self._outcome(host, after, kinds, repo_id, wait)
        if event.kind == CacheEvent.Kind.EVICT_FAILED:
            raise CommandError(f"eviction failed: {event.reason}")
        self.stdout.write(self.style.SUCCESS(f"{repo_id} is gone from {host.name}'s cache"))

    def _ls(self, *, host, refresh, wait, **_):
        hosts = [self._host(host)] if host else list(Host.objects.exclude(hf_cache_dir=""))
        if refresh:
            before = {h.pk: h.cache_events.count() for h in hosts}
            asked_at = time.monotonic()
            for h in hosts:
                cache_list_request(host=h)
            # A listing that changes nothing writes no event; give the agents a moment.
            while time.monotonic() - asked_at < min(wait, 3):
                if all(h.cache_events.count() != before[h.pk] for h in hosts):
                    break
                time.sleep(0.5)
        rows = [r for h in hosts for r in selectors.cache_rows(host=h)]
        if not rows:
            self.stdout.write("no models cached")
            return
        self.stdout.write(f"{'HOST':<16} {'MODEL':<48} {'STATUS':<9} {'SIZE':>9}  REVISION")
        for r in rows:
            line = (
                f"{r.host.name:<16} {r.repo_id:<48} {r.status:<9} {_size(r.size_bytes):>9}  "
                f"{r.revision[:12]}"
            )
            self.stdout.write(line + (f"  ({r.reason})" if r.reason else ""))
