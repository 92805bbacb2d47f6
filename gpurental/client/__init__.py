"""Python SDK and CLI for gpurental. Imports nothing from Django.

    from gpurental.client import Client
    client = Client(api_key="gpr_...", base_url="http://127.0.0.1:8000")
    instance = client.create_instance(gpu_type="A10G", framework="pytorch-2.1",
                                      model_repo="huggingface")
    instance.connect()   # waits until running, returns the JupyterLab URL
    group = client.create_group(open("group.hcl").read(), format="hcl")  # elastic group

The command line is ``gpurental`` (``gpurental.client.cli``).
"""

from gpurental.client.client import Client
from gpurental.client.errors import (
    AuthenticationError,
    Conflict,
    ConnectionError,
    GpuRentalError,
    InvalidState,
    LaunchFailed,
    NoCapacity,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    ServerError,
    Timeout,
    ValidationError,
)
from gpurental.client.groups import Group, GroupEvent
from gpurental.client.models import STATUSES, Instance, InstanceEvent, Reservation

__all__ = [
    "STATUSES",
    "AuthenticationError",
    "Client",
    "Conflict",
    "ConnectionError",
    "GpuRentalError",
    "Group",
    "GroupEvent",
    "Instance",
    "InstanceEvent",
    "Reservation",
    "InvalidState",
    "LaunchFailed",
    "NoCapacity",
    "NotFound",
    "PermissionDenied",
    "QuotaExceeded",
    "RateLimited",
    "ServerError",
    "Timeout",
    "ValidationError",
]
