"""A container engine gobrave schedules onto: the ``Runtime`` row, how it is reached
and what its last health check found."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from containers.addresses import engine_address_problems, kube_target_problems


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
