"""Password logins (and the sessions they open) are for people: a team account
(``User.kind == "team"``) holds a team's balance and rentals and never logs in, even if
someone gave it a password in the back-office."""

from django.contrib.auth.backends import ModelBackend

from gpurental.accounts.models import AccountKind


class PersonBackend(ModelBackend):
    def user_can_authenticate(self, user) -> bool:
        return super().user_can_authenticate(user) and user.kind != AccountKind.TEAM
