"""An image built for a CUDA release runs only where the host's NVIDIA driver supports it:
placement passes over hosts with older drivers, and a refusal says why (fleet.drivers)."""

from __future__ import annotations

import pytest

from gpurental.catalog.models import ImageTemplate
from gpurental.fleet.drivers import cuda_int, cuda_text
from gpurental.fleet.models import GPUSource
from gpurental.rentals.exceptions import NoCapacity
from gpurental.rentals.services.lifecycle import instance_launch


@pytest.fixture
def torch21(db):
    return ImageTemplate.objects.create(
        slug="pytorch-2.1.2",
        name="PyTorch 2.1.2",
        image="gpurental/pytorch:2.1.2-cuda",
        cuda_version="12.1",
    )


@pytest.fixture
def nvidia_hosts(make_host, a100):
    """An old driver (CUDA 11.8) with 2 GPUs, and a newer one (CUDA 12.4) with 8."""
    old = make_host("old-driver", a100, count=2, gpu_source=GPUSource.NVML, driver_cuda=11080)
    new = make_host("new-driver", a100, gpu_source=GPUSource.NVML, driver_cuda=12040)
    return old, new


def launch(django_capture_on_commit_callbacks, **kwargs):
    with django_capture_on_commit_callbacks(execute=True):
        return instance_launch(**kwargs)


def test_versions_read_both_ways():
    assert cuda_int("12.1") == 12010 and cuda_int("11.8") == 11080
    assert cuda_text(12040) == "12.4" and cuda_text(None) == ""
    with pytest.raises(ValueError, match="not a CUDA release"):
        cuda_int("12")


def test_a_cuda_12_image_goes_to_the_host_whose_driver_runs_it(
    alice, a100, nvidia_hosts, torch21, image, sent, django_capture_on_commit_callbacks
):
    old, new = nvidia_hosts
    # Best fit alone would pick the 2-GPU host, whose driver is too old.
    instance = launch(
        django_capture_on_commit_callbacks, user=alice, gpu_model=a100, gpu_count=2, image=torch21
    )
    assert instance.host == new
    # An image without CUDA goes anywhere.
    plain = launch(
        django_capture_on_commit_callbacks, user=alice, gpu_model=a100, gpu_count=2, image=image
    )
    assert plain.host == old


def test_a_refusal_names_the_image_its_cuda_and_the_drivers(
    alice, a100, make_host, torch21, sent, django_capture_on_commit_callbacks
):
    make_host("old-driver", a100, gpu_source=GPUSource.NVML, driver_cuda=11080)
    with pytest.raises(NoCapacity) as err:
        launch(
            django_capture_on_commit_callbacks,
            user=alice,
            gpu_model=a100,
            gpu_count=4,
            image=torch21,
        )
    assert err.value.field == "image"
    assert str(err.value) == (
        "pytorch-2.1.2 needs CUDA 12.1, and the 1 host(s) with 4× A100 free have NVIDIA "
        "drivers for CUDA 11.8 at most; choose an image for an older CUDA, or ask the "
        "operator to update their drivers"
    )


def test_simulated_hosts_and_unknown_drivers_are_not_held_back(
    alice, a100, make_host, torch21, sent, django_capture_on_commit_callbacks
):
    host = make_host("sim", a100)  # no driver: the image's CPU build runs
    instance = launch(
        django_capture_on_commit_callbacks, user=alice, gpu_model=a100, gpu_count=1, image=torch21
    )
    assert instance.host == host
