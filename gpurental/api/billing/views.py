"""Billing over the API: your usage per day, your invoices and their PDF/CSV documents.

Always your own, staff included (the back-office has its own views): another
customer's invoice is a 404, as if it did not exist. The documents are the console's
(``billing.views``), served as they are.
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import Prefetch
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.generics import GenericAPIView
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response

from gpurental.api.billing import serializers as s
from gpurental.api.lookups import LookupMixin
from gpurental.billing.models import Invoice, InvoiceLine
from gpurental.billing.pricing import local_month
from gpurental.billing.selectors import invoices_visible_to, operator_zone, usage_by_day
from gpurental.billing.views import invoice_document_response, usage_csv
from gpurental.teams.acting import account_of

# Invoice ids are integers; one past the column's range is no invoice (404), not an error.
ID_RE = r"[0-9]+"


class DownloadNegotiation(BaseContentNegotiation):
    """A download answers its own type whatever ``Accept`` asks for (``Accept:
    application/pdf`` must not be a 406); only its errors go through the JSON renderer."""

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def _month_query(request) -> tuple[int, int]:
    query = s.MonthQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    return query.year_month()


@extend_schema(tags=["billing"])
class UsageView(GenericAPIView):
    """GPU-hours and cost per instance per day (in the operator's time zone), for a month."""

    scope_area = "billing"

    serializer_class = s.UsageSerializer
    pagination_class = None

    @extend_schema(parameters=[s.MonthQuerySerializer])
    def get(self, request, *args, **kwargs):
        year, month = _month_query(request)
        start, end = local_month(year, month, operator_zone())
        rows = list(usage_by_day(user=account_of(request), start=start, end=end))
        body = {
            "month": f"{year:04d}-{month:02d}",
            "start": start,
            "end": end,
            "rows": rows,
            "totals": {
                "gpu_hours": sum((row.gpu_hours for row in rows), Decimal(0)),
                "cost": sum((row.cost for row in rows), Decimal(0)),
            },
        }
        return Response(s.UsageSerializer(body).data)


@extend_schema(tags=["billing"])
class UsageCsvView(GenericAPIView):
    """The same usage as a CSV download (the console's report)."""

    scope_area = "billing"

    pagination_class = None
    content_negotiation_class = DownloadNegotiation

    @extend_schema(
        parameters=[s.MonthQuerySerializer], responses={(200, "text/csv"): OpenApiTypes.STR}
    )
    def get(self, request, *args, **kwargs):
        _month_query(request)  # a bad month is answered in the API's error shape
        # The console's view reads the same ?month; DRF has put the API key's user on the
        # Django request it wraps.
        return usage_csv(request._request)


@extend_schema(tags=["billing"])
class InvoiceViewSet(LookupMixin, viewsets.ReadOnlyModelViewSet):
    """Your issued invoices and credit notes, with their lines (drafts are not shown)."""

    scope_area = "billing"

    noun = gettext_lazy("invoice")
    serializer_class = s.InvoiceSerializer
    lookup_value_regex = ID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Invoice.objects.none()
        return (
            invoices_visible_to(user=account_of(self.request))
            .select_related("corrects")
            .prefetch_related(Prefetch("lines", queryset=InvoiceLine.objects.order_by("id")))
            .order_by("-period_start", "-id")
        )

    @extend_schema(
        summary="The invoice as a PDF", responses={(200, "application/pdf"): OpenApiTypes.BINARY}
    )
    @action(detail=True, methods=["get"], content_negotiation_class=DownloadNegotiation)
    def pdf(self, request, pk=None):
        return invoice_document_response(self.get_object(), "pdf")

    @extend_schema(
        summary="The invoice as CSV: one row per line, then the total",
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    @action(detail=True, methods=["get"], content_negotiation_class=DownloadNegotiation)
    def csv(self, request, pk=None):
        return invoice_document_response(self.get_object(), "csv")
