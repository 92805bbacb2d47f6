"""The language switcher (base.html): Django's set_language sets the cookie that
anonymous visitors keep; a logged-in user's choice is also saved on their account, so
that it follows them to another browser (UserLanguageMiddleware reads it)."""

from django.conf import settings
from django.views.decorators.http import require_POST
from django.views.i18n import set_language

from gpurental.accounts.services import user_language_set


@require_POST
def language_set(request):
    response = set_language(request)
    language = request.POST.get("language", "")
    if request.user.is_authenticated and language in dict(settings.LANGUAGES):
        user_language_set(user=request.user, language=language)
    return response
