"""{% load acceptance %}: measured-against-nominal and host builds on the customer pages."""

from django import template

from gpurental.acceptance import selectors
from gpurental.fleet.selectors import host_classes as fleet_host_classes

register = template.Library()


@register.simple_tag
def model_measured(gpu_model):
    """The catalog row's "measured 94 % of nominal FP16", or None before any host passed."""
    return selectors.model_measured(gpu_model=gpu_model)


@register.simple_tag
def host_measured(host):
    return selectors.host_measured(host=host)


@register.simple_tag
def host_classes(gpu_model):
    """[("8× H100, NVSwitch, 4× 400 Gb/s", number of hosts), …]"""
    return fleet_host_classes(gpu_model=gpu_model)
