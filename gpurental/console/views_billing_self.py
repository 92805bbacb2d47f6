"""The console's credit page: the balance (voucher credit apart), "Add credit" (to the
provider's checkout page), "Redeem a voucher", the payment history, receipts, and the
billing details invoices are made out to."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from gpurental.billing.models import Payment, VoucherRedemption
from gpurental.billing.payments import PaymentUnavailable, unavailable_reason
from gpurental.billing.selectors import balance_of
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


def _context(request, *, topup=None, redeem=None, details=None) -> dict:
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
