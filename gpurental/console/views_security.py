"""The console's password change, password reset and "log out everywhere": each ends every
other session of the person (``accounts.credentials.account_credentials_revoke``). Each
lists the person's API keys and SSH keys with a "keep" box each, none ticked: a key stays
valid only if
its owner says so (on a reset, whoever holds the mailbox: the one who can choose a new
password anyway)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import logout, update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm, SetPasswordForm
from django.http import HttpResponseRedirect
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from gpurental.accounts.credentials import Reason, account_credentials_revoke
from gpurental.accounts.models import ApiKey, SSHKey
from gpurental.addresses import client_ip


def _keep_choices(label, help_text, choices) -> forms.MultipleChoiceField:
    """A list of boxes, none ticked."""
    return forms.MultipleChoiceField(
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label=label,
        help_text=help_text,
        choices=choices,
    )


class KeepKeysMixin:
    """ "Keep these API keys" and "keep these SSH keys" fields listing ``user``'s active
    keys, none ticked."""

    def _keep_field(self, user) -> None:
        keys = ApiKey.objects.filter(user=user, revoked_at__isnull=True).order_by("name")
        self.fields["keep_api_keys"] = _keep_choices(
            gettext_lazy("API keys that keep working"),
            gettext_lazy("Every other key is revoked."),
            [(str(key.pk), f"{key.name} (gpr_{key.prefix}_…)") for key in keys],
        )
        ssh_keys = SSHKey.objects.filter(user=user).order_by("name", "created_at")
        self.fields["keep_ssh_keys"] = _keep_choices(
            gettext_lazy("SSH keys that keep working"),
            gettext_lazy("Every other SSH key is removed from your account."),
            [(str(key.pk), f"{key.name} ({key.fingerprint})") for key in ssh_keys],
        )

    def kept(self) -> dict:
        """The revocation's keep arguments, from the cleaned form."""
        return {
            "keep_key_ids": self.cleaned_data["keep_api_keys"],
            "keep_ssh_key_ids": self.cleaned_data["keep_ssh_keys"],
        }


class PasswordChangeKeepKeysForm(KeepKeysMixin, PasswordChangeForm):
    def __init__(self, user, *args, **kwargs):
        super().__init__(user, *args, **kwargs)
        self._keep_field(user)


class SetPasswordKeepKeysForm(KeepKeysMixin, SetPasswordForm):
    def __init__(self, user, *args, **kwargs):
        super().__init__(user, *args, **kwargs)
        self._keep_field(user)


class LogoutEverywhereForm(KeepKeysMixin, forms.Form):
    def __init__(self, user, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._keep_field(user)


class PasswordChange(auth_views.PasswordChangeView):
    """A new password: every other session ends (this browser stays logged in), and the
    API keys not kept are revoked."""

    form_class = PasswordChangeKeepKeysForm

    def form_valid(self, form):
        user = form.save()
        account_credentials_revoke(
            user=user,
            reason=Reason.PASSWORD_CHANGE,
            **form.kept(),
            ip_address=client_ip(self.request),
        )
        # After the revocation, with the user's new generation: this session alone lives on.
        update_session_auth_hash(self.request, user)
        return HttpResponseRedirect(self.get_success_url())


class PasswordResetConfirm(auth_views.PasswordResetConfirmView):
    """A reset ends every session and revokes every API key but those ticked to keep (none
    by default): whoever knew the old password may have made some. The owner is told by
    e-mail."""

    form_class = SetPasswordKeepKeysForm

    def form_valid(self, form):
        response = super().form_valid(form)
        account_credentials_revoke(
            user=form.user,
            reason=Reason.PASSWORD_RESET,
            **form.kept(),
            ip_address=client_ip(self.request),
        )
        return response


@login_required
def logout_everywhere(request):
    form = LogoutEverywhereForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        account_credentials_revoke(
            user=request.user,
            reason=Reason.LOGOUT_EVERYWHERE,
            **form.kept(),
            ip_address=client_ip(request),
        )
        logout(request)
        messages.success(
            request,
            _("You are logged out everywhere; an e-mail says what was ended. Log in again."),
        )
        return redirect("login")
    return render(request, "registration/logout_everywhere.html", {"form": form})
