"""What every bench shares: its own embedded servers, Django set up on them, percentiles.

A bench never touches real data: ``setup_django`` always starts embedded PostgreSQL and
Redis in the bench's temp dir, whatever DATABASE_URL / REDIS_URL say.
"""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def setup_django(var_dir: Path, **env: str) -> dict[str, str]:
    """Embedded servers in ``var_dir``, ``env`` on top of the bench defaults, Django set
    up and migrated. Returns the servers' URLs (DATABASE_URL, REDIS_URL)."""
    from gpurental import embedded

    urls = embedded.ensure(var_dir)
    os.environ.update(urls)
    os.environ.setdefault("SECRET_KEY", "bench-" + uuid.uuid4().hex * 2)
    os.environ["DJANGO_SETTINGS_MODULE"] = "gpurental.settings"
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return urls


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
