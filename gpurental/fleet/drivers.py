"""Which CUDA a host's NVIDIA driver can run, and whether an image fits it.

NVML reports the newest CUDA the driver supports as an integer (``nvmlSystemGetCudaDriverVersion``:
12040 is 12.4); the agent sends it with its topology (``topology["driver"]``) and the
heartbeat keeps it on the host (``Host.driver_cuda``). An image states the CUDA it was built
for (``ImageTemplate.cuda_version``, "12.1"); a CUDA program runs on any driver that
supports that release or a newer one, so placement refuses only a host whose driver
supports less. Simulated hosts have no driver and run the image's CPU build.
"""

from __future__ import annotations

import re

VERSION = re.compile(r"^(\d{1,2})\.(\d{1,2})$")


def cuda_int(version: str) -> int:
    """ "12.1" → 12010, NVML's form."""
    match = VERSION.match(version.strip())
    if match is None:
        raise ValueError(f"{version!r} is not a CUDA release like 12.1")
    return int(match.group(1)) * 1000 + int(match.group(2)) * 10


def cuda_text(value: int | None) -> str:
    """12040 → "12.4"; None → ""."""
    if not value:
        return ""
    return f"{value // 1000}.{value % 1000 // 10}"


def driver_of(topology: dict | None) -> tuple[str, int | None]:
    """(driver version, CUDA as NVML's integer) from the topology an agent sent."""
    driver = (topology or {}).get("driver")
    if not isinstance(driver, dict):
        return "", None
    cuda = driver.get("cuda")
    version = str(driver.get("version") or "")[:32]
    valid = isinstance(cuda, int) and not isinstance(cuda, bool) and 0 < cuda < 100_000
    return version, cuda if valid else None
