"""Every list's pages: ``?limit=&offset=``, and keyset pages behind each ``next`` link.

A page ``?offset=9900`` makes PostgreSQL walk 9,900 rows to throw them away; a keyset page
(``?cursor=``) starts where the last one ended, through the ordering's index, whatever the
depth. So:

- ``limit`` and ``offset`` work as they always did (50 items by default, at most 200);
- where a list is ordered by plain columns of its own table, ``next`` is a keyset link:
  ``?cursor=<position>&limit=N``. The position is the last item's values of the ordering
  columns and its primary key (always the final tie-breaker), encoded, not signed: a
  made-up position only starts a page elsewhere in the caller's own list. Clients that
  follow ``next`` (the SDK, the CLI) get keyset pages without a change;
- a cursor page has no ``previous`` link (keyset pages go forward), and still its
  ``count``: one ``COUNT(*)`` on an index, which the console shows;
- a list ordered otherwise (through a related table, a nullable column, an expression)
  keeps offset links.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import date, datetime
from decimal import Decimal
from uuid import UUID

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.utils.urls import remove_query_param, replace_query_param


def _keys(queryset: QuerySet) -> list[tuple[str, bool]] | None:
    """The queryset's ordering as (column attname, descending) with the primary key last,
    or None when it cannot be a keyset (related, nullable or computed ordering)."""
    model = queryset.model
    ordering = list(queryset.query.order_by or model._meta.ordering or [])
    keys: list[tuple[str, bool]] = []
    for term in ordering:
        if not isinstance(term, str) or "__" in term or term.startswith("?"):
            return None
        name = term.lstrip("-")
        try:
            field = model._meta.pk if name == "pk" else model._meta.get_field(name)
        except FieldDoesNotExist:
            return None
        if not field.concrete or field.null or field.is_relation:
            return None
        keys.append((field.attname, term.startswith("-")))
    pk = model._meta.pk.attname
    if not any(name == pk for name, _ in keys):
        keys.append((pk, keys[-1][1] if keys else False))
    return keys


def _encode(values: list) -> str:
    def plain(value):
        if isinstance(value, (datetime, date)):
            return value.isoformat()
        if isinstance(value, (UUID, Decimal)):
            return str(value)
        return value

    text = json.dumps([plain(v) for v in values], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _decode(cursor: str, queryset: QuerySet, keys: list[tuple[str, bool]]) -> list:
    refused = ValidationError(
        {"cursor": [_("This is not a cursor of this list: follow the `next` link as given.")]}
    )
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        raise refused from None
    # Every key column is NOT NULL: a position holds no null (nor a list or an object).
    if (
        not isinstance(values, list)
        or len(values) != len(keys)
        or any(v is None or isinstance(v, (list, dict)) for v in values)
    ):
        raise refused
    fields = {f.attname: f for f in queryset.model._meta.concrete_fields}
    try:
        return [
            fields[name].to_python(value) for (name, _), value in zip(keys, values, strict=True)
        ]
    except (DjangoValidationError, TypeError, ValueError):
        raise refused from None


def _after(keys: list[tuple[str, bool]], values: list) -> Q:
    """Rows after ``values`` in the ordering: (k1 beyond v1) or (k1 = v1 and k2 beyond v2) …"""
    first, descending = keys[0]
    # Redundant, and what lets PostgreSQL start the index scan at the position.
    after = Q(**{f"{first}__{'lte' if descending else 'gte'}": values[0]})
    beyond = Q()
    for i, (name, descending) in enumerate(keys):
        step = Q(**{f"{name}__{'lt' if descending else 'gt'}": values[i]})
        for earlier, value in zip(keys[:i], values[:i], strict=True):
            step &= Q(**{earlier[0]: value})
        beyond |= step
    return after & beyond


class ApiPagination(LimitOffsetPagination):
    """``?limit=&offset=``, or ``?cursor=`` from a ``next`` link; 50 items by default,
    never more than 200 in one page."""

    default_limit = 50
    max_limit = 200
    cursor_query_param = "cursor"

    def paginate_queryset(self, queryset, request, view=None):
        self.keys = _keys(queryset) if isinstance(queryset, QuerySet) else None
        self.last = None
        cursor = request.query_params.get(self.cursor_query_param)
        if cursor is None or self.keys is None:
            self.cursor_mode = False
            page = super().paginate_queryset(
                queryset.order_by(*self._ordering()) if self.keys else queryset, request, view
            )
            if page and self.keys:
                self.last = page[-1]
            return page
        self.cursor_mode = True
        self.request = request
        self.limit = self.get_limit(request)
        self.offset = 0
        self.count = self.get_count(queryset)
        values = _decode(cursor, queryset, self.keys)
        rows = list(
            queryset.filter(_after(self.keys, values)).order_by(*self._ordering())[: self.limit + 1]
        )
        self.more = len(rows) > self.limit
        page = rows[: self.limit]
        self.last = page[-1] if page else None
        return page

    def _ordering(self) -> list[str]:
        return [("-" if descending else "") + name for name, descending in self.keys]

    def _cursor_link(self) -> str:
        url = remove_query_param(self.request.build_absolute_uri(), self.offset_query_param)
        url = replace_query_param(url, self.limit_query_param, self.limit)
        position = _encode([getattr(self.last, name) for name, _ in self.keys])
        return replace_query_param(url, self.cursor_query_param, position)

    def get_next_link(self):
        if self.cursor_mode:
            return self._cursor_link() if self.more else None
        if self.last is not None and self.offset + self.limit < self.count:
            return self._cursor_link()
        return super().get_next_link()

    def get_previous_link(self):
        return None if self.cursor_mode else super().get_previous_link()

    def get_schema_operation_parameters(self, view):
        return [
            *super().get_schema_operation_parameters(view),
            {
                "name": self.cursor_query_param,
                "required": False,
                "in": "query",
                "description": "Where a page starts: take it from a `next` link.",
                "schema": {"type": "string"},
            },
        ]
