from django import forms
from django.contrib.auth.forms import BaseUserCreationForm

from gpurental.accounts.models import User
from gpurental.catalog.models import GPUModel, ImageTemplate, Plan


class SignupForm(BaseUserCreationForm):
    class Meta:
        model = User
        fields = ("email", "full_name", "company")

    def clean_email(self):
        email = self.cleaned_data["email"].strip().lower()
        if User.objects.filter(email__iexact=email).exists():
            raise forms.ValidationError(
                "An account with this e-mail address exists already; log in instead."
            )
        return email


class LaunchForm(forms.Form):
    gpu_model = forms.ModelChoiceField(
        queryset=GPUModel.objects.filter(plans__is_active=True).distinct(),
        to_field_name="slug",
        empty_label=None,
        label="GPU",
    )
    gpu_count = forms.TypedChoiceField(
        coerce=int, choices=[(n, n) for n in (1, 2, 4, 8)], initial=1, label="GPUs"
    )
    image = forms.ModelChoiceField(
        queryset=ImageTemplate.objects.filter(is_active=True),
        to_field_name="slug",
        empty_label=None,
    )
    name = forms.CharField(max_length=100, required=False, help_text="Optional, to recognise it by")

    def clean(self):
        data = super().clean()
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
                f"{model.short_name} is offered with {', '.join(map(str, offered)) or 'no'} GPUs per instance.",
            )
        return data


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="e.g. laptop, CI, notebook")
