"""The language something is written in for a user: their saved choice (User.language),
else English (LANGUAGE_CODE). Pages also follow the browser (UserLanguageMiddleware); what
is sent to the user (e-mail, invoice PDF) has no browser to ask, so it uses this."""

from django.conf import settings


def chosen_language(user) -> str:
    """The user's saved choice if it is one of LANGUAGES, else ""."""
    language = getattr(user, "language", "") or ""
    return language if language in dict(settings.LANGUAGES) else ""


def language_for(user) -> str:
    return chosen_language(user) or settings.LANGUAGE_CODE


def languages_of(user_ids) -> dict[int, str]:
    """``language_for`` of many users in one query: {user id: language}."""
    from gpurental.accounts.models import User

    known = dict(settings.LANGUAGES)
    return {
        pk: language if language in known else settings.LANGUAGE_CODE
        for pk, language in User.objects.filter(pk__in=set(user_ids)).values_list("pk", "language")
    }
