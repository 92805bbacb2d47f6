from decimal import Decimal

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from gpurental.accounts.admin import UserAdmin as AccountsUserAdmin
from gpurental.accounts.admin_mixins import AuditedAdmin, ReadOnlyAdmin
from gpurental.accounts.models import User
from gpurental.billing.exceptions import BillingError
from gpurental.billing.models import Charge, Invoice, InvoiceLine, InvoiceStatus, LedgerEntry
from gpurental.billing.services import credit_add
from gpurental.billing.services.invoicing import (
    invoice_generate,
    invoice_issue,
    invoice_mark_paid,
    invoice_void,
)
from gpurental.billing.views import invoice_document_response


@admin.register(Charge)
class ChargeAdmin(ReadOnlyAdmin):
    list_display = [
        "instance",
        "user",
        "period_start",
        "period_end",
        "rate_kind",
        "hourly_rate",
        "amount",
    ]
    list_filter = ["rate_kind"]
    search_fields = ["user__email", "instance__id"]
    date_hierarchy = "period_start"


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "user", "kind", "amount", "description"]
    list_filter = ["kind"]
    search_fields = ["user__email", "description"]
    date_hierarchy = "created_at"


# --- credit, from the users' list -----------------------------------------------


class AddCreditForm(forms.Form):
    amount = forms.DecimalField(
        max_digits=12, decimal_places=2, min_value=Decimal("0.01"), help_text="For each user"
    )
    description = forms.CharField(max_length=200, required=False)


@admin.action(description="Add credit to selected users", permissions=["credit"])
def add_credit(modeladmin, request, queryset):
    form = AddCreditForm(request.POST if "apply" in request.POST else None)
    if form.is_valid():
        amount, note = form.cleaned_data["amount"], form.cleaned_data["description"]
        for user in queryset:
            credit_add(
                user=user, amount=amount, description=note or "credit by staff", actor=request.user
            )
        modeladmin.message_user(
            request,
            f"Added {amount} {settings.BILLING_CURRENCY} to {queryset.count()} user(s).",
            messages.SUCCESS,
        )
        return None
    return TemplateResponse(
        request,
        "billing/admin/add_credit.html",
        {
            **modeladmin.admin_site.each_context(request),
            "title": "Add credit",
            "form": form,
            "users": queryset,
            "currency": settings.BILLING_CURRENCY,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "opts": modeladmin.model._meta,
        },
    )


# The users' page belongs to accounts; billing adds its action to it here, so that
# accounts need not know about billing.
admin.site.unregister(User)


@admin.register(User)
class UserAdmin(AccountsUserAdmin):
    actions = [*(AccountsUserAdmin.actions or []), add_credit]

    def has_credit_permission(self, request) -> bool:
        return request.user.has_perm("billing.add_ledgerentry")


# --- invoices -------------------------------------------------------------------


class InvoiceLineInline(admin.TabularInline):
    model = InvoiceLine
    extra = 0

    def _editable(self, obj):
        return obj is None or obj.status == InvoiceStatus.DRAFT

    def has_add_permission(self, request, obj=None):
        return self._editable(obj)

    def has_change_permission(self, request, obj=None):
        return self._editable(obj)

    def has_delete_permission(self, request, obj=None):
        return self._editable(obj)


def _each(modeladmin, request, queryset, service, done: str):
    count = 0
    for invoice in queryset:
        try:
            service(invoice=invoice, actor=request.user)
        except BillingError as exc:
            modeladmin.message_user(request, f"{invoice}: {exc.message}", messages.ERROR)
        else:
            count += 1
    if count:
        modeladmin.message_user(request, f"{count} invoice(s) {done}.", messages.SUCCESS)


@admin.action(description="Issue selected drafts (numbers them; they can no longer change)")
def issue(modeladmin, request, queryset):
    _each(modeladmin, request, queryset, invoice_issue, "issued")


@admin.action(description="Rebuild selected drafts from the charges")
def regenerate(modeladmin, request, queryset):
    def rebuild(*, invoice, actor):
        if invoice.status != InvoiceStatus.DRAFT or invoice.kind != Invoice.Kind.INVOICE:
            raise BillingError("only draft invoices are rebuilt")
        first = invoice.period_start
        invoice_generate(user=invoice.user, year=first.year, month=first.month)

    _each(modeladmin, request, queryset, rebuild, "rebuilt")


@admin.action(description="Mark selected invoices paid")
def mark_paid(modeladmin, request, queryset):
    _each(modeladmin, request, queryset, invoice_mark_paid, "marked paid")


@admin.action(description="Void selected invoices")
def void(modeladmin, request, queryset):
    _each(modeladmin, request, queryset, invoice_void, "voided")


@admin.register(Invoice)
class InvoiceAdmin(AuditedAdmin):
    list_display = [
        "__str__",
        "user",
        "kind",
        "period_start",
        "status",
        "total",
        "currency",
        "issued_at",
        "documents",
    ]
    list_filter = ["status", "kind"]
    search_fields = ["number", "user__email"]
    date_hierarchy = "period_start"
    inlines = [InvoiceLineInline]
    actions = [issue, regenerate, mark_paid, void]

    def has_change_permission(self, request, obj=None):
        # Issued invoices never change; corrections are credit notes.
        return obj is None or obj.status == InvoiceStatus.DRAFT

    def has_delete_permission(self, request, obj=None):
        return obj is None or obj.status == InvoiceStatus.DRAFT

    @admin.display(description="Documents")
    def documents(self, obj):
        return format_html(
            '<a href="{}">PDF</a> · <a href="{}">CSV</a>',
            reverse("admin:billing_invoice_document", args=[obj.pk, "pdf"]),
            reverse("admin:billing_invoice_document", args=[obj.pk, "csv"]),
        )

    def get_urls(self):
        view = self.admin_site.admin_view(self.document_view)
        return [
            path("<int:pk>/document.<str:fmt>", view, name="billing_invoice_document"),
            *super().get_urls(),
        ]

    def document_view(self, request, pk, fmt):
        invoice = get_object_or_404(Invoice, pk=pk)
        if not self.has_view_permission(request, invoice):
            return HttpResponse(status=403)
        return invoice_document_response(invoice, fmt)


# Vouchers, payments and webhook events: their own module, registered with this one.
from gpurental.billing import admin_credit  # noqa: E402, F401
