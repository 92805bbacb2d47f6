"""The console's language for a logged-in user: their saved choice (User.language).

LocaleMiddleware has already picked one from the language cookie or Accept-Language
(it runs before authentication, so it cannot see the user); a saved choice overrides it.
An empty choice follows the browser.
"""

from django.utils import translation

from gpurental.accounts.languages import chosen_language


class UserLanguageMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        chosen = chosen_language(user) if user is not None and user.is_authenticated else ""
        if chosen:
            translation.activate(chosen)
            request.LANGUAGE_CODE = translation.get_language()
        return self.get_response(request)
