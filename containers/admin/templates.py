"""The templates' pages: the form (env, volumes and command as rows, every field checked
as the API checks it), the image status and its refresh action."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import admin, messages

from containers.admin.common import RedactedFieldsMixin, json_block
from containers.admin.fields import CommandField, EnvRowsField, VolumeRowsField
from containers.errors import InvalidSpec
from containers.execution.images import template_images_refresh
from containers.models import (
    ContainerTemplate,
)
from containers.spec import env_policy, redaction
from containers.spec.policies import POLICY_FIELDS, template_policy_check
from containers.spec.resolve import (
    check_volume_roots,
    clean_template_fields,
    clean_volumes,
)
from containers.spec.template_services import JSON_FIELDS, WRITABLE, template_kubernetes_check
from core.admin_helpers import GREY, badge

IMAGE_COLOURS = {"present": "#198754", "missing": "#dc3545", "unknown": "#6c757d"}


class ContainerTemplateForm(forms.ModelForm):
    """Validates the JSON fields with the same rules the create service applies.

    The command is typed as text, env and volumes as rows (``containers.admin.fields``);
    a volume source must be able to lie inside ``allowed_volume_roots`` now, at save, not
    first when an instance is created (``check_volume_roots``).
    """

    command = CommandField(
        help_text="The words the container runs, such as <code>sleep 600</code>: split as a "
        "shell splits them (quotes group words) and stored as a list; no shell runs them, "
        "so for pipes, redirections or <code>&amp;&amp;</code> type <code>sh -c '...'</code>. "
        "Empty: the image's own command."
    )
    env = EnvRowsField(
        help_text="A row per variable: its name (letters, digits and <code>_</code>, not "
        "starting with a digit) and its value; an empty row is dropped."
    )
    volumes = VolumeRowsField(
        help_text="A row per volume: the source is <code>$WORKSPACE_PATH</code> (the owner's "
        "workspace) or a host path inside the allowed volume roots, the target an absolute "
        "path in the container; an empty row is dropped."
    )

    class Meta:
        model = ContainerTemplate
        fields = list(WRITABLE)
        help_texts = {
            "resources": "A JSON object with cpu (cores), memory (bytes or a size such as "
            '256m) and pids (processes), each optional; e.g. <code>{"cpu": 0.5, '
            '"memory": "256m"}</code>. Empty: no limits.',
            "constraints": "A JSON object of runtime label names to the values a runtime "
            'must have; e.g. <code>{"zone": "eu-1"}</code>. Empty: any runtime.',
            "security": "Overrides of config.yml's container.security: user (owner, image, a "
            'uid or "uid:gid"), cap_add (from capabilities_allowed), read_only_rootfs, network '
            '(bridge, none, owner), runtime (from runtimes_allowed); e.g. <code>{"user": '
            '"owner", "network": "none"}</code>. Empty: the configuration applies.',
        }

    def clean(self):
        cleaned = super().clean()
        for name in ("image", *JSON_FIELDS):
            if name not in cleaned:  # already invalid JSON, or not on the form
                continue
            try:
                normal = clean_template_fields(**{name: cleaned[name]})
            except InvalidSpec as exc:
                self.add_error(name, exc.message)
                continue
            if name == "command":
                cleaned["command"] = normal["command"]  # a list, however it was typed
        if "volumes" in cleaned and "volumes" not in self.errors:
            roots = settings.GOBRAVE["container"]["allowed_volume_roots"]
            try:
                cleaned["volumes"] = clean_volumes(cleaned["volumes"])  # stored as mappings
                check_volume_roots(cleaned["volumes"], roots)
            except InvalidSpec as exc:
                self.add_error("volumes", exc.message)
        if "secret_env" in cleaned and "env" in cleaned and not self.errors:
            try:
                clean_template_fields(env=cleaned["env"], secret_env=cleaned["secret_env"])
            except InvalidSpec as exc:
                self.add_error("secret_env", exc.message)
        if not self.errors:
            try:
                current = self.instance if self.instance.pk else None
                template_kubernetes_check(dict(cleaned), current)
                template_policy_check(dict(cleaned), current)
            except InvalidSpec as exc:
                field = exc.details.get("field")
                self.add_error(field if field in self.fields else None, exc.message)
        return cleaned


@admin.register(ContainerTemplate)
class ContainerTemplateAdmin(RedactedFieldsMixin, admin.ModelAdmin):
    form = ContainerTemplateForm
    redacted_fields = {"env": "env_shown", "volumes": "volumes_shown"}
    list_display = (
        "name",
        "image",
        "image_display",
        "image_checked_at",
        "pull_policy",
        "enabled",
    )
    list_filter = ("enabled", "image_status", "pull_policy", "allowed_groups")
    filter_horizontal = ("allowed_groups",)
    search_fields = ("name", "image")
    readonly_fields = ("image_status", "image_checked_at", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("name", "image", "pull_policy", "command")}),
        (
            "Environment and mounts",
            {
                "fields": ("env", "user_env", "secret_env", "volumes"),
                "description": "Values may use $OWNER_ID, ${INSTANCE_ID}... A volume whose "
                "source is $WORKSPACE_PATH mounts the owner's workspace (exactly that, never "
                "a path below it; gobrave makes it). Other sources are host paths under "
                "allowed_volume_roots, local engines only; one that could never lie inside "
                "them is refused here, when saved.",
            },
        ),
        ("Placement", {"fields": ("resources", "constraints")}),
        (
            "Lifecycle policies",
            {
                "fields": POLICY_FIELDS,
                "description": "Each overrides config.yml's container.policies for this "
                "template: empty takes the installation's value, 0 turns the rule off "
                '(docs/operations.md, "Policies"). Instances keep the policy of the '
                "template as it was at their create.",
            },
        ),
        (
            "Security",
            {
                "fields": ("security",),
                "description": "Overrides of config.yml's container.security for this "
                "template (see docs/security.md).",
            },
        ),
        (
            "Who may use it",
            {
                "fields": ("enabled", "allowed_groups"),
                "description": "Users see and use only enabled templates open to them; "
                "no group chosen: every user.",
            },
        ),
        ("Image", {"fields": ("image_status", "image_checked_at", "created_at", "updated_at")}),
    )

    def redacts(self, request, obj) -> bool:
        # Who may change the template edits it as written; who may only look sees it as
        # the API shows it to them.
        return not self.has_change_permission(request, obj) and super().redacts(request, obj)

    @admin.display(description="env")
    def env_shown(self, obj: ContainerTemplate):
        user = self.page_user()
        return json_block(redaction.env_for(user, obj.env or {}, obj.secret_env or ()))

    @admin.display(description="volumes")
    def volumes_shown(self, obj: ContainerTemplate):
        data = redaction.template_for(self.page_user(), {"volumes": obj.volumes})
        return json_block(data["volumes"])

    @admin.display(description="image status", ordering="image_status")
    def image_display(self, obj: ContainerTemplate):
        return badge(obj.image_status, IMAGE_COLOURS.get(obj.image_status, GREY))

    actions = ("refresh_image_status",)

    @admin.action(description="Check the selected templates' images now", permissions=["change"])
    def refresh_image_status(self, request, queryset):
        """Asks the engines now (``template_images_refresh``) and says what each found."""
        found: dict[str, list[str]] = {}
        for template in template_images_refresh(templates=list(queryset.order_by("name"))):
            found.setdefault(template.image_status, []).append(template.name)
        parts = [f"{status}: {', '.join(names)}" for status, names in sorted(found.items())]
        level = messages.WARNING if "missing" in found else messages.SUCCESS
        self.message_user(request, f"Image status — {'; '.join(parts)}.", level)

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.user_env_removed:
            self.message_user(
                request, env_policy.removed_rules_note(obj.user_env_removed), messages.WARNING
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    def save_model(self, request, obj, form, change) -> None:
        """Saves, then checks the image at once when nothing would pull a missing one.

        Saving clears the note of rules an upgrade removed: the page that was saved showed it.
        """
        obj.user_env_removed = []
        super().save_model(request, obj, form, change)
        if obj.pull_policy != "never":
            return
        template_images_refresh(templates=[obj])
        if obj.image_status == "missing":
            self.message_user(
                request,
                f"The image {obj.image} is missing on a runtime this template may use and its "
                "pull policy is never: creates will fail until the image is there.",
                messages.WARNING,
            )
