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
