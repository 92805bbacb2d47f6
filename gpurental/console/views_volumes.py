"""The console's Volumes page: the account's volumes (a team's when acting for it), with
what each holds, where it is mounted, a form to make one, detach and delete; and their
snapshots, with snapshot, restore (into a new volume on any host) and delete."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.fleet.models import Host, HostStatus
from gpurental.rentals.selectors import instance_visible_to
from gpurental.teams import roles
from gpurental.teams.acting import account_of, require_role, role_refusal
from gpurental.volumes import snapshots
from gpurental.volumes.models import Snapshot, SnapshotStatus
from gpurental.volumes.selectors import volumes_of
from gpurental.volumes.services import (
    VolumeRefused,
    in_use,
    volume_create,
    volume_delete,
    volume_detach,
    volume_resize,
)


class VolumeForm(forms.Form):
    name = forms.CharField(max_length=63, label=gettext_lazy("Name"))
    size_gb = forms.IntegerField(min_value=1, max_value=16384, label=gettext_lazy("Size (GB)"))
    host = forms.ModelChoiceField(
        queryset=Host.objects.filter(status=HostStatus.ACTIVE).order_by("name"),
        to_field_name="name",
        label=gettext_lazy("Host"),
        help_text=gettext_lazy("Instances that mount it run on this host"),
    )


@login_required
def volumes(request):
    account = account_of(request)
    form = VolumeForm(request.POST or None)
    if request.method == "POST":
        require_role(request, roles.OPERATE)
    if request.method == "POST" and form.is_valid():
        try:
            volume = volume_create(account=account, actor=request.user, **form.cleaned_data)
        except VolumeRefused as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, _("Volume %(name)s created.") % {"name": volume.name})
            return redirect("volumes")
    rows = [(volume, in_use(volume)) for volume in volumes_of(account=account)]
    snapshots_of = list(_snapshots_of(account))
    return render(
        request,
        "console/volumes.html",
        {
            "form": form,
            "rows": rows,
            "may_operate": not role_refusal(request, roles.OPERATE),
            "snapshots": snapshots_of,
            # Something on its way: the page reloads itself to show the progress.
            "moving": any(s.status == SnapshotStatus.SAVING for s in snapshots_of)
            or any(v.status == "restoring" for v, _busy in rows),
            "snapshots_on": snapshots.configured(),
            "hosts": Host.objects.filter(status=HostStatus.ACTIVE).order_by("name"),
        },
    )


def _snapshots_of(account):
    return (
        Snapshot.objects.filter(account=account)
        .exclude(status=SnapshotStatus.DELETED)
        .select_related("volume", "instance")
    )


def _done(request, call, message: str, **names) -> None:
    try:
        call()
    except VolumeRefused as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, message % names)


@login_required
@require_POST
def volume_resize_view(request, volume_id):
    require_role(request, roles.OPERATE)
    volume = volumes_of(account=account_of(request)).filter(pk=volume_id).first()
    if volume is None:
        raise Http404("No such volume.")
    text = request.POST.get("size_gb", "").strip()
    if not text.isdigit():
        messages.error(request, _("Size: %(text)r is not a whole number of GB.") % {"text": text})
        return redirect("volumes")
    _done(
        request,
        lambda: volume_resize(volume=volume, size_gb=int(text), actor=request.user),
        _("Volume %(name)s is %(size)s GB now."),
        name=volume.name,
        size=text,
    )
    return redirect("volumes")


@login_required
@require_POST
def snapshot_create_view(request, volume_id):
    require_role(request, roles.OPERATE)
    volume = volumes_of(account=account_of(request)).filter(pk=volume_id).first()
    if volume is None:
        raise Http404("No such volume.")
    name = request.POST.get("name", "")
    _done(
        request,
        lambda: snapshots.snapshot_create(volume=volume, name=name, actor=request.user),
        _("Snapshot %(name)s of %(volume)s requested: its host uploads it."),
        name=name,
        volume=volume.name,
    )
    return redirect("volumes")


@login_required
@require_POST
def workspace_snapshot_view(request, instance_id):
    """A stopped instance's /workspace as a snapshot (its page's form)."""
    require_role(request, roles.OPERATE)
    instance = instance_visible_to(user=account_of(request), instance_id=instance_id)
    if instance is None or instance.user_id != account_of(request).pk:
        raise Http404("No such instance.")
    name = request.POST.get("name", "")
    _done(
        request,
        lambda: snapshots.workspace_snapshot_create(
            instance=instance, name=name, actor=request.user
        ),
        _("Snapshot %(name)s of its /workspace requested: its host uploads it (see Volumes)."),
        name=name,
    )
    return redirect("instance", instance_id=instance.pk)


@login_required
@require_POST
def snapshot_action_view(request, snapshot_id, action):
    require_role(request, roles.OPERATE)
    snapshot = _snapshots_of(account_of(request)).filter(pk=snapshot_id).first()
    if snapshot is None or action not in ("restore", "delete"):
        raise Http404("No such snapshot.")
    if action == "delete":
        _done(
            request,
            lambda: snapshots.snapshot_delete(snapshot=snapshot, actor=request.user),
            _("Snapshot %(name)s deleted."),
            name=snapshot.name,
        )
        return redirect("volumes")
    host = Host.objects.filter(name=request.POST.get("host", "")).first()
    name = request.POST.get("name", "")
    if host is None:
        messages.error(request, _("Choose one of the hosts listed for the new volume."))
        return redirect("volumes")
    _done(
        request,
        lambda: snapshots.volume_restore(
            snapshot=snapshot, host=host, name=name, actor=request.user
        ),
        _("Volume %(name)s is being restored on %(host)s."),
        name=name,
        host=host.name,
    )
    return redirect("volumes")


DONE = {
    "delete": (volume_delete, gettext_lazy("Volume %(name)s deleted with its data.")),
    "detach": (
        volume_detach,
        gettext_lazy("Volume %(name)s detached: the next launch on its host may mount it."),
    ),
}


@login_required
@require_POST
def volume_action_view(request, volume_id, action):
    """Delete or detach: the same services as the API's."""
    require_role(request, roles.OPERATE)
    volume = volumes_of(account=account_of(request)).filter(pk=volume_id).first()
    if volume is None or action not in DONE:
        raise Http404("No such volume.")
    service, done = DONE[action]
    try:
        service(volume=volume, actor=request.user)
    except VolumeRefused as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, done % {"name": volume.name})
    return redirect("volumes")
