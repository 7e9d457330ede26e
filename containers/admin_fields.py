"""Template form fields an operator can type into: a command as a plain string, env and
volumes one row per line. JSON is still accepted where a value starts like JSON, and
everything typed is then validated by ``containers.spec`` exactly as before.
"""

from __future__ import annotations

import json

from django import forms


class _TextField(forms.CharField):
    """A model JSON value edited as text: ``prepare_value`` draws it, ``to_python`` reads it."""

    json_start = ""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.pop("encoder", None)
        kwargs.pop("decoder", None)
        kwargs.pop("max_length", None)
        super().__init__(**kwargs)

    def to_python(self, value):
        text = (super().to_python(value) or "").strip()
        if self.json_start and text.startswith(self.json_start):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise forms.ValidationError(f"Not valid JSON: {exc.msg}.") from None
        return self.parse(text)

    def parse(self, text: str):  # pragma: no cover - overridden
        raise NotImplementedError

    def has_changed(self, initial, data) -> bool:
        try:
            return self.to_python(data) != initial
        except forms.ValidationError:
            return True


class CommandField(_TextField):
    """``sleep 600`` (run by ``sh -c``) or a JSON list of words (``["sleep", "600"]``)."""

    json_start = "["
    widget = forms.TextInput(attrs={"size": 80})

    def parse(self, text: str):
        return text

    def prepare_value(self, value):
        if isinstance(value, list):
            return json.dumps(value) if value else ""
        return value or ""


class EnvRowsField(_TextField):
    """One ``NAME=value`` per line (a JSON object is also accepted)."""

    json_start = "{"
    widget = forms.Textarea(attrs={"rows": 4, "cols": 80, "placeholder": "MODE=debug"})

    def parse(self, text: str):
        env = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, value = line.partition("=")
            if not sep:
                raise forms.ValidationError(f"Line {number}: write NAME=value.")
            if name.strip() in env:
                raise forms.ValidationError(f"Line {number}: {name.strip()} is set twice.")
            env[name.strip()] = value
        return env

    def prepare_value(self, value):
        if isinstance(value, dict):
            return "\n".join(f"{name}={text}" for name, text in value.items())
        return value or ""


class VolumeRowsField(_TextField):
    """One ``source:target`` or ``source:target:ro`` per line (a JSON list is accepted)."""

    json_start = "["
    widget = forms.Textarea(attrs={"rows": 3, "cols": 80, "placeholder": "$WORKSPACE_PATH:/work"})

    def parse(self, text: str):
        return [line.strip() for line in text.splitlines() if line.strip()]

    def prepare_value(self, value):
        if isinstance(value, list):
            rows = []
            for volume in value:
                if isinstance(volume, dict):
                    ro = ":ro" if volume.get("read_only") else ""
                    rows.append(f"{volume.get('source', '')}:{volume.get('target', '')}{ro}")
                else:
                    rows.append(str(volume))
            return "\n".join(rows)
        return value or ""
