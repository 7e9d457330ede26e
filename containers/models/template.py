"""What to run: the ``ContainerTemplate`` row and its image pull policy
(``PullPolicy``)."""

from __future__ import annotations

from django.db import models


class PullPolicy(models.TextChoices):
    NEVER = "never"
    IF_NOT_PRESENT = "if_not_present"
    ALWAYS = "always"


class ContainerTemplate(models.Model):
    """What to run: image, command, env, volumes, resources and where it may run.

    ``env``, ``command`` and volume paths may use runtime variables (``$OWNER_ID``,
    ``${INSTANCE_ID}``...), expanded per instance at request time (``containers.spec.resolve``).
    ``volumes`` is a list of ``{"source", "target", "read_only"}``; ``resources`` holds
    ``cpu`` (cores) and ``memory`` (bytes or "256m"); ``constraints`` maps runtime label
    names to required values. Users see and use a template only while it is ``enabled``
    and, when ``allowed_groups`` is not empty, only if they belong to one of those groups
    (``containers.access``). ``user_env`` says which env keys users may set and
    ``secret_env`` which ``env`` values they never see (``containers.spec.env_policy``);
    ``user_env_removed`` notes the rules an upgrade took out of ``user_env`` (migration
    0012), until the template is saved again.
    """

    class ImageStatus(models.TextChoices):
        UNKNOWN = "unknown"
        PRESENT = "present"
        MISSING = "missing"

    name = models.CharField(max_length=128, unique=True)
    image = models.CharField(max_length=255)
    command = models.JSONField(
        default=list,
        blank=True,
        help_text="The words the container runs, a list of strings (no shell unless named: "
        '["sh", "-c", "..."]); empty: the image\'s own.',
    )
    env = models.JSONField(default=dict, blank=True)
    user_env = models.JSONField(
        default=list,
        blank=True,
        help_text="The env keys users may set: KEY, APP_* (a prefix of your own ending in "
        '_*), or {"name": ..., "pattern": regex for the value, "max_length": n}. Never *, '
        "nor a key some runtime reads at start-up. A key the template sets is replaced "
        "only when named exactly.",
    )
    user_env_removed = models.JSONField(
        default=list,
        blank=True,
        editable=False,
        help_text='user_env rules an upgrade removed because they are refused now ({"rule", '
        '"reason"}); shown in the admin until the template is saved again.',
    )
    secret_env = models.JSONField(
        default=list,
        blank=True,
        help_text="Keys of env whose values users never see.",
    )
    volumes = models.JSONField(default=list, blank=True)
    resources = models.JSONField(default=dict, blank=True)
    security = models.JSONField(
        default=dict,
        blank=True,
        help_text="Overrides of config.yml's container.security: user (owner, image, a uid "
        'or "uid:gid"), cap_add (from capabilities_allowed), read_only_rootfs, network '
        "(bridge, none, owner), runtime (from runtimes_allowed).",
    )
    constraints = models.JSONField(default=dict, blank=True)
    pull_policy = models.CharField(
        max_length=16, choices=PullPolicy.choices, default=PullPolicy.IF_NOT_PRESENT
    )
    image_status = models.CharField(
        max_length=16, choices=ImageStatus.choices, default=ImageStatus.UNKNOWN
    )
    image_checked_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(
        default=True, help_text="Switched off: no user sees it and no new instance uses it."
    )
    allowed_groups = models.ManyToManyField(
        "auth.Group",
        blank=True,
        related_name="container_templates",
        help_text="Only members of these groups see and use it; empty: every user.",
    )
    # Lifecycle policies (containers.spec.policies): empty takes config.yml's
    # container.policies; 0 turns the rule off for this template. Resolved into each
    # instance's spec at its create, like the rest of the template.
    max_lifetime = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds: a running instance is stopped this long after it started. "
        "Empty: the installation's default; 0: never.",
    )
    idle_timeout = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds: a running instance using less than the idle CPU threshold this "
        "long is stopped. Empty: the installation's default; 0: never. Only on engines that "
        "report CPU statistics.",
    )
    idle_cpu_threshold = models.FloatField(
        null=True,
        blank=True,
        help_text="Cores (0.02 = 2% of one core) below which the container counts as idle. "
        "Empty: the installation's default.",
    )
    delete_stopped_after = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds: a stopped or failed instance is deleted this long after it "
        "stopped (its history is kept). Empty: the installation's default; 0: never.",
    )
    extendable_by = models.CharField(
        max_length=8,
        blank=True,
        choices=[("nobody", "nobody"), ("owner", "the owner and staff"), ("staff", "staff")],
        help_text="Who may push back a max_lifetime stop. Empty: the installation's default.",
    )
    extend_max = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds: the most a run's stop may be pushed back in all. Empty: the "
        "installation's default.",
    )
    workspace_retention = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds: the owner's volume workspace is removed this long after their "
        "last instance is gone (the longest among the templates of the instances that used "
        "it wins). Empty: the installation's default; 0: kept.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
