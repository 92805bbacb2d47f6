"""``{% ssh_endpoint instance as ssh %}``: the instance's ssh command (sshroutes), and
``{% has_ssh_keys user as keys %}``, for the instance page."""

from django import template

from gpurental.accounts.models import SSHKey
from gpurental.gateway.sshroutes import ssh_endpoint as endpoint

register = template.Library()


@register.simple_tag
def ssh_endpoint(instance):
    return endpoint(instance)


@register.simple_tag
def has_ssh_keys(user):
    return SSHKey.objects.filter(user=user).exists()
