"""How a resource's views find its rows: by UUID or slug, only those the caller may see,
and one 404 for "no such object" and "not yours", so nothing leaks its existence.

Visibility: a customer sees only their own rows (or their team's, acting for it). Rows
that are credentials or messages to a person (API keys, SSH keys, notifications) stay
that person's own (``PersonalMixin``), even for staff.
"""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from rest_framework.exceptions import NotFound

from gpurental.teams.acting import account_of

UUID_RE = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# Slugs in the catalog may hold dots ("pytorch-2.1"); no format suffixes to clash with.
SLUG_RE = r"[-a-zA-Z0-9_.]+"


class LookupMixin:
    """``get_object`` with one 404 message for "no such object" and "not yours"."""

    noun = gettext_lazy("object")

    def get_object(self):
        queryset = self.filter_queryset(self.get_queryset())
        value = self.kwargs[self.lookup_url_kwarg or self.lookup_field]
        obj = queryset.filter(**{self.lookup_field: value}).first()
        if obj is None:
            raise NotFound(_("there is no %(noun)s %(id)s") % {"noun": self.noun, "id": value})
        self.check_object_permissions(self.request, obj)
        return obj


class OwnedMixin(LookupMixin):
    """The caller's own rows of ``model`` (``owner_field`` names the user), by UUID, and
    nothing else: another customer's is a 404 worded as if it did not exist."""

    model = None
    owner_field = "user"
    lookup_value_regex = UUID_RE

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return self.model.objects.none()
        return self.model.objects.filter(**{self.owner_field: self.owner(self.request)})

    def owner(self, request):
        """Whose rows these are: the acting account (a team's, or the caller's own)."""
        return account_of(request)


class PersonalMixin(OwnedMixin):
    """Rows that stay the person's own whatever account they act for (API keys, SSH keys,
    the notifications sent to them)."""

    team_area = None  # no team role applies

    def owner(self, request):
        return request.user
