"""Reads of acceptance results: a host's history for staff, a measured figure for customers."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from statistics import median

from gpurental.acceptance.evaluate import headline, short_name
from gpurental.acceptance.models import AcceptanceRun, RunStatus
from gpurental.catalog.models import GPUModel
from gpurental.fleet.models import Host, HostStatus

COMPLETED = (RunStatus.PASSED, RunStatus.HELD)


def host_runs(*, host: Host, limit: int = 20) -> list[AcceptanceRun]:
    return list(host.acceptance_runs.all()[:limit])


def latest_passed_run(*, host: Host) -> AcceptanceRun | None:
    return host.acceptance_runs.filter(status=RunStatus.PASSED).order_by("-finished_at").first()


@dataclass(frozen=True)
class Measured:
    """'measured 94 % of nominal FP16' (median over ``hosts`` hosts, lowest ``lowest``)."""

    percent: float
    figure: str  # "FP16"
    hosts: int
    lowest: float
    on_cpu: bool  # the hosts have no NVIDIA GPU: the benchmark ran on their CPUs

    def __str__(self) -> str:
        text = f"measured {self.percent:.0f} % of nominal {self.figure}"
        return text + " (on CPU: simulated GPUs)" if self.on_cpu else text


def _measured(runs: list[AcceptanceRun]) -> Measured | None:
    rows = [(run, headline(run.figures)) for run in runs]
    rows = [(run, row) for run, row in rows if row is not None]
    if not rows:
        return None
    # One figure for everyone: the most common headline (FP16 on GPUs, FP32 on CPUs).
    label = Counter(row["label"] for _, row in rows).most_common(1)[0][0]
    percents = [row["percent"] for _, row in rows if row["label"] == label]
    return Measured(
        percent=median(percents),
        figure=short_name(label),
        hosts=len(percents),
        lowest=min(percents),
        on_cpu=all(run.device == "cpu" for run, _ in rows),
    )


def model_measured(*, gpu_model: GPUModel) -> Measured | None:
    """Over the active hosts with GPUs of this model, each host's latest passed run."""
    host_ids = (
        Host.objects.filter(status=HostStatus.ACTIVE, gpus__model=gpu_model)
        .values_list("pk", flat=True)
        .distinct()
    )
    runs = (
        AcceptanceRun.objects.filter(host_id__in=host_ids, status=RunStatus.PASSED)
        .order_by("host_id", "-finished_at")
        .distinct("host_id")
    )
    return _measured(list(runs))


def host_measured(*, host: Host | None) -> Measured | None:
    """The host's latest passed run, for the instance page."""
    if host is None:
        return None
    run = latest_passed_run(host=host)
    return _measured([run]) if run else None
