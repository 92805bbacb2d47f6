"""`make drill`: the production layout under a steady load, losing one part at a time.

The stack comes up as in `make deploy-smoke`: one host's agent, one customer and a
running JupyterLab instance, metered every 5 s. Four clients then loop without pause:
two call the API through Caddy (`GET /api/v1/instances/` with the customer's key), and
two call JupyterLab through Caddy and the gateways (`GET /api/contents`). Then, one at a
time:

1. **web**: `kill -9` of web-1's Daphne. Caddy retries a failed connection on web-2,
   and the container restarts.
2. **gateway**: the same for gateway-1.
3. **rolling upgrade**: `deploy/upgrade.sh` to a new tag of the same image (a backup,
   migrations, then every platform process replaced one at a time).
4. **PostgreSQL primary**: `docker kill` of the primary. After three failed probes one
   second apart (the monitor's part), `deploy/pg-failover.sh` promotes the replica.
   The platform's connections go to it by themselves (target_session_attrs=read-write).

For each drill it prints the requests sent and failed by kind, and the requests in
flight when the kill came. It also prints the time until the killed part is healthy
again; for the database, the time until the API answered again. At the end the
instance is terminated, and its charges must cover its run without a gap or an overlap
(nothing lost, nothing doubled). Run from the repository root:
`.venv/bin/python deploy/drill.py`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smoke import PUBLIC, REPO, Deployment, run, say  # noqa: E402

QUIET_S = 8  # load before each kill, and after recovery, so each window has both
METER_S = 5
NEXT = "drill-next"  # the "new release" of the upgrade drill: a new tag of the same image


@dataclass
class Outcome:
    kind: str
    start: float
    end: float
    ok: bool
    detail: str


@dataclass
class Load:
    """Closed-loop clients; every request's outcome is kept."""

    api_key: str
    origin: str
    gateway_cookies: object
    outcomes: list[Outcome] = field(default_factory=list)
    in_flight: dict[int, tuple[str, float]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def _loop(self, kind: str) -> None:
        import requests

        session = requests.Session()
        if kind == "api":
            session.headers["Authorization"] = f"Bearer {self.api_key}"
            url = f"{PUBLIC}/api/v1/instances/"
        else:
            session.cookies.update(self.gateway_cookies)
            url = f"{self.origin}/api/contents"
        me = threading.get_ident()
        while not self.stop.is_set():
            start = time.monotonic()
            self.in_flight[me] = (kind, start)
            try:
                response = session.get(url, timeout=30)
                ok, detail = response.status_code == 200, str(response.status_code)
            except requests.RequestException as exc:
                ok, detail = False, type(exc).__name__
            self.in_flight.pop(me, None)
            self.outcomes.append(Outcome(kind, start, time.monotonic(), ok, detail))

    def start(self) -> list[threading.Thread]:
        threads = [
            threading.Thread(target=self._loop, args=(kind,), daemon=True)
            for kind in ("api", "api", "gateway", "gateway")
        ]
        for thread in threads:
            thread.start()
        return threads

    def flying_at(self, moment: float) -> int:
        return sum(1 for o in self.outcomes if o.start <= moment < o.end) + sum(
            1 for _, start in list(self.in_flight.values()) if start <= moment
        )

    def summary(self, since: float, until: float) -> dict:
        window = [o for o in self.outcomes if since <= o.start < until]
        result = {}
        for kind in ("api", "gateway"):
            mine = [o for o in window if o.kind == kind]
            failed = [o for o in mine if not o.ok]
            result[kind] = {
                "sent": len(mine),
                "failed": len(failed),
                "slowest_s": round(max((o.end - o.start for o in mine), default=0), 2),
                "failures": sorted({o.detail for o in failed}),
            }
        return result


def healthy(deployment: Deployment, service: str) -> bool:
    cid = deployment.stack.container(service)
    status = run(["docker", "inspect", "-f", "{{.State.Health.Status}}", cid], check=False)
    return status.strip() == "healthy"


def process_drill(deployment: Deployment, load: Load, service: str, pattern: str) -> dict:
    time.sleep(QUIET_S)
    killed = time.monotonic()
    flying = load.flying_at(killed)
    deployment.stack("exec", "-T", service, "pkill", "-KILL", "-f", pattern, check=False)
    say(f"killed {service}'s {pattern} (kill -9)")
    time.sleep(2)  # the health check must first see it gone
    while not healthy(deployment, service):
        time.sleep(0.5)
    recovered = time.monotonic() - killed
    say(f"{service} healthy again after {recovered:.1f} s")
    time.sleep(QUIET_S)
    return {
        "killed": service,
        "in_flight_at_kill": flying,
        "healthy_again_s": round(recovered, 1),
        **load.summary(killed - QUIET_S, time.monotonic()),
    }


def database_drill(deployment: Deployment, load: Load) -> dict:
    stack = deployment.stack
    time.sleep(QUIET_S)
    killed = time.monotonic()
    flying = load.flying_at(killed)
    run(["docker", "kill", stack.container("postgres")])
    say("killed the PostgreSQL primary (docker kill)")
    misses = 0
    replica = stack.container("postgres-replica")
    probe = ["docker", "exec", replica, "pg_isready", "-q", "-h", "postgres", "-t", "1"]
    while misses < 3:  # the monitor: three failed probes, a second apart
        probed = subprocess.run(probe, capture_output=True)
        misses = 0 if probed.returncode == 0 else misses + 1
        if misses < 3:
            time.sleep(1)
    detected = time.monotonic() - killed
    run([str(REPO / "deploy/pg-failover.sh")], env=stack.env)
    promoted = time.monotonic() - killed
    say(f"detected after {detected:.1f} s; replica promoted at {promoted:.1f} s")
    time.sleep(QUIET_S)
    late = [o.end for o in load.outcomes if o.start >= killed - 30 and not o.ok]
    answered = (max(late) - killed) if late else 0.0
    say(f"the last failed request ended {answered:.1f} s after the kill")
    time.sleep(QUIET_S)
    return {
        "killed": "postgres (primary)",
        "in_flight_at_kill": flying,
        "detected_s": round(detected, 1),
        "promoted_s": round(promoted, 1),
        "last_failure_s": round(answered, 1),
        **load.summary(killed - QUIET_S, time.monotonic()),
    }


def upgrade_drill(deployment: Deployment, load: Load) -> dict:
    """deploy/upgrade.sh to a new tag of the same image: every platform process is
    replaced, one at a time, under the load."""
    time.sleep(QUIET_S)
    run(["docker", "tag", "gpurental/platform:latest", f"gpurental/platform:{NEXT}"])
    started = time.monotonic()
    try:
        run([str(REPO / "deploy/upgrade.sh"), NEXT], env=deployment.stack.env)
    finally:
        took = time.monotonic() - started
    say(f"rolling upgrade to {NEXT} done in {took:.1f} s")
    time.sleep(QUIET_S)
    return {
        "rolling upgrade": NEXT,
        "took_s": round(took, 1),
        **load.summary(started - QUIET_S, time.monotonic()),
    }


def charges_check(deployment: Deployment, instance_id: str) -> dict:
    code = (
        "import json\n"
        "from gpurental.rentals.models import Instance\n"
        f"i = Instance.objects.get(pk='{instance_id}')\n"
        "cs = list(i.charges.order_by('period_start').values_list('period_start', 'period_end'))\n"
        "pairs = list(zip(cs, cs[1:]))\n"
        "print(json.dumps({'charges': len(cs),\n"
        "  'gaps': sum(1 for a, b in pairs if b[0] > a[1]),\n"
        "  'overlaps': sum(1 for a, b in pairs if b[0] < a[1]),\n"
        "  'covered_s': round((cs[-1][1] - cs[0][0]).total_seconds(), 1) if cs else 0,\n"
        "  'billed_until_is_last_end': bool(cs) and i.billed_until == cs[-1][1]}))\n"
    )
    return json.loads(deployment.stack.manage("shell", "-c", code).strip().splitlines()[-1])


def main() -> None:
    results = []
    with Deployment("gpurental-drill", {"BILLING_METER_INTERVAL": str(METER_S)}) as deployment:
        import requests

        instance_id, link = deployment.launch()
        browser = requests.Session()
        assert browser.get(link["url"], timeout=30).status_code == 200
        load = Load(deployment.client._api_key, link["origin"], browser.cookies)
        threads = load.start()
        try:
            results.append(process_drill(deployment, load, "web-1", "daphne"))
            results.append(process_drill(deployment, load, "gateway-1", "gpurental.gateway"))
            results.append(upgrade_drill(deployment, load))
            results.append(database_drill(deployment, load))
        finally:
            load.stop.set()
            for thread in threads:
                thread.join(35)
        deployment.terminate(instance_id)
        time.sleep(METER_S)
        charges = charges_check(deployment, instance_id)
        say(f"charges: {charges}")
        assert charges["gaps"] == 0 and charges["overlaps"] == 0, charges
    run(["docker", "rmi", f"gpurental/platform:{NEXT}"], check=False)
    print("\nresults:")
    for result in results:
        print(json.dumps(result))
    print(json.dumps({"charges": charges}))


if __name__ == "__main__":
    main()
