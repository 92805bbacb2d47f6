"""Host acceptance: asking for a benchmark run, recording its results, and what they mean
for the host (active, or held back with the failing figures named).

The host's status belongs to ``fleet.lifecycle``; this module calls its named transitions
(``host_acceptance_start``, ``host_acceptance_pass``, ``host_acceptance_hold``), which write
the audit rows. Each run's own changes are audited here.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, transaction

from gpurental import protocol
from gpurental.acceptance import evaluate
from gpurental.acceptance.models import (
    NOMINAL_FIELDS,
    OPEN_STATUSES,
    AcceptanceRun,
    NominalSpec,
    RunReason,
    RunStatus,
)
from gpurental.acceptance.specsheets import CPU_SPEC, GPU_SPECS
from gpurental.accounts.models import User
from gpurental.accounts.services import audit_record
from gpurental.catalog.models import GPUModel
from gpurental.fleet import hostlink
from gpurental.fleet.hostlink import MessageRefused, refuse_message
from gpurental.fleet.lifecycle import (
    host_acceptance_hold,
    host_acceptance_pass,
    host_acceptance_start,
)
from gpurental.fleet.models import GPUSource, Host, HostStatus

log = logging.getLogger(__name__)


class AcceptanceRefused(Exception):
    """A run that cannot be asked for now; the message says why, for staff."""


# --- nominal figures ------------------------------------------------------------


def nominal_cpu_ensure() -> NominalSpec:
    try:
        with transaction.atomic():
            spec, _ = NominalSpec.objects.get_or_create(is_cpu=True, defaults=CPU_SPEC)
    except IntegrityError:  # created meanwhile by another worker
        spec = NominalSpec.objects.get(is_cpu=True)
    return spec


def nominal_gpu_ensure(*, gpu_model: GPUModel) -> NominalSpec | None:
    """The model's nominal figures; seeded from the spec sheet the first time, None when no
    spec sheet knows the model (staff then add one)."""
    spec = NominalSpec.objects.filter(gpu_model=gpu_model).first()
    if spec is not None:
        return spec
    sheet = next((GPU_SPECS[n] for n in gpu_model.nvml_names or [] if n in GPU_SPECS), None)
    if sheet is None:
        return None
    try:
        with transaction.atomic():
            spec, _ = NominalSpec.objects.get_or_create(gpu_model=gpu_model, defaults=sheet)
    except IntegrityError:
        spec = NominalSpec.objects.get(gpu_model=gpu_model)
    return spec


def _host_gpu_model(host: Host) -> tuple[GPUModel | None, int]:
    gpus = list(host.gpus.filter(is_enabled=True).select_related("model"))
    if not gpus:
        return None, 0
    model_id, _ = Counter(g.model_id for g in gpus).most_common(1)[0]
    return next(g.model for g in gpus if g.model_id == model_id), len(gpus)


def _nic_gbps(topology: dict) -> float | None:
    speeds = [nic.get("speed_mbps") for nic in (topology or {}).get("nics") or []]
    speeds = [s for s in speeds if isinstance(s, int) and s > 0]
    return max(speeds) / 1000 if speeds else None


# --- asking for a run -------------------------------------------------------------


def _image_for(host: Host) -> str:
    if host.gpu_source == GPUSource.NVML:
        return settings.ACCEPTANCE_IMAGE_GPU
    return settings.ACCEPTANCE_IMAGE_CPU


def _peers(host: Host, now: datetime) -> list[dict]:
    """A few active, heart-beating hosts to measure the network against (iperf3 -s there)."""
    fresh = now - timedelta(seconds=settings.HOST_OFFLINE_AFTER)
    hosts = (
        Host.objects.filter(status=HostStatus.ACTIVE, last_heartbeat_at__gte=fresh)
        .exclude(pk=host.pk)
        .order_by("name")[: settings.ACCEPTANCE_NETWORK_PEERS]
    )
    return [
        {"name": h.name, "address": h.address, "port": settings.ACCEPTANCE_IPERF3_PORT}
        for h in hosts
    ]


def _busy_instances(host: Host) -> int:
    from gpurental.rentals.models import Instance
    from gpurental.rentals.selectors import HOLDING

    return Instance.objects.filter(host=host, status__in=HOLDING).count()


def acceptance_run_request(
    *,
    host: Host,
    reason: str,
    now: datetime,
    actor: User | None = None,
    smoke: bool | None = None,
) -> AcceptanceRun:
    """Put the host in acceptance (no new placements) and send its agent the benchmark.
    A run already queued or running is returned as it is. Staff asking on a host with
    instances on it are refused: the benchmark would measure their load, not the host."""
    with transaction.atomic():
        host = Host.objects.select_for_update().get(pk=host.pk)
        open_run = host.acceptance_runs.filter(status__in=OPEN_STATUSES).first()
        if open_run is not None:
            return open_run
        if reason == RunReason.ON_DEMAND and (busy := _busy_instances(host)):
            raise AcceptanceRefused(
                f"{host.name} has {busy} instance(s) on it: drain it and wait for them to "
                "stop, then run the benchmark (it needs the whole host)"
            )
        run = AcceptanceRun.objects.create(
            host=host,
            reason=reason,
            requested_by=actor,
            requested_at=now,
            image=_image_for(host),
            smoke=settings.ACCEPTANCE_SMOKE if smoke is None else smoke,
            threshold=Decimal(str(settings.ACCEPTANCE_THRESHOLD)),
            gemm_threshold=Decimal(str(settings.ACCEPTANCE_THRESHOLD_GEMM)),
        )
        host = host_acceptance_start(
            host=host,
            actor=actor,
            reason=f"acceptance benchmark ({run.get_reason_display().lower()})",
        )
        audit_record(
            action="acceptance.requested",
            actor=actor,
            obj=host,
            changes={"run": str(run.id), "reason": reason, "image": run.image},
        )
        gpus = list(host.gpus.filter(is_enabled=True).order_by("index"))
        payload = {
            "run_id": str(run.id),
            "image": run.image,
            "smoke": run.smoke,
            "gpu_source": host.gpu_source,
            "gpu_indices": [g.index for g in gpus],
            "gpu_uuids": [g.uuid for g in gpus],
            "cpu_count": 0,  # the whole host: the agent knows how many it has
            "memory_mb": settings.ACCEPTANCE_MEMORY_MB,
            "timeout_s": settings.ACCEPTANCE_RUN_TIMEOUT,
            "peers": _peers(host, now),
            "iperf3_seconds": settings.ACCEPTANCE_IPERF3_SECONDS,
        }
        hostlink.send(
            host, protocol.ACCEPTANCE_RUN, expires=settings.ACCEPTANCE_RUN_TIMEOUT, **payload
        )
    return run


def acceptance_on_join(*, host: Host, now: datetime) -> AcceptanceRun | None:
    """A host in acceptance that has never been benchmarked: its agent is up, run it."""
    if host.status != HostStatus.ACCEPTANCE or host.acceptance_runs.exists():
        return None
    return acceptance_run_request(host=host, reason=RunReason.JOIN, now=now)


# --- what the agent reports --------------------------------------------------------


def acceptance_report_receive(*, message: dict, now: datetime) -> AcceptanceRun:
    """A report as it comes off the control queue: verified, then recorded."""
    host, payload = hostlink.receive(message=message, what="acceptance report", now=now)
    run = AcceptanceRun.objects.filter(pk=str(payload.get("run_id", "")), host=host).first()
    if run is None:
        # A host reports only on its own runs.
        refuse_message(name=host.name, what="acceptance report", why="no such run", now=now)
    kind, data = payload.get("kind"), payload.get("data") or {}
    if kind not in protocol.ACCEPTANCE_KINDS:
        refuse_message(name=host.name, what="acceptance report", why=f"kind {kind!r}", now=now)
    if kind == "started":
        return acceptance_run_start(run=run, now=now)
    if kind == "failed":
        return acceptance_run_fail(run=run, reason=str(data.get("reason", ""))[:4000], now=now)
    result, network = data.get("result"), data.get("network") or []
    if not isinstance(result, dict) or not isinstance(network, list):
        return acceptance_run_fail(run=run, reason="the agent sent a malformed result", now=now)
    return acceptance_run_record(run=run, result=result, network=network, now=now)


def acceptance_run_start(*, run: AcceptanceRun, now: datetime) -> AcceptanceRun:
    changed = AcceptanceRun.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
        status=RunStatus.RUNNING, started_at=now
    )
    if changed:
        audit_record(action="acceptance.started", obj=run.host, changes={"run": str(run.id)})
    run.refresh_from_db()
    return run


def _previous_figures(run: AcceptanceRun, device: str) -> list[dict]:
    previous = (
        AcceptanceRun.objects.filter(
            host=run.host, device=device, status__in=(RunStatus.PASSED, RunStatus.HELD)
        )
        .exclude(pk=run.pk)
        .order_by("-finished_at")
        .first()
    )
    return previous.figures if previous else []


def acceptance_run_record(
    *, run: AcceptanceRun, result: dict, network: list[dict], now: datetime
) -> AcceptanceRun:
    """Compare the figures with nominal; pass → host active, below threshold → held back
    with the failing figures named. Recording the same result twice changes nothing."""
    with transaction.atomic():
        run = AcceptanceRun.objects.select_for_update().select_related("host").get(pk=run.pk)
        if run.status not in OPEN_STATUSES:
            return run
        host = run.host
        device = str(result.get("device", ""))
        model, gpu_count = _host_gpu_model(host)
        expected = "cuda" if host.gpu_source == GPUSource.NVML else "cpu"
        if device == "cpu":
            spec = nominal_cpu_ensure()
        else:
            spec = nominal_gpu_ensure(gpu_model=model) if model is not None else None
        figures, failing = evaluate.figures_evaluate(
            result=result,
            network=network,
            nominal={f: getattr(spec, f) for f in NOMINAL_FIELDS} if spec else None,
            per_cpu_core=bool(spec and spec.per_cpu_core),
            nic_gbps=_nic_gbps(host.topology),
            threshold=float(run.threshold),
            gemm_threshold=float(run.gemm_threshold),
            expected_device=expected,
            expected_gpus=gpu_count,
            previous=_previous_figures(run, device),
            regression_tolerance=settings.ACCEPTANCE_REGRESSION_TOLERANCE,
        )
        run.status = RunStatus.HELD if failing else RunStatus.PASSED
        run.device, run.figures, run.failing = device[:8], figures, failing
        run.raw = {"result": result, "network": network}
        run.started_at = run.started_at or now
        run.finished_at = now
        run.save()
        audit_record(
            action=f"acceptance.{run.status}",
            obj=host,
            changes={"run": str(run.id), "failing": failing},
        )
        if failing:
            why = "; ".join(_failing_text(f) for f in figures if f["passed"] is False)
            host_acceptance_hold(
                host=host, reason=f"acceptance below {run.threshold:.0%} of nominal: {why}"
            )
        else:
            host_acceptance_pass(host=host, reason="acceptance benchmark passed")
    return run


def _failing_text(row: dict) -> str:
    if row.get("percent") is not None:
        return f"{row['label']} {row['percent']:g} %"
    return f"{row['label']}: {row['note']}"


def acceptance_run_fail(*, run: AcceptanceRun, reason: str, now: datetime) -> AcceptanceRun:
    """The benchmark could not run (no image, no Docker, it crashed, no answer in time):
    the host is held back with that reason; staff fix it and run again."""
    with transaction.atomic():
        run = AcceptanceRun.objects.select_for_update().select_related("host").get(pk=run.pk)
        if run.status not in OPEN_STATUSES:
            return run
        run.status, run.error, run.finished_at = RunStatus.FAILED, reason, now
        run.save(update_fields=["status", "error", "finished_at"])
        audit_record(
            action="acceptance.failed", obj=run.host, changes={"run": str(run.id), "why": reason}
        )
        host_acceptance_hold(
            host=run.host, reason=f"acceptance benchmark could not run: {reason}"[:1000]
        )
    return run


def acceptance_runs_expire(*, now: datetime) -> list[AcceptanceRun]:
    """Runs with no result after ACCEPTANCE_RUN_TIMEOUT (plus a minute for the queue) fail."""
    cutoff = now - timedelta(seconds=settings.ACCEPTANCE_RUN_TIMEOUT + 60)
    expired = []
    for run in AcceptanceRun.objects.filter(status__in=OPEN_STATUSES, requested_at__lt=cutoff):
        expired.append(
            acceptance_run_fail(
                run=run,
                reason=f"no result within {settings.ACCEPTANCE_RUN_TIMEOUT} s "
                "(is the host's agent running and up to date?)",
                now=now,
            )
        )
    return expired


__all__ = [
    "AcceptanceRefused",
    "MessageRefused",
    "acceptance_on_join",
    "acceptance_report_receive",
    "acceptance_run_fail",
    "acceptance_run_record",
    "acceptance_run_request",
    "acceptance_run_start",
    "acceptance_runs_expire",
    "nominal_cpu_ensure",
    "nominal_gpu_ensure",
]
