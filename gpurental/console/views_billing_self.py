"""The console's credit page: the balance (voucher credit apart), "Add credit" (to the
provider's checkout page), automatic top-up (a saved card, threshold, amount, monthly
cap), "Redeem a voucher", the payment history, receipts, and the billing details
invoices are made out to."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from gpurental.addresses import client_ip
from gpurental.billing.models import AutoTopUpEvent, Payment, VoucherRedemption
from gpurental.billing.payments import PaymentUnavailable, unavailable_reason
from gpurental.billing.selectors import balance_of
from gpurental.billing.services.autotopup import (
    AutoTopUpRefused,
    auto_topup_card_remove,
    auto_topup_card_start,
    auto_topup_configure,
    auto_topup_month,
    auto_topup_of,
)
from gpurental.billing.services.details import billing_details_update
from gpurental.billing.services.payments import PaymentRefused, payment_start
from gpurental.billing.services.vouchers import (
    VoucherRefused,
    voucher_redeem,
    voucher_waterfall,
)
from gpurental.teams import roles
from gpurental.teams.acting import account_of, needs_role


class TopUpForm(forms.Form):
    amount = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=settings.PAYMENT_MIN_AMOUNT,
        max_value=settings.PAYMENT_MAX_AMOUNT,
        label=gettext_lazy("Amount"),
        help_text=format_lazy(
            gettext_lazy("In {currency}, from {low} to {high}"),
            currency=settings.BILLING_CURRENCY,
            low=settings.PAYMENT_MIN_AMOUNT,
            high=settings.PAYMENT_MAX_AMOUNT,
        ),
    )


class AutoTopUpForm(forms.Form):
    enabled = forms.BooleanField(required=False, label=gettext_lazy("On"))
    threshold = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=0,
        label=gettext_lazy("Threshold"),
        help_text=gettext_lazy("Top up when below this"),
    )
    amount = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=settings.PAYMENT_MIN_AMOUNT,
        max_value=settings.PAYMENT_MAX_AMOUNT,
        label=gettext_lazy("Amount"),
        help_text=gettext_lazy("Charged each time"),
    )
    monthly_cap = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=settings.PAYMENT_MIN_AMOUNT,
        label=gettext_lazy("Monthly cap"),
        help_text=gettext_lazy("At most this much in a calendar month"),
    )


def _auto_topup_form(user) -> AutoTopUpForm:
    row = auto_topup_of(user=user)
    return AutoTopUpForm(
        initial={
            "enabled": row.enabled,
            "threshold": row.threshold,
            "amount": row.amount,
            "monthly_cap": row.monthly_cap,
        }
    )


class RedeemForm(forms.Form):
    code = forms.CharField(
        max_length=64,
        label=gettext_lazy("Code"),
        help_text=gettext_lazy("As printed on the voucher; any case"),
    )


class BillingDetailsForm(forms.Form):
    full_name = forms.CharField(max_length=150, required=False, label=gettext_lazy("Name"))
    company = forms.CharField(max_length=150, required=False, label=gettext_lazy("Company"))
    billing_address = forms.CharField(
        max_length=500,
        required=False,
        label=gettext_lazy("Address"),
        widget=forms.Textarea(attrs={"rows": 4, "cols": 48}),
        help_text=gettext_lazy(
            "As it should appear on invoices, any script (e.g. 北京市海淀区…); at most 6 lines"
        ),
    )

    def clean_billing_address(self):
        address = self.cleaned_data["billing_address"]
        if len([line for line in address.splitlines() if line.strip()]) > 6:
            raise forms.ValidationError(_("at most 6 lines"))
        return address


def _details_form(user) -> BillingDetailsForm:
    return BillingDetailsForm(
        initial={
            "full_name": user.full_name,
            "company": user.company,
            "billing_address": user.billing_address,
        }
    )


def _context(request, *, topup=None, redeem=None, details=None, auto=None) -> dict:
    now = timezone.now()
    credits, _applied = voucher_waterfall(user=account_of(request), now=now)
    return {
        "balance": balance_of(user=account_of(request)),
        "voucher_credits": [c for c in credits if not c.expired],
        "voucher_left": sum((c.left for c in credits if not c.expired), 0),
        "payments": Payment.objects.filter(user=account_of(request)).order_by("-created_at")[:50],
        "redemptions": VoucherRedemption.objects.filter(user=account_of(request)).select_related(
            "voucher"
        ),
        "topup_form": topup or TopUpForm(),
        "redeem_form": redeem or RedeemForm(),
        "details_form": details or _details_form(account_of(request)),
        "auto_topup": auto_topup_of(user=account_of(request)),
        "auto_topup_form": auto or _auto_topup_form(account_of(request)),
        "auto_topup_month": auto_topup_month(user=account_of(request), now=now),
        "auto_topup_events": AutoTopUpEvent.objects.filter(user=account_of(request))[:10],
        "card": request.GET.get("card", ""),
        "topup_unavailable": unavailable_reason(),
        "currency": settings.BILLING_CURRENCY,
        "checkout": request.GET.get("checkout", ""),
    }


@login_required
def credit(request):
    return render(request, "billing/credit.html", _context(request))


@login_required
@require_POST
@needs_role(roles.BILLING)
def credit_topup(request):
    form = TopUpForm(request.POST)
    if form.is_valid():
        try:
            _payment, url = payment_start(
                user=account_of(request),
                amount=form.cleaned_data["amount"],
                base_url=request.build_absolute_uri("/"),
            )
        except PaymentRefused as exc:
            form.add_error("amount", exc.message)
        except PaymentUnavailable as exc:
            form.add_error(None, str(exc))
        else:
            return redirect(url)
    return render(request, "billing/credit.html", _context(request, topup=form), status=400)


@login_required
@require_POST
@needs_role(roles.BILLING)
def credit_redeem(request):
    form = RedeemForm(request.POST)
    if form.is_valid():
        try:
            result = voucher_redeem(user=account_of(request), code=form.cleaned_data["code"])
        except VoucherRefused as exc:
            form.add_error("code", exc.message)
        else:
            r = result.redemption
            if result.created:
                messages.success(
                    request,
                    _(
                        "Voucher %(code)s redeemed: %(amount)s %(currency)s of credit until "
                        "%(until)s UTC."
                    )
                    % {
                        "code": r.voucher.code,
                        "amount": r.amount,
                        "currency": settings.BILLING_CURRENCY,
                        "until": f"{r.credit_expires_at:%Y-%m-%d %H:%M}",
                    },
                )
            else:
                messages.info(
                    request, _("You redeemed voucher %(code)s before.") % {"code": r.voucher.code}
                )
            return redirect("billing_credit")
    return render(request, "billing/credit.html", _context(request, redeem=form), status=400)


@login_required
@require_POST
@needs_role(roles.BILLING)
def credit_auto_topup(request):
    form = AutoTopUpForm(request.POST)
    if form.is_valid():
        try:
            auto_topup_configure(
                user=account_of(request), ip=client_ip(request), **form.cleaned_data
            )
        except AutoTopUpRefused as exc:
            form.add_error(exc.field, exc.message)
        else:
            messages.success(request, _("Automatic top-up saved."))
            return redirect("billing_credit")
    return render(request, "billing/credit.html", _context(request, auto=form), status=400)


@login_required
@require_POST
@needs_role(roles.BILLING)
def credit_auto_topup_card(request):
    """To the provider's page to save a card; it is kept when the provider's webhook says so."""
    try:
        url = auto_topup_card_start(
            user=account_of(request), base_url=request.build_absolute_uri("/")
        )
    except PaymentUnavailable as exc:
        messages.error(request, str(exc))
        return redirect("billing_credit")
    return redirect(url)


@login_required
@require_POST
@needs_role(roles.BILLING)
def credit_auto_topup_card_remove(request):
    auto_topup_card_remove(user=account_of(request), ip=client_ip(request))
    messages.success(request, _("Card removed; automatic top-up is off."))
    return redirect("billing_credit")


@login_required
@require_POST
@needs_role(roles.BILLING)
def credit_details(request):
    form = BillingDetailsForm(request.POST)
    if form.is_valid():
        billing_details_update(user=account_of(request), ip=client_ip(request), **form.cleaned_data)
        messages.success(request, _("Billing details saved; the next invoices show them."))
        return redirect("billing_credit")
    return render(request, "billing/credit.html", _context(request, details=form), status=400)


@login_required
def payment_receipt(request, payment_id):
    payment = get_object_or_404(Payment, pk=payment_id, user=account_of(request))
    return render(
        request,
        "billing/receipt.html",
        {
            "payment": payment,
            "issuer": settings.BILLING_ISSUER,
            "checkout": request.GET.get("checkout", ""),
        },
    )
