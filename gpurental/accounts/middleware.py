"""The console's language for a logged-in user: their saved choice (User.language).

LocaleMiddleware has already picked one from the language cookie or Accept-Language
(it runs before authentication, so it cannot see the user); a saved choice overrides it.
An empty choice follows the browser.
"""

from django.conf import settings
from django.utils import translation


class UserLanguageMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        chosen = getattr(user, "language", "") if user is not None else ""
        if chosen and user.is_authenticated and chosen in dict(settings.LANGUAGES):
            translation.activate(chosen)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)
