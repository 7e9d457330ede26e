"""Django settings for gobrave.

Reads ``config.yml`` once (``core.config``), chooses the database from
``DATABASE_URL`` (SQLite file when unset) and derives django-q2's two clusters from
the container and outbox sections, so that a task can never outlive its outbox lease.
"""

from __future__ import annotations

import math
import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import unquote, urlparse

from core.config import ConfigError, load_config

BASE_DIR = Path(__file__).resolve().parent.parent

try:
    GOBRAVE = load_config(os.environ.get("GOBRAVE_CONFIG") or BASE_DIR / "config.yml")
except ConfigError as exc:  # stop at start with the key named, not a traceback
    raise SystemExit(f"gobrave: invalid configuration: {exc}") from None


def _secret_key() -> str:
    """``DJANGO_SECRET_KEY``, else a random key made once and kept in ``var/secret_key``."""
    if key := os.environ.get("DJANGO_SECRET_KEY"):
        return key
    path = BASE_DIR / "var" / "secret_key"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    from django.core.management.utils import get_random_secret_key

    with os.fdopen(fd, "w") as handle:
        handle.write(get_random_secret_key())
    return path.read_text().strip()


def _flag(name: str) -> bool:
    """An on/off environment variable: ``1``, ``true`` or ``yes`` is on, anything else off."""
    return os.environ.get(name, "false").lower() in {"1", "true", "yes"}


def _proxy_ssl_header(value: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto: https`` as Django's ``SECURE_PROXY_SSL_HEADER``."""
    if not value:
        return None
    name, sep, expected = value.partition(":")
    if not (sep and name.strip() and expected.strip()):
        raise SystemExit(
            f"gobrave: DJANGO_SECURE_PROXY_SSL_HEADER must be 'Header-Name: value', got {value!r}"
        )
    return "HTTP_" + name.strip().upper().replace("-", "_"), expected.strip()


def _seconds(name: str) -> int:
    raw = os.environ.get(name, "0")
    if not raw.isdigit():
        raise SystemExit(f"gobrave: {name} must be a whole number of seconds, got {raw!r}")
    return int(raw)


SECRET_KEY = _secret_key()
DEBUG = _flag("DJANGO_DEBUG")
ALLOWED_HOSTS = [
    h for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h
]
CSRF_TRUSTED_ORIGINS = [
    o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o
]

# HTTPS (docs/operations.md, "Behind a TLS-terminating proxy"): all off by default, so
# that ``make run`` serves plain http on 127.0.0.1.
SECURE_PROXY_SSL_HEADER = _proxy_ssl_header(os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER", ""))
SECURE_SSL_REDIRECT = _flag("DJANGO_SECURE_SSL_REDIRECT")
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _flag("DJANGO_SECURE_COOKIES")
SECURE_HSTS_SECONDS = _seconds("DJANGO_SECURE_HSTS_SECONDS")
SECURE_HSTS_INCLUDE_SUBDOMAINS = _flag("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = _flag("DJANGO_SECURE_HSTS_PRELOAD")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "django_filters",  # the browsable API's filter forms (core/api/filters.py)
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "axes",
    "core",
    "outbox",
    "webhooks",
    "containers",
    "tenants",
    "streams",
    "dags",
    "events",
]

MIDDLEWARE = [
    # /healthz and /readyz, answered before the host check, HTTPS redirect, session and
    # CSRF (core.probes): a kubelet probes the Pod's IP over plain HTTP.
    "core.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Turns a login refused by the lockout into its page (tenants.login.lockout_response).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "gobrave.urls"
WSGI_APPLICATION = "gobrave.wsgi.application"
ASGI_APPLICATION = "gobrave.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]


def _database(url: str | None) -> dict:
    """``DATABASE_URL`` (postgres://user:pass@host:port/name) or a SQLite file."""
    if not url:
        path = Path(os.environ.get("GOBRAVE_SQLITE_PATH", BASE_DIR / "var" / "gobrave.sqlite3"))
        path.parent.mkdir(parents=True, exist_ok=True)
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            "OPTIONS": {
                # IMMEDIATE takes the write lock at BEGIN, so admission and capacity
                # checks serialize on SQLite as the row locks do on PostgreSQL.
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    parts = urlparse(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise SystemExit(f"gobrave: DATABASE_URL must be postgres://..., got {parts.scheme!r}")
    pool_max = int(os.environ.get("DATABASE_POOL_MAX", "10"))
    options: dict = {"application_name": os.environ.get("GOBRAVE_APP_NAME", "gobrave")}
    if os.environ.get("DATABASE_PREPARED_STATEMENTS", "1") != "0":
        # The relay's own hot statements only (``core.prepared``): Django's ORM binds on
        # the client and never prepares. 0 for a pooler that cannot keep them.
        options["prepare_threshold"] = 5
    if pool_max > 0:
        options["pool"] = {"min_size": 0, "max_size": pool_max, "timeout": 30}
    return {
        "ENGINE": "django.db.backends.postgresql",
        # Without the pool, keep connections (django-q2 reconnecting per call is 10x slower).
        "CONN_MAX_AGE": 0 if pool_max > 0 else int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        "CONN_HEALTH_CHECKS": True,
        "NAME": unquote(parts.path.lstrip("/")) or "gobrave",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
        "TEST": {"NAME": os.environ.get("GOBRAVE_TEST_DB_NAME") or None},
    }


DATABASES = {"default": _database(os.environ.get("DATABASE_URL"))}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# First the login lockout (django-axes): it refuses a locked-out user or address before
# any password is hashed. Then ModelBackend's rules, with a user's permissions read in
# one statement.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "tenants.backends.PermissionsBackend",
]
_VALIDATION = "django.contrib.auth.password_validation"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"{_VALIDATION}.UserAttributeSimilarityValidator"},
    {"NAME": f"{_VALIDATION}.MinimumLengthValidator"},
    {"NAME": f"{_VALIDATION}.CommonPasswordValidator"},
    {"NAME": f"{_VALIDATION}.NumericPasswordValidator"},
]

# Login lockout (docs/security.md): AXES_FAILURE_LIMIT failed logins for a user name, or
# from an address, lock that name, or that address, out for AXES_COOLOFF_TIME after the
# last failure; a success forgets the failures. Counted in the database (every process).
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "tenants.login.lockout_response"
AXES_CLIENT_IP_CALLABLE = "core.clients.client_address"
AXES_HANDLER = "tenants.login.LockoutHandler"
# Behind a reverse proxy: the request header (as in request.META, HTTP_X_REAL_IP) in
# which the proxy puts the client's address; unset, the peer's address counts.
GOBRAVE_CLIENT_IP_HEADER = os.environ.get("GOBRAVE_CLIENT_IP_HEADER", "")

# API tokens (django-rest-knox; docs/security.md, "API tokens"): users make their own
# (tenants.services), stored as SHA-512 digests in tenants.ApiToken, sent as
# ``Authorization: Token <key>``; an expiry only when the user sets one.
KNOX_TOKEN_MODEL = "tenants.ApiToken"
REST_KNOX = {"TOKEN_TTL": None, "AUTH_HEADER_PREFIX": "Token", "AUTO_REFRESH": False}
# knox's migrations would create its own token table even with the model swapped: an empty
# table referencing auth_user that ``flush`` does not know of (and so cannot truncate).
MIGRATION_MODULES = {"knox": None}
# Users log in on their own page (tenants.views), under the same lockout as the admin's.
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "tokens"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# gobrave/formats/en: every page shows times to the second (2026-12-01 12:03:04).
FORMAT_MODULE_PATH = ["gobrave.formats"]

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
# Served by ServeStatic in gobrave.asgi / gobrave.wsgi (every middleware stays async-capable).
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # ServeStatic warns at start when it is missing

# What a caller may see of a domain error (core.api.errors): users never get host paths
# or engine addresses.
API_ERROR_FOR_CALLER = "containers.spec.redaction.error_for"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.TokenAuthentication",
        "tenants.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["core.api.permissions.ModelPermissions"],
    # Rates from config.yml (api.throttle_create, api.throttle_write); empty: off.
    "DEFAULT_THROTTLE_CLASSES": [
        "core.api.throttles.CreateThrottle",
        "core.api.throttles.WriteThrottle",
    ],
    "DEFAULT_PARSER_CLASSES": ["core.api.defaults.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "core.api.schema.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "core.api.pagination.CursorPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "core.api.errors.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "gobrave API",
    "DESCRIPTION": (
        "Container lifecycles through a transactional outbox. Authenticate with "
        "`Authorization: Token <key>` (make one on `/account/tokens/` or with "
        "`POST /api/tokens/`). This document lists only what you may call. Every error "
        'answers `{"error": {"code", "message", "details"}}`. Every list is paged by '
        'cursor: `{"next", "previous", "results"}`, no count and no offset; follow the '
        "`next` link to walk it (each row that existed when the walk began comes once, "
        "whatever is inserted meanwhile); `limit` sets the page size. The events feed "
        '(`/api/events/`) is read as a log: `{"next", "cursor", "results"}`, and a reader '
        "that follows its `cursor`, then or later, gets every entry exactly once."
    ),
    "VERSION": "0.1.0",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/",
    "PREPROCESSING_HOOKS": ["core.api.defaults.exclude_schema_views"],
    # Swagger UI and Redoc from drf-spectacular-sidecar's static files, never a CDN.
    # The schema and the docs need a login (a token or a session), like the API itself,
    # and show each caller only the operations its permissions allow (not public).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SERVE_PUBLIC": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "InstanceStatusEnum": "containers.states.Status",
        "OutboxStatusEnum": "outbox.models.OutboxStatus",
        "DagRunStatusEnum": "dags.states.RunStatus",
    },
}

# --- django-q2: two clusters fed only by the outbox dispatcher -------------------------
# "create" runs create/start requests with create_queue_max_concurrency workers;
# "control" runs stop/delete so they never wait behind slow creates. django-q2 tries
# each task once (the outbox owns retries, backoff and dead letters); its timeout is
# the outbox delivery_timeout plus up to 2 s (within lease_margin: a task never outlives
# its row's lease), the time in which a worker may still begin a row it claimed with an
# outcome (outbox.chain); the broker's redelivery (retry) comes well after any
# prefetched task could have run, so a redelivery is only ever a duplicate that the
# claim's compare-and-set turns away.
_container, _outbox, _queue = GOBRAVE["container"], GOBRAVE["outbox"], GOBRAVE["queue"]
_timeout = math.floor(_outbox["delivery_timeout"] + min(2.0, _outbox["lease_margin"]))


def _broker() -> dict:
    """``orm``: the app's database. On PostgreSQL that is gobrave's own broker (the claim
    is the hand-off, NOTIFY wakes the pusher: ``outbox.broker``); on SQLite django-q2's
    ORM broker, which polls every ``queue.poll``. Otherwise a Redis URL."""
    if _queue["broker"] != "orm":
        return {"redis": _queue["broker"]}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        return {"orm": "default", "broker_class": "outbox.broker.OutboxBroker"}
    return {"orm": "default"}


def _cluster(name: str, workers: int) -> dict:
    waits = math.ceil((_queue["queue_limit"] + _queue["bulk"] + 1) / workers)
    return {
        "name": name,
        "workers": workers,
        "timeout": _timeout,
        "retry": _timeout * (2 + waits),
        "max_attempts": 1,
        "ack_failures": True,
        "queue_limit": _queue["queue_limit"],
        "bulk": _queue["bulk"],
        "poll": _queue["poll"],
        "save_limit": _queue["save_limit"],
        "catch_up": False,
        # gobrave schedules nothing in django-q2 (its Schedule rows could run any function
        # inside the workers); its admin pages are unregistered too (tenants.admin).
        "scheduler": False,
        "recycle": 500,
        "label": f"gobrave {name} cluster",
        **_broker(),
    }


GOBRAVE_CREATE_WORKERS = _queue["create_workers"] or _container["create_queue_max_concurrency"]
GOBRAVE_CONTROL_WORKERS = _queue["control_workers"]
# "webhooks" runs signed webhook deliveries (the webhooks app), so that an endpoint that is
# slow or down never holds a worker that a stop or a delete waits for.
GOBRAVE_WEBHOOKS_WORKERS = GOBRAVE["webhooks"]["workers"]
Q_CLUSTER = {
    **_cluster("create", GOBRAVE_CREATE_WORKERS),
    "ALT_CLUSTERS": {
        "control": _cluster("control", GOBRAVE_CONTROL_WORKERS),
        "webhooks": _cluster("webhooks", GOBRAVE_WEBHOOKS_WORKERS),
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("GOBRAVE_LOG_LEVEL", "INFO")},
    # axes: lockouts and failures are warnings; its start-up banner in every command is not.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

# The outbox relay reads its own section only (it is reusable outside gobrave).
OUTBOX = GOBRAVE["outbox"]

# The "fake" runtime driver simulates an engine in files; only the test and bench settings
# (gobrave.settings_test, bench.settings_bench) switch it on. Never in production.
GOBRAVE_FAKE_RUNTIME = False
