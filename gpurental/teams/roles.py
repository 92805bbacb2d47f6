"""Team roles and what each may do: the one place that says so.

viewer   reads the team's instances, reservations, groups, leases, balance and invoices;
member   + launches, stops, starts, restarts, terminates and connects to instances, books
           and cancels reservations, manages groups and leases;
admin    + billing (top-ups, vouchers, billing address, auto top-up, webhook endpoints),
           registry logins, invites, and removes members below admin;
owner    + changes any role, removes admins, renames the team.

Django-free: plain strings, so that views, consumers and the gateway share it.
"""

from __future__ import annotations

OWNER, ADMIN, MEMBER, VIEWER = "owner", "admin", "member", "viewer"
ROLES = (OWNER, ADMIN, MEMBER, VIEWER)
RANK = {VIEWER: 1, MEMBER: 2, ADMIN: 3, OWNER: 4}

# What each kind of action needs. Areas are the API's ``scope_area`` names.
READ = VIEWER
OPERATE = MEMBER  # instances, reservations, groups, leases
BILLING = ADMIN  # top-ups, vouchers, billing address, auto top-up, webhooks
MANAGE_MEMBERS = ADMIN
MANAGE_OWNERS = OWNER

OPERATORS = (OWNER, ADMIN, MEMBER)  # may get into a team's instances (JupyterLab, SSH)

CHANGE_NEEDS = {
    "instances": OPERATE,
    "reservations": OPERATE,
    "groups": OPERATE,
    "leases": OPERATE,
    "billing": BILLING,
    "webhooks": BILLING,
    "registries": ADMIN,  # the team's registry logins
}


def at_least(role: str | None, needed: str) -> bool:
    """Whether ``role`` (None: not a member) reaches ``needed``."""
    return role is not None and RANK.get(role, 0) >= RANK[needed]


def change_needs(area: str) -> str:
    """The least role that may change things in ``area`` (unknown areas: admin)."""
    return CHANGE_NEEDS.get(area, ADMIN)


def refusal(needed: str, role: str) -> str:
    return f"your role in this team is {role}; this needs the {needed} role or higher"
