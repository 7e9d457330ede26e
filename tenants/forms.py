"""The token page's form: a name and a lifetime."""

from __future__ import annotations

from django import forms

from tenants.models import NAME_MAX

# (days, label); 0: never expires.
LIFETIMES = [(30, "30 days"), (7, "7 days"), (90, "90 days"), (365, "1 year"), (0, "never")]


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=NAME_MAX, help_text="What the token is for, e.g. ci or laptop."
    )
    lifetime = forms.TypedChoiceField(
        choices=LIFETIMES, coerce=int, initial=30, label="Expires after"
    )
