"""The console's Images page: the account's registry logins (a team's when acting for
it), which launches of its own images pull with, and how to launch one."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.images.selectors import registry_logins_of, saved_images_of
from gpurental.images.services import (
    ImageRefused,
    registry_credential_delete,
    registry_credential_save,
)
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.selectors import instance_visible_to
from gpurental.rentals.services.saving import image_save_request, saved_image_delete
from gpurental.teams import roles
from gpurental.teams.acting import account_of, require_role, role_refusal


class RegistryLoginForm(forms.Form):
    registry = forms.CharField(
        max_length=255,
        label=gettext_lazy("Registry"),
        widget=forms.TextInput(attrs={"placeholder": "ghcr.io"}),
        help_text=gettext_lazy("host[:port] of the registry"),
    )
    username = forms.CharField(max_length=255, strip=False, label=gettext_lazy("Username"))
    password = forms.CharField(
        max_length=4096,
        strip=False,
        label=gettext_lazy("Password or token"),
        widget=forms.PasswordInput,
        help_text=gettext_lazy("Stored encrypted, sent only to the host that pulls, never shown"),
    )


@login_required
def images(request):
    account = account_of(request)
    form = RegistryLoginForm(request.POST or None)
    if request.method == "POST":
        require_role(request, roles.ADMIN)
    if request.method == "POST" and form.is_valid():
        try:
            login = registry_credential_save(
                account=account, actor=request.user, **form.cleaned_data
            )
        except ImageRefused as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(
                request,
                _("Login %(username)s@%(registry)s saved.")
                % {"username": login.username, "registry": login.registry},
            )
            return redirect("images")
    return render(
        request,
        "console/images.html",
        {
            "form": form,
            "logins": registry_logins_of(account=account),
            "may_change": not role_refusal(request, roles.ADMIN),
            "may_operate": not role_refusal(request, roles.OPERATE),
            "saved_images": saved_images_of(account=account),
            "saving_on": bool(settings.PLATFORM_REGISTRY),
            "allowed": settings.CUSTOM_IMAGE_REGISTRIES,
            "max_gb": settings.CUSTOM_IMAGE_MAX_GB,
        },
    )


@login_required
@require_POST
def registry_login_delete(request, login_id):
    require_role(request, roles.ADMIN)
    login = registry_logins_of(account=account_of(request)).filter(pk=login_id).first()
    if login is None:
        raise Http404("No such registry login.")
    registry_credential_delete(credential=login, actor=request.user)
    messages.success(request, _("Login for %(registry)s deleted.") % {"registry": login.registry})
    return redirect("images")


@login_required
@require_POST
def instance_save_image(request, instance_id):
    require_role(request, roles.OPERATE)
    instance = instance_visible_to(user=account_of(request), instance_id=instance_id)
    if instance is None:
        raise Http404("No such instance.")
    try:
        image = image_save_request(
            instance=instance, name=request.POST.get("name", ""), actor=request.user
        )
    except (ImageRefused, RentalError) as exc:
        messages.error(request, exc.message)
        return redirect("instance", instance_id=instance.pk)
    messages.success(
        request,
        _("Saving %(name)s: its host commits and pushes it; it is listed here as it goes.")
        % {"name": image.name},
    )
    return redirect("images")


@login_required
@require_POST
def saved_image_delete_view(request, image_id):
    require_role(request, roles.OPERATE)
    image = saved_images_of(account=account_of(request)).filter(pk=image_id).first()
    if image is None:
        raise Http404("No such saved image.")
    try:
        saved_image_delete(image=image, actor=request.user)
    except ImageRefused as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, _("Saved image %(name)s deleted.") % {"name": image.name})
    return redirect("images")
