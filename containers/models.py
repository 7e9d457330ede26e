"""Containers: engines, templates, instances and their history."""

from __future__ import annotations

import datetime as dt
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone
from django_fsm import FSMField, FSMModelMixin, transition

from containers.addresses import engine_address_problems, kube_target_problems
from containers.states import Status, sources_of
from core.write_order import txid_field


class PullPolicy(models.TextChoices):
    NEVER = "never"
    IF_NOT_PRESENT = "if_not_present"
    ALWAYS = "always"


class Runtime(models.Model):
    """A container engine gobrave schedules onto (a Docker endpoint today).

    ``labels`` are matched against a template's scheduling constraints; only
    ``enabled`` runtimes receive new instances. The local engine's row is created by a
    migration. The object that talks to the engine is got with
    ``containers.engines.engine_for(runtime)``; the ``health*`` fields cache what the
    last check found (written only by ``containers.execution.health.runtime_health_record``).
    ``workspace_driver`` says how owners' workspaces are made on this engine: a named
    volume (the default, the only choice for a remote engine) or a directory under
    ``workspace_root`` (an engine on this host, ``is_local``). ``base_url`` and the
    ``tls_*`` file paths say how the engine is reached (``containers.addresses``: unix,
    tcp with mutual TLS, ssh); ``clean()`` refuses an unsafe or malformed address, and
    ``last_error`` says in an operator's words why the engine did not answer.

    ``cordoned``: the engine takes no new placement (creates, DAG runs) while everything
    on it keeps running and its instances still start there; ``decommissioned_at``: the
    engine is gone for good and gobrave forgot what it held, so the row may be deleted.
    Both are written only by ``containers.fleet.services``. Every change of health,
    cordon, decommission, ``enabled`` and capacity is an entry in ``RuntimeEvent``.
    """

    class Driver(models.TextChoices):
        DOCKER = "docker"
        KUBERNETES = "kubernetes"
        FAKE = "fake", "fake (tests)"

    class AccessMode(models.TextChoices):
        RWO = "ReadWriteOnce", "ReadWriteOnce (an owner's Pods share its claim's node)"
        RWX = "ReadWriteMany", "ReadWriteMany (anywhere)"

    class Health(models.TextChoices):
        UNKNOWN = "unknown"  # never checked
        REACHABLE = "reachable"
        UNREACHABLE = "unreachable"

    class WorkspaceDriver(models.TextChoices):
        VOLUME = "volume", "named volume"
        DIRECTORY = "directory", "directory under workspace_root (local engines)"

    name = models.SlugField(max_length=64, unique=True)
    driver = models.CharField(max_length=16, choices=Driver.choices, default=Driver.DOCKER)
    base_url = models.CharField(max_length=255, default="unix:///var/run/docker.sock")
    labels = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    workspace_driver = models.CharField(
        max_length=16, choices=WorkspaceDriver.choices, default=WorkspaceDriver.VOLUME
    )
    # Mutual TLS to a ``tcp://`` engine: PEM files on the hosts that run gobrave, given by
    # path (the paths are not secrets; the files are, and never enter the database).
    tls_ca_cert = models.CharField(
        max_length=1024,
        blank=True,
        help_text="tcp:// only: path of the CA certificate that signed the engine's certificate.",
    )
    tls_client_cert = models.CharField(
        max_length=1024,
        blank=True,
        help_text="tcp:// only: path of gobrave's client certificate (signed by the CA the "
        "engine trusts).",
    )
    tls_client_key = models.CharField(
        max_length=1024,
        blank=True,
        help_text="tcp:// only: path of the client certificate's private key (a file no other "
        "user may read; its content is never stored, shown or logged).",
    )
    # Kubernetes (driver ``kubernetes``): the namespace, and how its API is reached: a
    # kubeconfig file's path and context (not secrets: the file is, and never enters the
    # database), or, with no file, the service account of the Pod gobrave runs in.
    kube_namespace = models.CharField(
        "namespace", max_length=63, blank=True, help_text="kubernetes only: the namespace."
    )
    kube_config = models.CharField(
        "kubeconfig",
        max_length=1024,
        blank=True,
        help_text="kubernetes only: path of the kubeconfig file on gobrave's hosts; empty: "
        "the in-cluster service account. Certificate verification is always on.",
    )
    kube_context = models.CharField(
        "context",
        max_length=253,
        blank=True,
        help_text="kubernetes only: the context (empty: the file's current one).",
    )
    kube_storage_class = models.CharField(
        "storage class",
        max_length=253,
        blank=True,
        help_text="kubernetes only: of owners' workspace claims (empty: the cluster's default).",
    )
    kube_volume_size = models.CharField(
        "workspace size",
        max_length=32,
        default="1Gi",
        blank=True,
        help_text="kubernetes only: of each owner's workspace claim, e.g. 1Gi (empty: 1Gi).",
    )
    kube_access_mode = models.CharField(
        "access mode",
        max_length=16,
        choices=AccessMode.choices,
        default=AccessMode.RWO,
        blank=True,
        help_text="kubernetes only: ReadWriteOnce places an owner's Pods on its claim's node.",
    )
    node_name = models.CharField(max_length=255, blank=True)
    # The engine's health as last checked (``containers.execution.health``): pages show these and
    # never ask the engine themselves.
    health = models.CharField(max_length=16, choices=Health.choices, default=Health.UNKNOWN)
    health_checked_at = models.DateTimeField(null=True, blank=True)
    health_since = models.DateTimeField(
        null=True, blank=True, help_text="When the engine entered its current health."
    )
    last_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="The last time the engine answered."
    )
    last_error = models.TextField(blank=True, help_text="Why the last check failed.")
    # Whether the engine gives CPU figures (``Engine.stats``), where that is the engine's
    # own (a driver that is ``cpu_discovered``: a Kubernetes cluster serves the metrics API
    # or not), as last asked (``containers.runtime_stats``); read by the validation of a
    # template's idle_timeout. Null: not asked yet.
    serves_stats = models.BooleanField(
        null=True,
        blank=True,
        editable=False,
        help_text="Whether the engine reports CPU use (Kubernetes: serves metrics.k8s.io), "
        "as last checked; empty: not checked yet.",
    )
    cordoned = models.BooleanField(
        default=False,
        help_text="No new placement here; what runs here keeps running (see the admin actions).",
    )
    cordoned_at = models.DateTimeField(null=True, blank=True)
    cordoned_by = models.CharField(max_length=150, blank=True)
    decommissioned_at = models.DateTimeField(
        null=True, blank=True, help_text="Gone for good: its instances were forgotten."
    )
    # Capacity of its own (``containers.placement.capacity``), beside the global cap; empty:
    # no limit of its own.
    max_containers = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="At most this many instances placed here (every state but pending, "
        "delete_pending and deleting); empty: no limit of its own.",
    )
    max_concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="At most this many create/start slots here at once (beside "
        "create_queue_max_concurrency); empty: no limit of its own.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def placement_state(self) -> str:
        """Where it stands for new work, in the admin's words (its placement column and
        its history's from/to): ``decommissioned``, ``cordoned``, ``disabled`` or ``open``."""
        if self.decommissioned_at is not None:
            return "decommissioned"
        if self.cordoned:
            return "cordoned"
        return "open" if self.enabled else "disabled"

    @property
    def is_local(self) -> bool:
        """The engine runs on this host (a unix socket), so its host paths are ours to
        check; every other engine gets named volumes only."""
        return self.base_url.startswith(("unix://", "fake://"))

    @property
    def tls_files(self) -> tuple[str, str, str] | None:
        """``(ca_cert, client_cert, client_key)`` when the row reaches its engine over
        mutual TLS, else None."""
        if not (self.tls_ca_cert or self.tls_client_cert or self.tls_client_key):
            return None
        return (self.tls_ca_cert, self.tls_client_cert, self.tls_client_key)

    @property
    def kube_address(self) -> str:
        """What a ``kubernetes`` row's ``base_url`` is set to (rows of one namespace of
        one context are one engine)."""
        return f"kubernetes://{self.kube_context or 'in-cluster'}/{self.kube_namespace}"

    @property
    def kube_target(self) -> dict[str, str]:
        """A ``kubernetes`` row's target, by the names that ``KubeTarget`` and the check of
        it (``addresses.kube_target_problems``) take."""
        return {
            "namespace": self.kube_namespace,
            "kubeconfig": self.kube_config,
            "context": self.kube_context,
            "storage_class": self.kube_storage_class,
            "volume_size": self.kube_volume_size,
            "access_mode": self.kube_access_mode,
        }

    def clean(self) -> None:
        """Refuses an address gobrave cannot reach safely (``engine_address_problems``;
        a ``kubernetes`` row: ``kube_target_problems``, its ``base_url`` derived) and a
        directory workspace on a remote engine."""
        if self.driver == self.Driver.KUBERNETES:
            self.base_url = self.kube_address
            self.kube_volume_size = self.kube_volume_size or "1Gi"
            self.kube_access_mode = self.kube_access_mode or self.AccessMode.RWO
            problems = kube_target_problems(**self.kube_target)
            if self.workspace_driver == self.WorkspaceDriver.DIRECTORY:
                problems["workspace_driver"] = "A Kubernetes runtime uses workspace claims."
            if problems:
                raise ValidationError(problems)
            return
        problems = engine_address_problems(
            driver=self.driver,
            base_url=self.base_url,
            tls_ca_cert=self.tls_ca_cert,
            tls_client_cert=self.tls_client_cert,
            tls_client_key=self.tls_client_key,
        )
        if self.workspace_driver == self.WorkspaceDriver.DIRECTORY and not self.is_local:
            problems.setdefault(
                "workspace_driver", "A remote engine can only use named-volume workspaces."
            )
        if problems:
            raise ValidationError(problems)


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


class ContainerInstance(FSMModelMixin, models.Model):
    """One container gobrave manages, and where it is in its lifecycle.

    ``status`` is a protected django-fsm field: it changes only through the transition
    methods below, whose allowed sources come from ``containers.states.TRANSITIONS``.
    Transition methods set fields and nothing else (no I/O, no enqueueing); services
    call them on a row they hold with ``select_for_update()`` and save with
    ``update_fields``. ``spec`` is the resolved container spec, fixed at request time;
    workers use only it.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=128)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="containers"
    )
    template = models.ForeignKey(
        ContainerTemplate, on_delete=models.PROTECT, related_name="instances"
    )
    # Empty while ``pending`` (a create is placed when it takes its slot:
    # ``containers.placement``), except for a create pinned to an engine (a DAG run's node);
    # once its container exists the instance keeps its engine for life.
    runtime = models.ForeignKey(
        Runtime, on_delete=models.PROTECT, related_name="instances", null=True, blank=True
    )
    placement_reason = models.CharField(
        max_length=255, blank=True, help_text="Why the instance went to its engine."
    )
    status = FSMField(default=Status.PENDING, choices=Status.choices, protected=True)
    container_id = models.CharField(max_length=128, blank=True, help_text="The engine's id.")
    runtime_node_name = models.CharField(max_length=255, blank=True)
    runtime_missing = models.BooleanField(
        default=False, help_text="The engine no longer has this container."
    )
    # The engine accepted the container and made it wait for room of its own (a Pod
    # waiting for a node) since then: from then until its next transition the instance
    # holds no create/start slot (it passed the capacity gate once; the engine has it
    # now). While ``engine_placed_at`` is empty it still waits: ``start_timeout`` does not
    # run and ``unschedulable_timeout`` may bound it. Once the engine found it room
    # (``engine_placed_at``: the Pod was scheduled) ``start_timeout`` runs again, the wait
    # not counted. Written by ``execution.sync``; every transition clears both.
    engine_waiting_since = models.DateTimeField(null=True, blank=True)
    engine_placed_at = models.DateTimeField(null=True, blank=True)
    # The engine has had no word from the node that holds the container (a Pod
    # ``Unknown``: its node stopped reporting while the API server answers) since then.
    # The instance keeps its state meanwhile; past ``engine_lost_after`` it is given up
    # (``execution.engine_loss.instance_node_lost``). Written by ``execution.sync``,
    # cleared when the node reports again; every transition clears it.
    engine_silent_since = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    status_reason = models.TextField(blank=True)
    spec = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    status_changed_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Lifecycle policies (``containers.execution.policies``), armed by the transitions from
    # ``spec["policy"]`` (DAG nodes have none): when the policy pass stops this run
    # (max_lifetime, pushed back by ``extended_seconds``), since when its container has
    # been idle (idle_timeout; null: not watched, and only a running instance is: leaving
    # ``running`` clears it, an unpause or a start arms it again), and when it deletes the
    # stopped instance (delete_stopped_after). Each has a partial index: a pass reads only
    # the due rows.
    stop_at = models.DateTimeField(null=True, blank=True)
    extended_seconds = models.PositiveIntegerField(default=0)
    idle_since = models.DateTimeField(null=True, blank=True)
    cpu_sample = models.JSONField(null=True, blank=True, editable=False)
    # When the idle watch last took this row's turn (measured or not: an engine that
    # gives no figure for it, or does not answer, does not keep it first in line).
    idle_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    delete_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        # The lists' default order is newest first, ties on the id (core.api.pagination):
        # each filter a list takes has an index in that order, so a page reads its rows
        # from the index and stops (docs/benchmarks.md, "Reads at 100,000 rows").
        indexes = [
            models.Index(fields=["status"]),
            models.Index(fields=["owner", "-created_at"]),
            models.Index(fields=["created_at", "id"], name="instance_created"),
            models.Index(fields=["status", "created_at", "id"], name="instance_status_created"),
            models.Index(fields=["template", "created_at"], name="instance_template_created"),
            models.Index(fields=["runtime", "created_at"], name="instance_runtime_created"),
            models.Index(fields=["name", "id"], name="instance_name"),
            models.Index(
                fields=["stop_at"],
                name="instance_policy_stop",
                condition=models.Q(stop_at__isnull=False),
            ),
            # The idle watch's turn: the watched rows, the longest unchecked first (never
            # checked: since their run began).
            models.Index(
                Coalesce("idle_checked_at", "idle_since"),
                F("id"),
                name="instance_policy_idle_turn",
                condition=models.Q(idle_since__isnull=False),
            ),
            models.Index(
                fields=["delete_at"],
                name="instance_policy_delete",
                condition=models.Q(delete_at__isnull=False),
            ),
            # The reconciler's turn through the stopped instances, and its look-up of the
            # stopped ones the engine lists running (``reconciler._stopped_rows``).
            models.Index(
                fields=["runtime", "id"],
                name="instance_stopped_turn",
                condition=Q(status="stopped"),
            ),
            models.Index(
                fields=["runtime", "container_id"],
                name="instance_stopped_container",
                condition=Q(status="stopped"),
            ),
            # Failed instances whose node name the reconciler still backfills (few).
            models.Index(
                fields=["runtime"],
                name="instance_failed_unplaced",
                condition=Q(status="failed", runtime_node_name="") & ~Q(container_id=""),
            ),
        ]
        constraints = [
            # An owner's names are unique while the rows exist: a delete frees the name
            # when it removes the row (a failed delete gives the instance back its name).
            models.UniqueConstraint(fields=["owner", "name"], name="instance_name_per_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"

    @property
    def container_name(self) -> str:
        """The deterministic engine-side name: the same on every retry."""
        return f"gb-{self.id}"

    # --- transitions: guards and fields only -------------------------------------------

    def _changed(self, reason: str = "") -> None:
        self.status_changed_at = timezone.now()
        self.status_reason = reason
        # A wait for room on the engine belongs to the state it happened in.
        self.engine_waiting_since = self.engine_placed_at = None
        # So does the silence of its node: a look after the move starts it again.
        self.engine_silent_since = None

    def _policy(self) -> dict:
        return (self.spec or {}).get("policy") or {}

    def _arm_run_policies(self) -> None:
        """A run begins: its max_lifetime deadline, its idle watch; no delete pending."""
        policy, now = self._policy(), timezone.now()
        lifetime = policy.get("max_lifetime")
        self.stop_at = now + dt.timedelta(seconds=lifetime) if lifetime else None
        self.extended_seconds = 0
        self._arm_idle_watch()
        self.delete_at = None

    def _arm_idle_watch(self) -> None:
        """The idle watch (re)starts: idle from now, no sample yet (the first look only
        takes one), so what happened before (a pause) is never averaged in."""
        self.idle_since = timezone.now() if self._policy().get("idle_timeout") else None
        self.cpu_sample = None

    def _end_idle_watch(self) -> None:
        """The instance leaves ``running``: only running rows are watched, so only they
        are in the idle watch's index (``instance_policy_idle_turn``)."""
        self.idle_since = self.cpu_sample = None

    def _arm_rest_policies(self) -> None:
        """A run ended: no stop due; delete_stopped_after from now, where set."""
        after = self._policy().get("delete_stopped_after")
        self.stop_at = self.idle_since = self.cpu_sample = None
        self.delete_at = timezone.now() + dt.timedelta(seconds=after) if after else None

    @transition(field=status, source=sources_of(Status.CREATING), target=Status.CREATING)
    def mark_creating(self) -> None:
        self._changed()

    @transition(field=status, source=sources_of(Status.RUNNING), target=Status.RUNNING)
    def mark_running(self) -> None:
        self._changed()
        self.started_at = timezone.now()
        self.finished_at = None
        self.exit_code = None
        if self.status != Status.PAUSED:  # (still the source here)
            self._arm_run_policies()
        else:  # an unpause is the same run: its time limit stands, its idle watch restarts
            self._arm_idle_watch()

    @transition(field=status, source=sources_of(Status.PAUSED), target=Status.PAUSED)
    def mark_paused(self) -> None:
        self._changed()
        self._end_idle_watch()

    @transition(field=status, source=sources_of(Status.STOP_PENDING), target=Status.STOP_PENDING)
    def mark_stop_pending(self) -> None:
        self._changed()
        self._end_idle_watch()

    @transition(field=status, source=sources_of(Status.STOPPING), target=Status.STOPPING)
    def mark_stopping(self) -> None:
        self._changed()

    @transition(field=status, source=sources_of(Status.STOPPED), target=Status.STOPPED)
    def mark_stopped(self, exit_code: int | None = None, reason: str = "") -> None:
        self._changed(reason)
        self.exit_code = exit_code
        self.finished_at = timezone.now()
        self._arm_rest_policies()

    @transition(field=status, source=sources_of(Status.START_PENDING), target=Status.START_PENDING)
    def mark_start_pending(self) -> None:
        self._changed()
        self._end_idle_watch()

    @transition(field=status, source=sources_of(Status.STARTING), target=Status.STARTING)
    def mark_starting(self) -> None:
        self._changed()

    @transition(
        field=status, source=sources_of(Status.DELETE_PENDING), target=Status.DELETE_PENDING
    )
    def mark_delete_pending(self) -> None:
        self._changed()
        self.stop_at = self.idle_since = self.cpu_sample = self.delete_at = None

    @transition(field=status, source=sources_of(Status.DELETING), target=Status.DELETING)
    def mark_deleting(self) -> None:
        self._changed()

    @transition(field=status, source=sources_of(Status.FAILED), target=Status.FAILED)
    def mark_failed(self, reason: str, exit_code: int | None = None) -> None:
        self._changed(reason)
        if exit_code is not None:
            self.exit_code = exit_code
        self.finished_at = timezone.now()
        self._arm_rest_policies()

    def transition_method(self, target: str):
        """The bound transition method that moves this instance to ``target``."""
        return getattr(self, f"mark_{target}")


class ContainerEvent(models.Model):
    """Append-only history of an instance: requests, transitions, runtime events.

    Keeps the instance's uuid and name as plain values (no foreign key), so the history
    survives the instance's deletion; ``owner`` is the instance's owner, kept the same way
    (no database constraint: deleting a user never touches the history), so an owner
    sees the history of their deleted instances too (``GET /api/events/``). Empty for
    entries of no instance (an orphan container, a leftover removed). ``txid`` is the
    writing transaction (``core.write_order``): the events feed's order.
    Never updated; deleted by gobrave only by retention, and only for instances that are
    gone (``retention.deleted_instance_history``, off by default).
    """

    instance_id = models.UUIDField(db_index=True)
    instance_name = models.CharField(max_length=128)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        blank=True,
        related_name="+",
    )
    kind = models.CharField(max_length=64, db_index=True)
    from_status = models.CharField(max_length=32, blank=True)
    to_status = models.CharField(max_length=32, blank=True)
    message = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True, db_index=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    txid = txid_field()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # An instance's history page, newest first, however long the history.
            models.Index(fields=["instance_id", "created_at", "id"], name="event_instance_history"),
            # The events feed (events.selectors) in its order, and one per filter.
            models.Index(fields=["txid", "id"], name="event_feed"),
            models.Index(fields=["owner", "txid", "id"], name="event_feed_owner"),
            models.Index(fields=["instance_id", "txid", "id"], name="event_feed_instance"),
            models.Index(fields=["kind", "txid", "id"], name="event_feed_kind"),
            models.Index(fields=["actor", "txid", "id"], name="event_feed_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.instance_name}: {self.kind} {self.from_status}->{self.to_status}"


class RuntimeEvent(models.Model):
    """Append-only history of an engine (a ``Runtime`` row): added, its settings changed
    (how it is reached, labels...), deleted; its health changes (reachable
    again, unreachable), cordon and uncordon, decommission, enabled and disabled, and
    capacity changes, each with who did it (``actor``: ``user:<name>``, ``monitor``...)
    and why (``message``).

    Written only by ``containers.runtime_history.runtime_event_record``, inside the
    transaction that makes the change, so a change and its entry commit together or not
    at all. Keeps the runtime's id and name as plain values (no foreign key): the history
    outlives the row. Entries concern no one owner's instances: the events feed shows them
    to those who see the engines (``containers.view_runtime``). ``txid`` is the writing
    transaction (``core.write_order``): the events feed's order. Never updated.
    """

    class Kind(models.TextChoices):
        # The health changes have the names of their webhooks (``webhooks.kinds``).
        UNREACHABLE = "engine.unreachable", "engine unreachable"
        REACHABLE = "engine.reachable", "engine reachable again"
        CORDONED = "engine.cordoned", "engine cordoned"
        UNCORDONED = "engine.uncordoned", "engine uncordoned"
        DECOMMISSIONING = "engine.decommissioning", "engine decommission begun"
        DECOMMISSIONED = "engine.decommissioned", "engine decommissioned"
        ENABLED = "engine.enabled", "engine enabled"
        DISABLED = "engine.disabled", "engine disabled"
        CAPACITY = "engine.capacity", "engine capacity changed"
        ADDED = "engine.added", "engine added"
        CHANGED = "engine.changed", "engine settings changed"
        DELETED = "engine.deleted", "engine deleted"

    runtime_id = models.BigIntegerField(help_text="The runtime's id (the row may be gone).")
    runtime_name = models.CharField(max_length=64)
    kind = models.CharField(max_length=64, choices=Kind.choices)
    from_status = models.CharField(max_length=32, blank=True)
    to_status = models.CharField(max_length=32, blank=True)
    message = models.TextField(blank=True)
    actor = models.CharField(max_length=150, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    txid = txid_field()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # A runtime's history, newest first.
            models.Index(fields=["runtime_id", "created_at", "id"], name="rtevent_history"),
            # The events feed (events.selectors) in its order, and one per filter.
            models.Index(fields=["txid", "id"], name="rtevent_feed"),
            models.Index(fields=["kind", "txid", "id"], name="rtevent_feed_kind"),
            models.Index(fields=["actor", "txid", "id"], name="rtevent_feed_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.runtime_name}: {self.kind}"


class Gate(models.Model):
    """A named row that serializes a global decision across every process and host.

    ``admission`` is locked by every create request (maxPending), ``capacity`` by every
    move into ``creating``/``starting`` (maxConcurrency). Both rows are created by a
    migration; ``select_for_update()`` on PostgreSQL, the IMMEDIATE write lock on SQLite.
    """

    name = models.CharField(max_length=32, primary_key=True)

    def __str__(self) -> str:
        return self.name


class OrphanContainer(models.Model):
    """A container that carries our labels but has no instance (found by the reconciler)."""

    runtime = models.ForeignKey(Runtime, on_delete=models.CASCADE, related_name="orphans")
    container_id = models.CharField(max_length=128)
    name = models.CharField(max_length=255)
    labels = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=32, blank=True)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)
    removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["runtime", "container_id"], name="orphan_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.runtime}"


class MonitorCursor(models.Model):
    """Where the monitor's event stream for one engine resumes (contract §5).

    ``position`` is the ``EngineEvent.cursor`` of the last applied event, opaque to
    everything but the driver that made it (Docker: its nanosecond time as a string;
    Kubernetes: a ``resourceVersion``); empty: no cursor yet. The stream is reopened from
    it (Docker's ``since`` is inclusive), and ``seen`` holds the keys of the events
    already applied at exactly ``position`` so that their replay is recognised as a
    duplicate. Written only by ``containers.execution.monitor``.
    """

    runtime = models.OneToOneField(Runtime, on_delete=models.CASCADE, related_name="cursor")
    position = models.CharField(max_length=200, default="", blank=True)
    seen = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.runtime} @ {self.position or '(none)'}"


class Installation(models.Model):
    """This installation's identity on the engines: the ``io.gobrave.installation`` label.

    One row (pk 1), made by the first ``migrate`` with a random id, so that two
    installations sharing an engine never take each other's containers for orphans.
    ``container.installation_id`` in config.yml, when set, wins over it
    (``containers.installation``). Never changed once made.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    installation_id = models.CharField(max_length=63, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.installation_id


class Workspace(models.Model):
    """An owner's workspace that gobrave made on one engine (SPEC section 8).

    A row means the volume or directory exists there, owned by the owner's uid and gid
    with mode 2770: the worker makes it before the first create that mounts it, and
    later creates find the row and pay nothing (``containers.execution.workspaces``). Never
    deleted by gobrave on its own unless ``workspace_retention`` is set (off by default): it
    holds the owner's files; an operator may remove a volume workspace of an owner who has
    no instances left (``workspace_remove``), and so does that policy. The
    same rows record the volumes
    gobrave adds to a spec and owns like a workspace (a DAG run's ``/dag``): those go,
    row first, with their volume (``containers.execution.housekeeping.volume_remove``).
    """

    runtime = models.ForeignKey(Runtime, on_delete=models.CASCADE, related_name="workspaces")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="workspaces"
    )
    kind = models.CharField(max_length=16, choices=Runtime.WorkspaceDriver.choices)
    source = models.CharField(max_length=512, help_text="The volume name or host directory.")
    uid = models.BigIntegerField()
    gid = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    # What the engine last said it holds (``workspace_sizes_refresh``): pages never ask.
    size_bytes = models.BigIntegerField(null=True, blank=True)
    size_checked_at = models.DateTimeField(null=True, blank=True)
    # Since when its owner has had no instance (the workspace_retention policy; null:
    # in use, or not looked at). Written only by ``containers.execution.policies``.
    unused_since = models.DateTimeField(null=True, blank=True)
    # How long it is kept once unused (``containers.execution.policies``): the longest
    # of the workspace_retention of the deleted instances that mounted it, each its
    # template's own value (``retention``: the longest of those, 0 if any was 0, i.e.
    # kept; null: none had one) or config.yml's (``retention_default``: true if an
    # instance took it; null: no instance recorded yet, so config.yml's applies).
    # Written when an instance is deleted (``workspaces.workspace_retention_note``).
    retention = models.PositiveIntegerField(null=True, blank=True)
    retention_default = models.BooleanField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["runtime", "owner", "source"], name="workspace_unique")
        ]
        indexes = [
            # The workspace_retention pass reads the unused ones only.
            models.Index(
                fields=["unused_since"],
                name="workspace_unused",
                condition=models.Q(unused_since__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"{self.source} on {self.runtime}"
