from django.urls import path

from gpurental.billing import views
from gpurental.billing.payments import webhooks

urlpatterns = [
    path("invoices/", views.invoice_list, name="billing_invoices"),
    path("invoices/<int:pk>.<str:fmt>", views.invoice_document, name="billing_invoice_document"),
    path("usage.csv", views.usage_csv, name="billing_usage_csv"),
    path("webhooks/stripe/", webhooks.stripe_webhook, name="billing_webhook_stripe"),
]
