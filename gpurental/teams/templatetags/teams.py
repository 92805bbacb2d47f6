from django import template

from gpurental.teams.selectors import teams_of

register = template.Library()


@register.simple_tag(takes_context=True)
def team_choices(context):
    """The logged-in person's teams and roles, for the account switcher."""
    request = context.get("request")
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return []
    return teams_of(user=user)
