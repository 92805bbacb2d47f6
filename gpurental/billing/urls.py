from django.urls import path

from gpurental.billing import views

urlpatterns = [
    path("invoices/", views.invoice_list, name="billing_invoices"),
    path("invoices/<int:pk>.<str:fmt>", views.invoice_document, name="billing_invoice_document"),
    path("usage.csv", views.usage_csv, name="billing_usage_csv"),
]
