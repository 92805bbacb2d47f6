"""The BMC adapter against sushy-tools' Redfish emulator (its fake driver: no libvirt or
OpenStack needed), started as a subprocess on a free port, with basic auth on; and the
staff power services that record each action."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import bcrypt
import pytest
import requests

from gpurental.baremetal import secrets, services
from gpurental.baremetal.models import BareMetalHost, PowerEvent
from gpurental.baremetal.redfish import BMC, BMCError
from gpurental.rentals.exceptions import InvalidTransition

USER, PASSWORD = "admin", "s3cret-bmc"
SYSTEM = "27946b59-9e44-4fa7-8e91-f3527a1ef094"  # the fake driver's default system


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """sushy-emulator --fake on 127.0.0.1:<free port>, behind basic auth."""
    exe = shutil.which("sushy-emulator", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("sushy-emulator is not installed: pip install -r requirements.lock")
    workdir = tmp_path_factory.mktemp("redfish")
    digest = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    (workdir / "htpasswd").write_text(f"{USER}:{digest}\n")
    port = _free_port()
    (workdir / "emulator.conf").write_text(
        "SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_AUTH_FILE = '{workdir / 'htpasswd'}'\n"
        f"SUSHY_EMULATOR_STATE_DIR = '{workdir / 'state'}'\n"
    )
    log = open(workdir / "emulator.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(  # noqa: S603 - our own venv's executable
        [exe, "--config", str(workdir / "emulator.conf"), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                requests.get(f"{url}/redfish/v1/", timeout=1)
                break
            except requests.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"sushy-emulator did not start: {(workdir / 'emulator.log').read_text()}"
                    ) from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def _wait_for(bmc: BMC, state: str, timeout: float = 20) -> str:
    # The fake driver applies power changes 1–11 s later, as real hardware takes time.
    deadline = time.monotonic() + timeout
    while (seen := bmc.power_state()) != state and time.monotonic() < deadline:
        time.sleep(0.5)
    return seen


@pytest.mark.slow
def test_power_state_on_off_and_cycle_through_redfish(emulator):
    bmc = BMC(url=emulator, username=USER, password=PASSWORD)
    assert bmc.power_state() == "Off"  # the fake system starts off
    bmc.power_on()
    assert _wait_for(bmc, "On") == "On"
    bmc.power_cycle()  # ForceRestart on this emulator: off, then on again
    assert _wait_for(bmc, "On") == "On"
    bmc.power_off()
    assert _wait_for(bmc, "Off") == "Off"


@pytest.mark.slow
def test_a_named_system_and_refusals_say_what_is_wrong(emulator):
    named = BMC(
        url=f"{emulator}/redfish/v1",
        username=USER,
        password=PASSWORD,
        system_id=f"/redfish/v1/Systems/{SYSTEM}",
    )
    assert named.power_state() in ("On", "Off")
    with pytest.raises(BMCError, match="refused the login"):
        BMC(url=emulator, username=USER, password="wrong").power_state()
    with pytest.raises(BMCError, match="did not answer as Redfish"):
        BMC(url=f"http://127.0.0.1:{_free_port()}", username=USER, password=PASSWORD).power_state()


@pytest.mark.slow
def test_staff_power_actions_use_the_stored_password_and_leave_events(
    emulator, carol, alice, whole_host_plan, leasable
):
    now = datetime.now(UTC)
    host = leasable("node1", last_heartbeat_at=now)
    row = services.baremetal_host_set(
        host=host, bmc_url=emulator, bmc_username=USER, bmc_password=PASSWORD
    )
    stored = BareMetalHost.objects.get(pk=row.pk).bmc_password_encrypted
    assert PASSWORD not in stored and secrets.decrypt(stored) == PASSWORD

    read = services.host_power_read(host=host, actor=carol)
    assert read.ok and read.power_state in ("On", "Off") and read.actor == carol
    on = services.host_power_on(host=host, actor=carol)
    assert on.ok
    # While a tenant holds the host, staff cannot power it off or cycle it.
    services.lease_book(user=alice, plan=whole_host_plan, end=now + timedelta(hours=2), now=now)
    with pytest.raises(InvalidTransition, match="leased to a tenant"):
        services.host_power_cycle(host=host, actor=carol)
    # A wrong password is recorded as a failed action with the BMC's reason.
    services.baremetal_host_set(
        host=host, bmc_url=emulator, bmc_username=USER, bmc_password="wrong"
    )
    failed = services.host_power_read(host=host, actor=carol)
    assert not failed.ok and "refused the login" in failed.detail
    assert list(PowerEvent.objects.order_by("id").values_list("action", "ok")) == [
        ("read", True),
        ("on", True),
        ("read", False),
    ]


def test_a_password_stored_under_another_key_is_reported_not_leaked(settings):
    token = secrets.encrypt("pw")
    settings.BMC_SECRET_KEY = "another-key-entirely"
    with pytest.raises(secrets.SecretUnreadable, match="enter it again"):
        secrets.decrypt(token)


def test_the_admin_stores_the_bmc_password_encrypted_and_never_in_the_audit_log(
    client, carol, leasable
):
    from gpurental.accounts.models import AuditEvent

    host = leasable("node1", last_heartbeat_at=datetime.now(UTC))
    row = BareMetalHost.objects.get(host=host)
    client.force_login(carol)
    response = client.post(
        f"/admin/baremetal/baremetalhost/{row.pk}/change/",
        {
            "host": host.pk,
            "leasable": "on",
            "bmc_url": "https://10.0.0.5",
            "bmc_username": USER,
            "bmc_password": PASSWORD,
            "bmc_system_id": "",
            "bmc_verify_tls": "on",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    row.refresh_from_db()
    assert secrets.decrypt(row.bmc_password_encrypted) == PASSWORD
    assert PASSWORD not in row.bmc_password_encrypted
    logged = list(AuditEvent.objects.values_list("changes", flat=True))
    assert logged and all(PASSWORD not in str(changes) for changes in logged)
    page = client.get(f"/admin/baremetal/baremetalhost/{row.pk}/change/").content.decode()
    assert PASSWORD not in page and row.bmc_password_encrypted not in page


@pytest.mark.slow
def test_the_admin_power_action_goes_through_the_bmc(emulator, client, carol, leasable):
    host = leasable("node1", last_heartbeat_at=datetime.now(UTC))
    row = services.baremetal_host_set(
        host=host, bmc_url=emulator, bmc_username=USER, bmc_password=PASSWORD
    )
    client.force_login(carol)
    response = client.post(
        "/admin/baremetal/baremetalhost/",
        {"action": "power_read", "_selected_action": [row.pk]},
        follow=True,
    )
    assert "read done; power" in response.content.decode()
    event = PowerEvent.objects.get()
    assert (event.action, event.ok, event.actor) == ("read", True, carol)
