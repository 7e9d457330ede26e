"""A user's own pages: log in, log out, and their API tokens (``/account/``).

Any active user may use them, staff or not. The login is Django's, under the same lockout
(django-axes, ``tenants.login``) as the admin's: the lockout counts every ``authenticate``
with a request, whichever page called it.
"""

from __future__ import annotations

import datetime as dt

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from tenants import selectors, services
from tenants.errors import TokenNotFound, TokenRefused
from tenants.forms import TokenForm


class LoginView(auth_views.LoginView):
    """Django's login form for every user (the admin's refuses non-staff accounts)."""

    template_name = "account/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    next_page = "login"


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    """The user's tokens and a form for a new one. A POST that makes one answers with this
    page showing the key (once: it is kept nowhere, and no cache keeps this answer)."""
    form = TokenForm(request.POST or None)
    created = None
    if request.method == "POST" and form.is_valid():
        days = form.cleaned_data["lifetime"]
        expiry = timezone.now() + dt.timedelta(days=days) if days else None
        try:
            created = services.api_token_create(
                user=request.user, name=form.cleaned_data["name"], expiry=expiry
            )
        except TokenRefused as refused:
            field = "name" if refused.details.get("field") == "name" else None
            form.add_error(field, refused.message)
        else:
            form = TokenForm()
    context = {
        "title": "Your API tokens",
        "form": form,
        "created": created,
        "tokens": selectors.api_tokens_of(user=request.user),
        "now": timezone.now(),
    }
    status = 400 if request.method == "POST" and created is None else 200
    return render(request, "account/tokens.html", context, status=status)


@login_required
@require_POST
def token_revoke(request, pk: int):
    """Revoke one of the user's tokens; another user's is a 404, as a missing one."""
    try:
        services.api_token_revoke(user=request.user, token_id=pk)
    except TokenNotFound:
        raise Http404("No such token.") from None
    messages.success(request, "The token is revoked: it no longer authenticates.")
    return redirect("tokens")
