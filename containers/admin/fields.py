"""Template form fields an operator can type into: a command as one line of words, env and
volumes as rows of inputs (``RowsWidget``: a name and a value, a source, a target and a
mode). A posted text is still read (one ``NAME=value`` or ``source:target[:ro]`` per
line, or JSON where it starts like JSON). Whatever is typed is then validated by
``containers.spec.resolve`` exactly as before.
"""

from __future__ import annotations

import json
import shlex
from itertools import zip_longest

from django import forms

from containers.errors import InvalidSpec
from containers.spec.resolve import command_from_text


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
    """``sleep 600``, split into words as a shell would (``command_from_text``: stored as
    ``["sleep", "600"]``), or a JSON list of words; drawn back as one line that splits
    into the same words (``shlex.join``)."""

    json_start = "["
    widget = forms.TextInput(attrs={"size": 80})

    def parse(self, text: str):
        try:
            return command_from_text(text)
        except InvalidSpec as exc:
            raise forms.ValidationError(exc.message) from None

    def prepare_value(self, value):
        if isinstance(value, list) and all(isinstance(word, str) for word in value):
            return shlex.join(value)
        return json.dumps(value) if isinstance(value, list) else value or ""


class RowsWidget(forms.Widget):
    """A table with one row of inputs per entry, named ``<field>-<column>`` (repeated).

    ``containers/rows.js`` (a local static file) adds a row and removes one in place.
    Without JavaScript the table still works: it is drawn with ``SPARE`` empty rows to
    fill, and a row emptied is dropped when the form is saved. The value is a list of
    rows (tuples of strings, one per column).
    """

    template_name = "containers/widgets/rows.html"
    SPARE = 2
    # (column, heading, choices or None for a text input, input size)
    columns: tuple[tuple[str, str, tuple[tuple[str, str], ...] | None, int], ...] = ()

    class Media:
        js = ("containers/rows.js",)
        css = {"all": ("containers/rows.css",)}

    def __init__(self, columns, attrs=None):
        super().__init__(attrs)
        self.columns = tuple(columns)

    def _names(self, name: str) -> list[str]:
        return [f"{name}-{column}" for column, *_ in self.columns]

    def value_from_datadict(self, data, files, name):
        names = self._names(name)
        if names[0] not in data:
            return data.get(name)  # a text, posted by a script or an older form
        getlist = getattr(data, "getlist", None)
        lists = [getlist(key) if getlist else _as_list(data.get(key)) for key in names]
        return [tuple(row) for row in zip_longest(*lists, fillvalue="")]

    def value_omitted_from_data(self, data, files, name):
        return self._names(name)[0] not in data and name not in data

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        width = len(self.columns)
        rows = [tuple(row) + ("",) * (width - len(row)) for row in value or []]
        rows += [("",) * width] * self.SPARE
        context["widget"]["columns"] = [
            {"name": f"{name}-{column}", "heading": heading, "choices": choices, "size": size}
            for column, heading, choices, size in self.columns
        ]
        context["widget"]["rows"] = [
            [
                {
                    "name": column["name"],
                    "value": cell,
                    "choices": column["choices"],
                    "size": column["size"],
                    "heading": column["heading"],
                }
                for column, cell in zip(context["widget"]["columns"], row, strict=True)
            ]
            for row in rows
        ]
        context["widget"]["blank"] = context["widget"]["rows"][-1]
        return context


def _as_list(value) -> list[str]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


class _RowsField(_TextField):
    """A JSON value edited as rows (``RowsWidget``) or, posted as text, one row a line."""

    def to_python(self, value):
        if isinstance(value, list) and all(isinstance(row, tuple) for row in value):
            return self.from_rows([tuple(str(cell) for cell in row) for row in value])
        return super().to_python(value)

    def from_rows(self, rows: list[tuple[str, ...]]):  # pragma: no cover - overridden
        raise NotImplementedError

    def to_rows(self, value) -> list[tuple[str, ...]]:  # pragma: no cover - overridden
        raise NotImplementedError

    def prepare_value(self, value):
        if isinstance(value, list) and all(isinstance(row, tuple) for row in value):
            return value  # the rows as posted, drawn again with the form's errors
        if isinstance(value, str):
            try:
                value = super().to_python(value)
            except forms.ValidationError:
                return [(value,)]  # unreadable text: kept where it can be corrected
        try:
            return self.to_rows(value)
        except (AttributeError, TypeError, ValueError):
            return [(json.dumps(value),)]


class EnvRowsField(_RowsField):
    """A row per variable: its name and its value (text: one ``NAME=value`` per line, or
    a JSON object)."""

    json_start = "{"

    def __init__(self, **kwargs):
        kwargs.setdefault(
            "widget",
            RowsWidget([("name", "name", None, 24), ("value", "value", None, 48)]),
        )
        super().__init__(**kwargs)

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

    def from_rows(self, rows):
        env = {}
        for number, (name, value, *_) in enumerate(rows, start=1):
            name = name.strip()
            if not name and not value:
                continue  # an empty row: dropped
            if not name:
                raise forms.ValidationError(f"Row {number}: a value needs a name.")
            if name in env:
                raise forms.ValidationError(f"Row {number}: {name} is set twice.")
            env[name] = value
        return env

    def to_rows(self, value):
        if not value:
            return []
        return [(str(name), "" if text is None else str(text)) for name, text in value.items()]


VOLUME_MODES = (("rw", "read-write"), ("ro", "read-only"))


class VolumeRowsField(_RowsField):
    """A row per volume: its source, its target and read-write or read-only (text: one
    ``source:target`` or ``source:target:ro`` per line, or a JSON list)."""

    json_start = "["

    def __init__(self, **kwargs):
        kwargs.setdefault(
            "widget",
            RowsWidget(
                [
                    ("source", "source (host path or $WORKSPACE_PATH)", None, 36),
                    ("target", "target (in the container)", None, 24),
                    ("mode", "mode", VOLUME_MODES, 0),
                ]
            ),
        )
        super().__init__(**kwargs)

    def parse(self, text: str):
        return [line.strip() for line in text.splitlines() if line.strip()]

    def from_rows(self, rows):
        volumes = []
        for number, (source, target, mode, *_) in enumerate(rows, start=1):
            source, target = source.strip(), target.strip()
            if not source and not target:
                continue  # an empty row: dropped, whatever its mode
            if mode not in dict(VOLUME_MODES):
                raise forms.ValidationError(f"Row {number}: the mode is rw or ro.")
            if not source or not target:
                missing = "source" if not source else "target"
                raise forms.ValidationError(f"Row {number}: the {missing} is missing.")
            volumes.append({"source": source, "target": target, "read_only": mode == "ro"})
        return volumes

    def to_rows(self, value):
        rows = []
        for volume in value or []:
            if isinstance(volume, dict):
                mode = "ro" if volume.get("read_only") else "rw"
                rows.append((str(volume.get("source", "")), str(volume.get("target", "")), mode))
            else:
                source, _, rest = str(volume).partition(":")
                target, _, mode = rest.partition(":")
                rows.append((source, target, "ro" if mode == "ro" else "rw"))
        return rows
