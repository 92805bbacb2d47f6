"""factory_boy factories for the domain."""

import uuid
from datetime import timedelta
from decimal import Decimal

import factory
from django.utils import timezone
from psycopg.types.range import Range

from gpurental.accounts.models import User
from gpurental.catalog.models import GPUModel, ImageTemplate, Interconnect, Plan
from gpurental.fleet.hostlink import seal_root
from gpurental.fleet.models import GPU, GPUSource, Host
from gpurental.rentals.models import Allocation, Instance, InstanceStatus


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        skip_postgeneration_save = True

    email = factory.Sequence(lambda n: f"user{n}@example.com")
    full_name = factory.Faker("name")
    password = factory.PostGenerationMethodCall("set_password", "correct horse battery staple")

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class GPUModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GPUModel
        django_get_or_create = ["slug"]

    slug = "a100-80gb-sxm"
    name = "A100 80GB SXM"
    short_name = "A100"
    memory_gb = 80
    fp16_tflops = Decimal("312.0")
    bf16_tflops = Decimal("312.0")
    fp32_tflops = Decimal("19.5")
    memory_bandwidth_gbs = 2039
    interconnect = Interconnect.NVSWITCH
    nvlink_bandwidth_gbs = 600


class PlanFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Plan
        django_get_or_create = ["gpu_model", "gpu_count"]

    slug = factory.Sequence(lambda n: f"plan-{n}")
    name = factory.LazyAttribute(lambda p: f"{p.gpu_count}× {p.gpu_model.short_name}")
    gpu_model = factory.SubFactory(GPUModelFactory)
    gpu_count = 1
    vcpus = 8
    memory_gb = 32
    disk_gb = 100
    hourly_rate = Decimal("2.2000")


class ImageTemplateFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ImageTemplate
        django_get_or_create = ["slug"]

    slug = "jupyter-cpu"
    name = "JupyterLab"
    image = "gpurental/jupyter-cpu:latest"


class HostFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Host

    name = factory.Sequence(lambda n: f"host{n}")
    gpu_source = GPUSource.SIMULATED
    token_hash = "0" * 64
    # Keys from a token nobody has: commands to it are signed, its messages never verify.
    keys_sealed = factory.LazyFunction(lambda: seal_root(uuid.uuid4().hex))
    last_heartbeat_at = factory.LazyFunction(timezone.now)


class GPUFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GPU

    host = factory.SubFactory(HostFactory)
    index = factory.Sequence(lambda n: n % 8)
    uuid = factory.Sequence(lambda n: f"GPU-test-{n:06d}")
    model = factory.SubFactory(GPUModelFactory)
    memory_mb = 81920


class InstanceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Instance

    user = factory.SubFactory(UserFactory)
    plan = factory.SubFactory(PlanFactory)
    gpu_model = factory.SelfAttribute("plan.gpu_model")
    gpu_count = factory.SelfAttribute("plan.gpu_count")
    image = factory.SubFactory(ImageTemplateFactory)
    status = InstanceStatus.PENDING


def period(start, hours: float | None = None) -> Range:
    """[start, start + hours) or [start, ∞) when hours is None."""
    end = None if hours is None else start + timedelta(hours=hours)
    return Range(start, end, "[)")


class AllocationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Allocation

    gpu = factory.SubFactory(GPUFactory)
    instance = factory.SubFactory(InstanceFactory)
    period = factory.LazyFunction(lambda: period(timezone.now(), 1))


class GroupFactory(factory.django.DjangoModelFactory):
    """An elastic group row (tests that need one without gpurental.groups' services)."""

    class Meta:
        model = "groups.Group"

    user = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"group-{n}")
    image = factory.SubFactory(ImageTemplateFactory)
    plan = factory.SubFactory(PlanFactory)
    port = 8000
