"""The browser console (customers) and the fleet dashboard (staff). Thin views: forms
in, one service or selector call, a template out."""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
import secrets

from django.conf import settings
from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import Http404, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.accounts.models import ApiKey
from gpurental.accounts.services import (
    ApiKeyRefused,
    api_key_create,
    api_key_revoke,
    attempt_allowed,
    audit_record,
    audit_record_anonymous,
    signup_confirm,
    signup_pending,
    signup_start,
)
from gpurental.addresses import client_ip
from gpurental.billing import pricing, reports
from gpurental.billing.selectors import operator_zone
from gpurental.catalog.selectors import catalog_rows, image_matrix
from gpurental.console import selectors
from gpurental.console.forms import ApiKeyForm, LaunchForm, MonthForm, ReservationForm, SignupForm
from gpurental.fleet.lifecycle import STAFF_ACTIONS as HOST_TRANSITIONS
from gpurental.fleet.models import Host, HostStatus
from gpurental.gateway import tickets
from gpurental.rentals.exceptions import RentalError
from gpurental.rentals.selectors import instance_visible_to, reservations_visible_to
from gpurental.rentals.services import lifecycle, reservations
from gpurental.teams import roles
from gpurental.teams.acting import account_of, require_role, role_refusal
from gpurental.teams.selectors import teams_of

ACTIONS = {
    "stop": lifecycle.instance_stop,
    "start": lifecycle.instance_start,
    "start-without-gpus": functools.partial(lifecycle.instance_start, without_gpus=True),
    "restart": lifecycle.instance_restart,
    "terminate": lifecycle.instance_terminate,
}
REQUESTED = {
    "stop": gettext_lazy("Stop requested."),
    "start": gettext_lazy("Start requested."),
    "start-without-gpus": gettext_lazy("Start without GPUs requested."),
    "restart": gettext_lazy("Restart requested."),
    "terminate": gettext_lazy("Terminate requested."),
}


def home(request):
    filters = {k: request.GET.get(k, "") for k in ("interconnect", "min_vram", "q")}
    return render(
        request,
        "console/home.html",
        {"rows": catalog_rows(**filters), "filters": filters, "images": image_matrix()},
    )


def signup(request):
    if request.user.is_authenticated:
        return redirect("dashboard")
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        signup_start(
            email=data["email"],
            password=data["password1"],
            full_name=data["full_name"],
            company=data["company"],
            ip=client_ip(request),
        )
        return render(request, "registration/signup_done.html", {"email": data["email"]})
    return render(request, "registration/signup.html", {"form": form})


def signup_confirm_view(request, token: str):
    """The link from the confirmation e-mail: a button (a mail scanner's GET creates nothing)."""
    pending = signup_pending(token=token)
    if request.method == "POST" and pending is not None:
        user = signup_confirm(token=token, ip=client_ip(request))
        if user is not None:
            login(request, user, backend="gpurental.accounts.backends.PersonBackend")
            messages.success(request, _("Welcome! Your account is ready."))
            return redirect("dashboard")
        pending = None
    return render(request, "registration/signup_confirm.html", {"pending": pending})


@login_required
def dashboard(request):
    return render(
        request, "console/dashboard.html", selectors.dashboard_context(user=account_of(request))
    )


@login_required
def dashboard_instances(request):
    """The instance table alone: the dashboard refreshes it every few seconds (htmx)."""
    return render(
        request,
        "console/_instance_rows.html",
        selectors.dashboard_context(user=account_of(request)),
    )


@login_required
def launch(request):
    initial = {
        k: request.GET[k]
        for k in ("gpu_model", "gpu_count", "image", "own_image", "workspace_from")
        if k in request.GET
    }
    form = LaunchForm(request.POST or None, initial=initial, account=account_of(request))
    if request.method == "POST":
        require_role(request, roles.OPERATE)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            instance = lifecycle.instance_launch(
                user=account_of(request),
                image=data["image"],
                image_ref=data.get("image_ref", ""),
                gpu_model=data["gpu_model"],
                gpu_count=data["gpu_count"],
                name=data["name"],
                hf_model=data.get("model", ""),
                volumes=[(data["volume"], data["mount_path"] or "/data")]
                if data.get("volume")
                else None,
                workspace_from=data.get("workspace_from"),
                zone=data.get("zone"),
            )
        except RentalError as exc:
            field = "volume" if exc.field == "volumes" else exc.field
            form.add_error(field if field in form.fields else None, exc.message)
        else:
            return redirect("instance", instance_id=instance.pk)
    return render(request, "console/launch.html", {"form": form, "prices": selectors.price_table()})


def _own_or_404(request, instance_id, *, operate: bool = False):
    account = account_of(request)
    instance = instance_visible_to(user=account, instance_id=instance_id)
    if instance is None and request.user.is_staff:  # staff's powers whatever they act as
        instance = instance_visible_to(user=request.user, instance_id=instance_id)
    if instance is None:
        raise Http404("No such instance.")
    if operate and instance.user_id == account.pk:
        require_role(request, roles.OPERATE)
    return instance


@login_required
def instance_detail(request, instance_id):
    instance = _own_or_404(request, instance_id)
    return render(
        request,
        "console/instance.html",
        # A team's viewer reads it like staff would: no way in.
        selectors.instance_context(
            instance=instance,
            viewer=request.user if role_refusal(request, roles.OPERATE) else account_of(request),
        ),
    )


@login_required
@require_POST
def instance_action(request, instance_id, action):
    instance = _own_or_404(request, instance_id, operate=True)
    service = ACTIONS.get(action)
    if service is None:
        raise Http404("No such action.")
    try:
        service(instance=instance, actor=request.user)
    except RentalError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, REQUESTED[action])
    return redirect("instance", instance_id=instance.pk)


@login_required
@require_POST
def instance_auto_recover(request, instance_id):
    """Auto-recover on or off: the same service as the API's."""
    instance = _own_or_404(request, instance_id, operate=True)
    enabled = request.POST.get("enabled") == "1"
    try:
        lifecycle.instance_set_auto_recover(instance=instance, enabled=enabled, actor=request.user)
    except RentalError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            _("Auto-recover is on: if its host is lost, it runs again on another host.")
            if enabled
            else _("Auto-recover is off: if its host is lost, it waits for that host."),
        )
    return redirect("instance", instance_id=instance.pk)


@login_required
@require_POST
def instance_idle_policy(request, instance_id):
    """Stop after N idle minutes (0 = off): the same service as the API's."""
    instance = _own_or_404(request, instance_id, operate=True)
    text = request.POST.get("idle_stop_minutes", "").strip()
    try:
        minutes = int(text)
        lifecycle.instance_set_idle_policy(instance=instance, minutes=minutes, actor=request.user)
    except ValueError:
        messages.error(
            request,
            _("idle_stop_minutes: %(text)r is not a whole number of minutes") % {"text": text},
        )
    except RentalError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            _("Idle auto-stop: after %(minutes)s idle minutes.") % {"minutes": minutes}
            if minutes
            else _("Idle auto-stop is off."),
        )
    return redirect("instance", instance_id=instance.pk)


@login_required
def instance_open(request, instance_id):
    """One click to JupyterLab (or another HTTP port the image declares, ``?port=``): only
    the owner, only while it runs, through the gateway with a one-time ticket."""
    instance = _own_or_404(request, instance_id, operate=True)
    if instance.user_id != account_of(request).pk:
        raise Http404("No such instance.")
    port = request.GET.get("port", "")
    if port and not port.isdigit():
        messages.error(request, _("port: %(port)r is not a port number.") % {"port": port})
        return redirect("instance", instance_id=instance.pk)
    try:
        ticket = tickets.connect(
            user=request.user, instance=instance, port=int(port) if port else None
        )
    except RentalError as exc:
        messages.error(request, exc.message)
        return redirect("instance", instance_id=instance.pk)
    response = HttpResponseRedirect(ticket.url)
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "no-referrer"
    return response


@login_required
def api_keys(request):
    teams = teams_of(user=request.user)
    acting = getattr(request, "team", None)
    initial = {"team": acting.slug if acting else ""}
    form = ApiKeyForm(request.POST or None, user=request.user, teams=teams, initial=initial)
    new_key = None
    if request.method == "POST" and form.is_valid():
        days = form.cleaned_data["expires_in_days"]
        chosen = {team.slug: team for team, _role in teams}.get(form.cleaned_data["team"])
        try:
            _key, new_key = api_key_create(
                user=request.user,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                expires_at=timezone.now() + dt.timedelta(days=days) if days else None,
                team=chosen,
            )
        except ApiKeyRefused as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            form = ApiKeyForm(user=request.user, teams=teams, initial=initial)
    keys = ApiKey.objects.filter(user=request.user).select_related("team")
    return render(
        request, "console/api_keys.html", {"form": form, "keys": keys, "new_key": new_key}
    )


@login_required
@require_POST
def api_key_revoke_view(request, key_id):
    key = get_object_or_404(ApiKey, pk=key_id, user=request.user)
    api_key_revoke(key=key, actor=request.user)
    messages.success(request, _("Key %(name)s revoked.") % {"name": key.name})
    return redirect("api_keys")


# --- reservations ---------------------------------------------------------------


def _reservation_form(request, now) -> ReservationForm:
    model = request.GET.get("model")
    start = now.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=2)
    initial = {
        "start": start,
        "nonce": secrets.token_urlsafe(16),
        **({"gpu_model": model} if model else {}),
    }
    return ReservationForm(request.POST or None, initial=initial)


def _booking_key(user, nonce: str) -> str:
    return f"console:booking:{user.pk}:{nonce}"


def _first_submit(user, nonce: str) -> bool:
    """False when this form was submitted already (a double click, a reload)."""
    return not nonce or cache.add(_booking_key(user, nonce), 1, timeout=24 * 3600)


def _quote(form: ReservationForm, now) -> dict | None:
    """The price preview of a valid form, or None with the reason on the form."""
    if not form.is_valid():
        return None
    start, end = form.period
    data = form.cleaned_data
    try:
        return selectors.reservation_quote(
            gpu_model=data["gpu_model"], gpu_count=data["gpu_count"], start=start, end=end, now=now
        )
    except RentalError as exc:
        form.add_service_error(exc.field, exc.message)
        return None


@login_required
def reservation_list(request):
    """Availability, the booking form (Quote or Book) and the user's own reservations."""
    now = timezone.now()
    form = _reservation_form(request, now)
    quote = None
    if request.method == "POST" and "quote" in request.POST:
        quote = _quote(form, now)
    elif request.method == "POST" and form.is_valid():
        require_role(request, roles.OPERATE)
        data = form.cleaned_data
        start, end = form.period
        if not _first_submit(request.user, data.get("nonce", "")):
            messages.info(request, _("That form was sent twice: it was booked (and paid) once."))
            return redirect("reservations")
        try:
            reservation = reservations.reservation_book(
                user=account_of(request),
                image=data["image"],
                start=start,
                end=end,
                gpu_model=data["gpu_model"],
                gpu_count=data["gpu_count"],
            )
        except RentalError as exc:
            cache.delete(_booking_key(request.user, data.get("nonce", "")))  # may try again
            form.add_service_error(exc.field, exc.message)
        else:
            messages.success(
                request,
                _("Booked %(reservation)s; paid %(price)s %(currency)s.")
                % {
                    "reservation": reservation,
                    "price": reservation.price,
                    "currency": settings.BILLING_CURRENCY,
                },
            )
            return redirect("reservations")
    context = selectors.reservations_context(
        user=account_of(request), model_slug=request.GET.get("model"), now=now
    )
    return render(request, "console/reservations.html", {**context, "form": form, "quote": quote})


@login_required
@require_POST
def reservation_quote(request):
    """The price preview alone (htmx, as the form changes)."""
    now = timezone.now()
    form = _reservation_form(request, now)
    quote = _quote(form, now)
    return render(
        request, "console/_reservation_quote.html", {"form": form, "quote": quote, "partial": True}
    )


def _reservation_or_404(request, reservation_id):
    reservation = (
        reservations_visible_to(user=account_of(request)).filter(pk=reservation_id).first()
    )
    if reservation is None:
        raise Http404("No such reservation.")
    if request.method == "POST":
        require_role(request, roles.OPERATE)
    return reservation


@login_required
def reservation_detail(request, reservation_id):
    reservation = _reservation_or_404(request, reservation_id)
    return render(
        request,
        "console/reservation.html",
        selectors.reservation_context(reservation=reservation, now=timezone.now()),
    )


@login_required
@require_POST
def reservation_cancel_view(request, reservation_id):
    reservation = _reservation_or_404(request, reservation_id)
    try:
        reservation = reservations.reservation_cancel(reservation=reservation, actor=request.user)
    except RentalError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            _("Cancelled %(reservation)s; refunded %(refunded)s %(currency)s.")
            % {
                "reservation": reservation,
                "refunded": reservation.refunded,
                "currency": settings.BILLING_CURRENCY,
            },
        )
    if request.POST.get("next") == "detail":
        return redirect("reservation", reservation_id=reservation.pk)
    return redirect("reservations")


@login_required
@require_POST
def reservation_relaunch_view(request, reservation_id):
    reservation = _reservation_or_404(request, reservation_id)
    try:
        instance = reservations.reservation_relaunch(reservation=reservation, actor=request.user)
    except RentalError as exc:
        messages.error(request, exc.message)
        return redirect("reservation", reservation_id=reservation.pk)
    messages.success(
        request, _("Launching %(instance)s on the reserved GPUs.") % {"instance": instance}
    )
    return redirect("instance", instance_id=instance.pk)


# --- staff ----------------------------------------------------------------------


@staff_member_required
def fleet(request):
    return render(request, "console/fleet.html", selectors.fleet_context(now=timezone.now()))


@staff_member_required
def fleet_hosts(request):
    return render(
        request, "console/_fleet_tables.html", selectors.fleet_context(now=timezone.now())
    )


HOST_ACTIONS = {
    "drain": HostStatus.DRAINING,
    "maintenance": HostStatus.MAINTENANCE,
    "activate": HostStatus.ACTIVE,
}


@staff_member_required
@require_POST
def fleet_host_action(request, host_id, action):
    host = get_object_or_404(Host, pk=host_id)
    status = HOST_ACTIONS.get(action)
    if status is None:
        raise Http404("No such action.")
    HOST_TRANSITIONS[action](host=host, actor=request.user, reason="fleet dashboard")
    messages.success(request, f"Host {host.name} is now {status}.")
    return redirect(reverse("fleet"))


@staff_member_required
@require_POST
def fleet_instance_stop(request, instance_id):
    instance = _own_or_404(request, instance_id)
    try:
        lifecycle.instance_stop(
            instance=instance, actor=request.user, reason=f"stopped by staff ({request.user})"
        )
    except RentalError as exc:
        messages.error(request, exc.message)
    else:
        audit_record(
            action="instance.stop_by_staff",
            actor=request.user,
            obj=instance,
            ip_address=client_ip(request),
        )
        messages.success(request, f"Stopping {instance}.")
    return redirect(reverse("fleet"))


def _revenue(request):
    form = MonthForm(request.GET)
    zone = operator_zone()
    year, month = form.year_month(today=timezone.now().astimezone(zone).date())
    start, end = pricing.local_month(year, month, zone)
    return form, year, month, reports.revenue_report(start=start, end=end, zone=zone)


@staff_member_required
def revenue(request):
    form, year, month, report = _revenue(request)
    previous = (year - 1, 12) if month == 1 else (year, month - 1)
    following = (year + 1, 1) if month == 12 else (year, month + 1)
    return render(
        request,
        "console/revenue.html",
        {
            "form": form,
            "report": report,
            "month": f"{year}-{month:02d}",
            "previous": "{}-{:02d}".format(*previous),
            "next": "{}-{:02d}".format(*following),
            "zone": operator_zone().key,
            "currency": settings.BILLING_CURRENCY,
        },
    )


@staff_member_required
def revenue_csv(request):
    """The per-day table of the revenue page, for ?month=YYYY-MM."""
    form, year, month, report = _revenue(request)
    if not form.is_valid():
        return HttpResponseBadRequest(
            "month: use YYYY-MM, e.g. 2026-10", content_type="text/plain; charset=utf-8"
        )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    columns = ["on_demand", "reserved", "refunds", "net", "gpu_hours"]
    writer.writerow(["day", *columns, "currency"])
    for row in [*report.days, report.total]:
        figures = row.rounded()
        writer.writerow([row.key, *(figures[c] for c in columns), settings.BILLING_CURRENCY])
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="revenue-{year}-{month:02d}.csv"'
    return response


class PasswordReset(auth_views.PasswordResetView):
    """The reset form, throttled per address and per e-mail: over the limit it answers the
    same "check your inbox" and sends nothing (no spam, nothing to learn)."""

    def form_valid(self, form):
        email = form.cleaned_data["email"].lower()
        ip = client_ip(self.request)
        if not (
            attempt_allowed(key=f"reset:ip:{ip}", limit=settings.PASSWORD_RESETS_PER_HOUR * 3)
            and attempt_allowed(key=f"reset:email:{email}", limit=settings.PASSWORD_RESETS_PER_HOUR)
        ):
            audit_record_anonymous(
                action="auth.reset_throttled", changes={"email": email[:254]}, ip_address=ip
            )
            return HttpResponseRedirect(self.get_success_url())
        return super().form_valid(form)
