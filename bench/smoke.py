"""`make bench-smoke`: every bench at its smoke size, one after another, on one set of
embedded servers whose database is migrated once (each bench gets a copy of it).

Each bench must still run and print sane figures; none is a timing goal. The run prints
each bench's wall time and fails, after running them all, if any failed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import SHARED_ENV  # noqa: E402

BENCHES = [
    "invoicing",
    "backup",
    "telemetry",
    "launch",
    "gateway",
    "placement",
    "api",
    "fleet",
    "elastic",
    "warm_states",
    "acceptance",
    "nvml_sampler",
    "images",
    "snapshot",
    "transfer",
    "network",
    "reconcile",
    "telemetry_store",
]


def main() -> int:
    from gpurental import embedded

    names = sys.argv[1:] or BENCHES
    work = Path(tempfile.mkdtemp(prefix="gpurental-bench-smoke-"))
    times: list[tuple[str, float, int]] = []
    try:
        started = time.monotonic()
        urls = embedded.ensure(work / "var")
        env = {
            **os.environ,
            **urls,
            "SECRET_KEY": "bench-" + uuid.uuid4().hex * 2,
            "DJANGO_SETTINGS_MODULE": "gpurental.settings",
        }
        subprocess.run(  # noqa: S603 - our own manage.py
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
            env=env,
            check=True,
        )
        print(f"== servers up and the template migrated in {time.monotonic() - started:.0f} s")
        shared = json.dumps({**urls, "VAR_DIR": str(work / "var")})
        for name in names:
            print(f"== bench/{name}.py --smoke", flush=True)
            started = time.monotonic()
            done = subprocess.run(  # noqa: S603 - our own benches
                [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--smoke"],
                env={**os.environ, SHARED_ENV: shared},
                check=False,
            )
            times.append((name, time.monotonic() - started, done.returncode))
    finally:
        embedded.stop(work / "var")
        shutil.rmtree(work, ignore_errors=True)
    print("\n== bench-smoke: wall time of each bench")
    for name, seconds, rc in times:
        print(f"  {name:<14} {seconds:6.0f} s  {'ok' if rc == 0 else f'FAILED (exit {rc})'}")
    print(f"  {'total':<14} {sum(s for _, s, _ in times):6.0f} s")
    failed = [name for name, _, rc in times if rc != 0]
    if failed:
        print(f"bench-smoke: {', '.join(failed)} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
