"""The console's SSH keys page: list, add and delete one's own SSH public keys."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.accounts.models import SSHKey
from gpurental.accounts.services import ssh_key_add, ssh_key_delete
from gpurental.accounts.sshkeys import SSHKeyRefused


class SSHKeyForm(forms.Form):
    public_key = forms.CharField(
        max_length=16_384,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "ssh-ed25519 AAAA… you@laptop"}),
        label=gettext_lazy("Public key"),
        help_text=gettext_lazy(
            "The contents of ~/.ssh/id_ed25519.pub (the public key, never the private one)"
        ),
    )
    name = forms.CharField(
        max_length=100,
        required=False,
        label=gettext_lazy("Name"),
        help_text=gettext_lazy("Default: the key's comment"),
    )


@login_required
def ssh_keys(request):
    form = SSHKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            key = ssh_key_add(
                user=request.user,
                public_key=form.cleaned_data["public_key"],
                name=form.cleaned_data["name"],
            )
        except SSHKeyRefused as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(
                request,
                _("SSH key %(name)s added (%(fingerprint)s).")
                % {"name": key.name, "fingerprint": key.fingerprint},
            )
            return redirect("ssh_keys")
    return render(
        request,
        "console/ssh_keys.html",
        {
            "form": form,
            "keys": SSHKey.objects.filter(user=request.user),
            "gateway_host": settings.SSH_GATEWAY_HOST,
            "gateway_port": settings.SSH_GATEWAY_PORT,
        },
    )


@login_required
@require_POST
def ssh_key_delete_view(request, key_id):
    key = get_object_or_404(SSHKey, pk=key_id, user=request.user)
    ssh_key_delete(key=key, actor=request.user)
    messages.success(request, _("SSH key %(name)s deleted.") % {"name": key.name})
    return redirect("ssh_keys")
