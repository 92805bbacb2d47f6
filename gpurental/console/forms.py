import datetime as dt

from django import forms
from django.conf import settings
from django.contrib.auth import password_validation
from django.core.validators import MaxValueValidator
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext

from gpurental.accounts.models import CUSTOMER_SCOPES, ApiKeyScope, User
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan
from gpurental.catalog.selectors import image_resolve
from gpurental.fleet.models import Zone
from gpurental.images.services import ImageRefused, custom_image_resolved
from gpurental.modelcache.selectors import models_offered
from gpurental.volumes.models import Snapshot, SnapshotStatus, VolumeStatus
from gpurental.volumes.selectors import volumes_of
from gpurental.volumes.services import in_use


class SignupForm(forms.Form):
    """The sign-up form. It never says whether an address is registered: both answers are
    "check your inbox" (accounts.services.signup_start)."""

    email = forms.EmailField(max_length=254, label=gettext_lazy("Email"))
    full_name = forms.CharField(max_length=150, required=False, label=gettext_lazy("Full name"))
    company = forms.CharField(max_length=150, required=False, label=gettext_lazy("Company"))
    password1 = forms.CharField(
        label=gettext_lazy("Password"),
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text=password_validation.password_validators_help_text_html(),
    )
    password2 = forms.CharField(
        label=gettext_lazy("Password again"),
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
    )

    def clean_email(self):
        return self.cleaned_data["email"].strip().lower()

    def clean(self):
        data = super().clean()
        first, second = data.get("password1"), data.get("password2")
        if first and second and first != second:
            self.add_error("password2", _("The two passwords differ."))
        elif first:
            try:
                password_validation.validate_password(first, User(email=data.get("email", "")))
            except forms.ValidationError as exc:
                self.add_error("password1", exc)
        return data


class ImageChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: ImageTemplate) -> str:
        aliases = ", ".join(a.name for a in obj.aliases.all())
        if not aliases:
            return obj.name
        return _("%(name)s (also: %(aliases)s)") % {"name": obj.name, "aliases": aliases}


class LaunchForm(forms.Form):
    gpu_model = forms.ModelChoiceField(
        queryset=GPUModel.objects.filter(plans__is_active=True).distinct(),
        to_field_name="slug",
        empty_label=None,
        label=gettext_lazy("GPU"),
    )
    gpu_count = forms.TypedChoiceField(
        coerce=int, choices=[(n, n) for n in (1, 2, 4, 8)], initial=1, label=gettext_lazy("GPUs")
    )
    image = ImageChoiceField(
        queryset=ImageTemplate.objects.filter(is_active=True).prefetch_related("aliases"),
        to_field_name="slug",
        empty_label=None,
        label=gettext_lazy("Image"),
    )
    own_image = forms.CharField(
        max_length=300,
        required=False,
        label=gettext_lazy("Or your own image"),
        widget=forms.TextInput(attrs={"placeholder": "registry.example.com/team/train:1"}),
        help_text=gettext_lazy(
            "Optional: an image reference, pulled from its registry with the login saved on "
            "the Images page; it runs with the settings of the image above"
        ),
    )
    model = forms.ChoiceField(
        required=False,
        label=gettext_lazy("Model"),
        help_text=gettext_lazy(
            "Optional: a Hugging Face model from the hosts' shared caches; hosts that "
            "have it are chosen first"
        ),
    )
    volume = forms.ChoiceField(
        required=False,
        label=gettext_lazy("Volume"),
        help_text=gettext_lazy(
            "Optional: one of your free volumes, mounted at the path below; the instance runs "
            "on its host"
        ),
    )
    mount_path = forms.CharField(
        max_length=200, required=False, initial="/data", label=gettext_lazy("Mounted at")
    )
    workspace_from = forms.ChoiceField(
        required=False,
        label=gettext_lazy("/workspace from"),
        help_text=gettext_lazy(
            "Optional: a snapshot of another instance's /workspace; this one starts with its files"
        ),
    )
    zone = forms.ModelChoiceField(
        queryset=Zone.objects.all(),
        to_field_name="name",
        required=False,
        empty_label=gettext_lazy("any zone"),
        label=gettext_lazy("Zone"),
        help_text=gettext_lazy("Optional: run only on a host in this zone"),
    )
    name = forms.CharField(
        max_length=100,
        required=False,
        label=gettext_lazy("Name"),
        help_text=gettext_lazy("Optional, to recognise it by"),
    )

    def __init__(self, *args, account=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.account = account  # whose saved images the own-image field may name
        if not Zone.objects.exists():  # a fleet without zones: nothing to choose
            del self.fields["zone"]
        self.fields["model"].choices = [("", _("none"))] + [(m, m) for m in models_offered()]
        free = [
            (v.name, f"{v.name} ({v.size_gb} GB, {v.host.name})")
            for v in (volumes_of(account=account) if account is not None else [])
            if v.status == VolumeStatus.AVAILABLE and not in_use(v)
        ]
        self.fields["volume"].choices = [("", _("none"))] + free
        ready = (
            Snapshot.objects.filter(
                account=account, instance__isnull=False, status=SnapshotStatus.READY
            )
            if account is not None
            else Snapshot.objects.none()
        )
        self.fields["workspace_from"].choices = [("", _("a new, empty one"))] + [
            (snap.name, snap.name) for snap in ready
        ]
        # ?image=pytorch-2.1 (an alias) preselects the image it names.
        resolved = image_resolve(str(self.initial.get("image", "")))
        if resolved is not None:
            self.initial["image"] = resolved.template.slug

    def clean_workspace_from(self):
        name = self.cleaned_data.get("workspace_from")
        if not name:
            return None
        return (
            Snapshot.objects.filter(account=self.account, name=name)
            .exclude(status=SnapshotStatus.DELETED)
            .first()
        )

    def clean_own_image(self):
        text = self.cleaned_data.get("own_image", "").strip()
        if not text:
            return None
        try:
            return custom_image_resolved(text, account=self.account)
        except ImageRefused as exc:
            raise forms.ValidationError(exc.message) from exc

    def clean(self):
        data = super().clean()
        if own := data.get("own_image"):  # run with the operator's template for such images
            data["image"], data["image_ref"] = own.template, own.reference
        model, count = data.get("gpu_model"), data.get("gpu_count")
        if (
            model
            and count
            and not Plan.objects.filter(gpu_model=model, gpu_count=count, is_active=True).exists()
        ):
            offered = sorted(
                Plan.objects.filter(gpu_model=model, is_active=True).values_list(
                    "gpu_count", flat=True
                )
            )
            self.add_error(
                "gpu_count",
                _("%(model)s is offered with %(counts)s GPUs per instance.")
                % {
                    "model": model.short_name,
                    "counts": ", ".join(map(str, offered)) or pgettext("no counts offered", "no"),
                },
            )
        return data


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        label=gettext_lazy("Name"),
        help_text=gettext_lazy("e.g. laptop, CI, notebook"),
    )
    scopes = forms.MultipleChoiceField(
        choices=[(s.value, s.label) for s in ApiKeyScope if s != ApiKeyScope.STAFF],
        initial=CUSTOMER_SCOPES,
        widget=forms.CheckboxSelectMultiple,
        label=gettext_lazy("Scopes"),
        help_text=gettext_lazy("What the key may do"),
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label=gettext_lazy("Expires in days"),
        help_text=gettext_lazy("Empty: until revoked"),
    )
    team = forms.ChoiceField(
        required=False,
        label=gettext_lazy("Acts as"),
        help_text=gettext_lazy("A team's key acts as the team's account, with your role there"),
    )

    def __init__(self, *args, user=None, teams=(), **kwargs):
        super().__init__(*args, **kwargs)
        if user is not None and user.is_staff:  # only staff may give staff powers to a key
            self.fields["scopes"].choices = ApiKeyScope.choices
        self.fields["team"].choices = [("", gettext_lazy("Personal"))] + [
            (team.slug, team.name) for team, _role in teams
        ]


class UTCDateTimeField(forms.DateTimeField):
    """A date and time read and shown in UTC, whatever the operator's zone: the
    reservation pages work in UTC and say so."""

    widget = forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")

    def to_python(self, value):
        with timezone.override(dt.UTC):
            return super().to_python(value)

    def prepare_value(self, value):
        with timezone.override(dt.UTC):
            return super().prepare_value(value)


class ReservationForm(forms.Form):
    """Book GPUs ahead. The rules (horizon, length, capacity, balance) are the service's:
    its errors come back onto the field they name."""

    # The service's field names → this form's.
    SERVICE_FIELDS = {"plan": "gpu_count", "end": "hours"}

    gpu_model = forms.ModelChoiceField(
        queryset=GPUModel.objects.filter(plans__is_active=True).distinct(),
        to_field_name="slug",
        empty_label=None,
        label=gettext_lazy("GPU"),
    )
    gpu_count = forms.TypedChoiceField(
        coerce=int, choices=[(n, n) for n in (1, 2, 4, 8)], initial=1, label=gettext_lazy("GPUs")
    )
    image = forms.ModelChoiceField(
        queryset=ImageTemplate.objects.filter(is_active=True),
        to_field_name="slug",
        empty_label=None,
        label=gettext_lazy("Image"),
    )
    start = UTCDateTimeField(
        label=gettext_lazy("Start (UTC)"), help_text=gettext_lazy("Whole minutes, in UTC")
    )
    hours = forms.IntegerField(
        min_value=1,
        initial=4,
        label=gettext_lazy("Hours"),
        help_text=gettext_lazy("How long the GPUs are yours"),
    )
    # One per form shown: a second "Book and pay" of the same form books nothing.
    nonce = forms.CharField(required=False, widget=forms.HiddenInput, max_length=64)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        most = settings.RESERVATION_MAX_HOURS
        self.fields["hours"].widget.attrs["max"] = most
        self.fields["hours"].validators.append(
            MaxValueValidator(
                most, _("A reservation lasts at most %(most)s hours.") % {"most": most}
            )
        )

    def clean(self):
        data = super().clean()
        start = data.get("start")
        if start is not None:
            horizon = settings.RESERVATION_HORIZON_DAYS
            if start > dt.datetime.now(dt.UTC) + dt.timedelta(days=horizon):
                self.add_error(
                    "start", _("Start within %(days)s days from now.") % {"days": horizon}
                )
        return data

    def add_service_error(self, field: str | None, message: str) -> None:
        field = self.SERVICE_FIELDS.get(field, field)
        self.add_error(field if field in self.fields else None, message)

    @property
    def period(self) -> tuple[dt.datetime, dt.datetime]:
        data = self.cleaned_data
        return data["start"], data["start"] + dt.timedelta(hours=data["hours"])


class MonthForm(forms.Form):
    month = forms.RegexField(
        regex=r"^(19[7-9]\d|2\d{3})-(0[1-9]|1[0-2])$",  # 1970–2999: what a bill can be for
        required=False,
        label=gettext_lazy("Month"),
        error_messages={
            "invalid": gettext_lazy("Use YYYY-MM between 1970 and 2999, e.g. 2026-10.")
        },
    )

    def year_month(self, *, today: dt.date) -> tuple[int, int]:
        """The chosen month (valid form), or the one ``today`` is in."""
        text = self.cleaned_data.get("month") if self.is_valid() else None
        if not text:
            return today.year, today.month
        year, month = text.split("-")
        return int(year), int(month)
