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
from django.views.decorators.http import require_POST

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


class TopUpForm(forms.Form):
    amount = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=settings.PAYMENT_MIN_AMOUNT,
        max_value=settings.PAYMENT_MAX_AMOUNT,
        help_text=f"In {settings.BILLING_CURRENCY}, from {settings.PAYMENT_MIN_AMOUNT} "
        f"to {settings.PAYMENT_MAX_AMOUNT}",
    )


class AutoTopUpForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="On")
    threshold = forms.DecimalField(
        max_digits=12, decimal_places=2, min_value=0, help_text="Top up when below this"
    )
    amount = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=settings.PAYMENT_MIN_AMOUNT,
        max_value=settings.PAYMENT_MAX_AMOUNT,
        help_text="Charged each time",
    )
    monthly_cap = forms.DecimalField(
        max_digits=12,
        decimal_places=2,
        min_value=settings.PAYMENT_MIN_AMOUNT,
        label="Monthly cap",
        help_text="At most this much in a calendar month",
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
    code = forms.CharField(max_length=64, help_text="As printed on the voucher; any case")


class BillingDetailsForm(forms.Form):
    full_name = forms.CharField(max_length=150, required=False, label="Name")
    company = forms.CharField(max_length=150, required=False)
    billing_address = forms.CharField(
        max_length=500,
        required=False,
        label="Address",
        widget=forms.Textarea(attrs={"rows": 4, "cols": 48}),
        help_text="As it should appear on invoices, any script (e.g. 北京市海淀区…); "
        "at most 6 lines",
    )

    def clean_billing_address(self):
        address = self.cleaned_data["billing_address"]
        if len([line for line in address.splitlines() if line.strip()]) > 6:
            raise forms.ValidationError("at most 6 lines")
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
    credits, _ = voucher_waterfall(user=request.user, now=now)
    return {
        "balance": balance_of(user=request.user),
        "voucher_credits": [c for c in credits if not c.expired],
        "voucher_left": sum((c.left for c in credits if not c.expired), 0),
        "payments": Payment.objects.filter(user=request.user).order_by("-created_at")[:50],
        "redemptions": VoucherRedemption.objects.filter(user=request.user).select_related(
            "voucher"
        ),
        "topup_form": topup or TopUpForm(),
        "redeem_form": redeem or RedeemForm(),
        "details_form": details or _details_form(request.user),
        "auto_topup": auto_topup_of(user=request.user),
        "auto_topup_form": auto or _auto_topup_form(request.user),
        "auto_topup_month": auto_topup_month(user=request.user, now=now),
        "auto_topup_events": AutoTopUpEvent.objects.filter(user=request.user)[:10],
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
def credit_topup(request):
    form = TopUpForm(request.POST)
    if form.is_valid():
        try:
            _, url = payment_start(
                user=request.user,
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
def credit_redeem(request):
    form = RedeemForm(request.POST)
    if form.is_valid():
        try:
            result = voucher_redeem(user=request.user, code=form.cleaned_data["code"])
        except VoucherRefused as exc:
            form.add_error("code", exc.message)
        else:
            r = result.redemption
            if result.created:
                messages.success(
                    request,
                    f"Voucher {r.voucher.code} redeemed: {r.amount} {settings.BILLING_CURRENCY} "
                    f"of credit until {r.credit_expires_at:%Y-%m-%d %H:%M} UTC.",
                )
            else:
                messages.info(request, f"You redeemed voucher {r.voucher.code} before.")
            return redirect("billing_credit")
    return render(request, "billing/credit.html", _context(request, redeem=form), status=400)


@login_required
@require_POST
def credit_auto_topup(request):
    form = AutoTopUpForm(request.POST)
    if form.is_valid():
        try:
            auto_topup_configure(
                user=request.user, ip=request.META.get("REMOTE_ADDR"), **form.cleaned_data
            )
        except AutoTopUpRefused as exc:
            form.add_error(exc.field, exc.message)
        else:
            messages.success(request, "Automatic top-up saved.")
            return redirect("billing_credit")
    return render(request, "billing/credit.html", _context(request, auto=form), status=400)


@login_required
@require_POST
def credit_auto_topup_card(request):
    """To the provider's page to save a card; it is kept when the provider's webhook says so."""
    try:
        url = auto_topup_card_start(user=request.user, base_url=request.build_absolute_uri("/"))
    except PaymentUnavailable as exc:
        messages.error(request, str(exc))
        return redirect("billing_credit")
    return redirect(url)


@login_required
@require_POST
def credit_auto_topup_card_remove(request):
    auto_topup_card_remove(user=request.user, ip=request.META.get("REMOTE_ADDR"))
    messages.success(request, "Card removed; automatic top-up is off.")
    return redirect("billing_credit")


@login_required
@require_POST
def credit_details(request):
    form = BillingDetailsForm(request.POST)
    if form.is_valid():
        billing_details_update(
            user=request.user, ip=request.META.get("REMOTE_ADDR"), **form.cleaned_data
        )
        messages.success(request, "Billing details saved; the next invoices show them.")
        return redirect("billing_credit")
    return render(request, "billing/credit.html", _context(request, details=form), status=400)


@login_required
def payment_receipt(request, payment_id):
    payment = get_object_or_404(Payment, pk=payment_id, user=request.user)
    return render(
        request,
        "billing/receipt.html",
        {
            "payment": payment,
            "issuer": settings.BILLING_ISSUER,
            "checkout": request.GET.get("checkout", ""),
        },
    )
