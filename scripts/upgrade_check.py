"""`make upgrade-check`: a database made by the previous release migrates to this code.

The previous release is the last line of deploy/RELEASES (its git tag, or its commit when
the clone has no tags). Its files come from git (`git archive`: no checkout is touched).
On an embedded PostgreSQL in a scratch folder:

1. the old code migrates an empty database and loads its demo data (`seed_demo`: logins,
   catalog, a host, the demo credit in the ledger);
2. this code migrates the same database; then `migrate --check` says nothing is pending,
   and `check` is clean;
3. the old rows are all still there, read through this code's models.

Run from the repository root: `.venv/bin/python scripts/upgrade_check.py`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

VERIFY = """
from gpurental.accounts.models import User
from gpurental.billing.models import LedgerEntry
from gpurental.catalog.models import Plan
from gpurental.fleet.models import Host
found = {
    "logins": User.objects.filter(email__in=["admin@example.com", "demo@example.com"]).count(),
    "plans": Plan.objects.count(),
    "demo credit": LedgerEntry.objects.filter(user__email="demo@example.com").count(),
    "host local": Host.objects.filter(name="local").count(),
}
print("after the upgrade:", found)
assert found["logins"] == 2 and found["plans"] >= 16, found
assert found["demo credit"] >= 1 and found["host local"] == 1, found
"""


def previous_release() -> tuple[str, str]:
    lines = [
        line.split()
        for line in (REPO / "deploy/RELEASES").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    version, commit = lines[-1]
    tagged = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", "-q", f"{version}^{{commit}}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if tagged and tagged != commit:
        raise SystemExit(f"deploy/RELEASES says {version} is {commit}, but its tag is {tagged}")
    return version, commit


def main() -> None:
    t0 = time.monotonic()
    version, commit = previous_release()
    scratch = Path(tempfile.mkdtemp(prefix="gpurental-upgrade-"))
    old = scratch / "old"
    old.mkdir()
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "archive",
            commit,
            "gpurental",
            "manage.py",
            "templates",
            "static",
            "locale",
        ],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
    print(f"[upgrade-check] {version} ({commit[:10]}) → this tree, on an embedded PostgreSQL")
    python = shlex.quote(sys.executable)
    steps = " && ".join(
        [
            f"cd {shlex.quote(str(old))}",
            "echo '[upgrade-check] the old release migrates an empty database, seeds its demo'",
            f"{python} manage.py migrate --noinput -v 0",
            f"{python} manage.py seed_demo",
            f"cd {shlex.quote(str(REPO))}",
            "echo '[upgrade-check] this code migrates it'",
            f"{python} manage.py migrate --noinput",
            f"{python} manage.py migrate --check",
            f"{python} manage.py check",
            f"{python} manage.py shell -c {shlex.quote(VERIFY)}",
        ]
    )
    env = {**os.environ, "DEBUG": "1", "GPURENTAL_VAR_DIR": str(scratch / "var")}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpurental.embedded",
            "--var",
            str(scratch / "var"),
            "run",
            "--",
            "sh",
            "-c",
            steps,
        ],
        env=env,
        cwd=REPO,
    )
    shutil.rmtree(scratch, ignore_errors=True)
    if result.returncode != 0:
        raise SystemExit(f"[upgrade-check] failed ({result.returncode})")
    print(f"[upgrade-check] passed in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
