"""Settings, all read from the environment (see .env.example for every variable)."""

import os
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from gshost.monitoring.directory import multiproc_dir

BASE_DIR = Path(__file__).resolve().parent.parent
# templates/ and static/ sit at the top of a checkout; an installed wheel carries them in gshost/.
ASSETS_DIR = BASE_DIR if (BASE_DIR / "templates").is_dir() else Path(__file__).resolve().parent

env = environ.Env()
# Where this installation keeps its files (.env, the SQLite default, collected static files):
# the checkout that holds manage.py, or for an installed package the directory it is run from
# (never inside site-packages). PROJECT_DIR names it explicitly.
PROJECT_DIR = Path(
    os.environ.get("PROJECT_DIR")
    or (BASE_DIR if (BASE_DIR / "manage.py").is_file() else Path.cwd())
).resolve()
# Settings from a file (`make run` writes PROJECT_DIR/.env once); real environment variables win.
ENV_FILE = Path(os.environ.get("ENV_FILE") or PROJECT_DIR / ".env")
environ.Env.read_env(ENV_FILE, overwrite=False)


def _rate(name: str, default: str) -> str:
    """A rate like `300/min`; refuse anything we cannot enforce, loudly, at start-up."""
    value = env.str(name, default=default)
    count, _, unit = value.partition("/")
    if not count.isdigit() or int(count) < 1 or unit not in {"min", "minute", "m"}:
        raise ImproperlyConfigured(f"{name} must look like '300/min', got {value!r}")
    return value


DEBUG = env.bool("DEBUG", default=False)
# The webhook-secret encryption key and the API-key pepper are derived from SECRET_KEY unless
# set on their own, so a public development key is never acceptable outside DEBUG.
DEVELOPMENT_SECRET_KEY = "django-insecure-gshost-development-only"
SECRET_KEY = env.str("SECRET_KEY", default="") or (DEVELOPMENT_SECRET_KEY if DEBUG else "")
if not SECRET_KEY or (SECRET_KEY == DEVELOPMENT_SECRET_KEY and not DEBUG):
    raise ImproperlyConfigured(
        "SECRET_KEY is not set. With DEBUG off the service needs its own secret key: set the "
        "SECRET_KEY environment variable (50+ random characters), or DEBUG=true for development."
    )
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]  # load balancers probe over plain HTTP
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=SECURE_SSL_REDIRECT)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=SECURE_SSL_REDIRECT)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
# Behind a proxy that terminates TLS: SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO (the
# proxy must set X-Forwarded-Proto itself, overwriting any value the client sent).
_PROXY_SSL_HEADER = env.str("SECURE_PROXY_SSL_HEADER", default="")
SECURE_PROXY_SSL_HEADER = (_PROXY_SSL_HEADER, "https") if _PROXY_SSL_HEADER else None
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# Addresses of reverse proxies whose X-Forwarded-For we believe (CIDRs).
TRUSTED_PROXIES = env.list("TRUSTED_PROXIES", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_q",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "accounts",
    "servers",
    "audit",
    "webhooks",
    "application",
    "gshost",
]

# --- Development only (`make run`): the demo's local webhook receiver ---
# Names the webhook sender resolves to 127.0.0.1 instead of asking DNS
# (webhooks/targets/dev_loopback.py).
# Ignored unless DEBUG is on; never set it in production.
DEV_WEBHOOK_LOOPBACK_HOSTS = env.list("DEV_WEBHOOK_LOOPBACK_HOSTS", default=[]) if DEBUG else []

MIDDLEWARE = [
    "gshost.monitoring.middleware.RequestMetricsMiddleware",  # outermost: times everything
    "gshost.api.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "gshost.api.middleware.PublicApiMiddleware",
    "application.middleware.ApplicationApiMiddleware",
    "gshost.panel_middleware.PanelSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "gshost.panel_middleware.PanelCsrfViewMiddleware",  # see gshost.checks
    "gshost.panel_middleware.PanelAuthenticationMiddleware",
    "gshost.panel_middleware.PanelMessageMiddleware",
    "accounts.panel.enforcement.SecondFactorRequiredMiddleware",
    "accounts.panel.access.PanelPermissionMiddleware",
    "axes.middleware.AxesMiddleware",  # a refused sign-in becomes our 429 page
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "gshost.panel_middleware.PanelCSPMiddleware",
]

ROOT_URLCONF = "gshost.urls"
WSGI_APPLICATION = "gshost.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [ASSETS_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.panel.context.current_organization",
            ],
        },
    },
]

DATABASE_URL = env.str("DATABASE_URL", default="") or f"sqlite:///{PROJECT_DIR / 'db.sqlite3'}"
DATABASES = {"default": env.db_url_config(DATABASE_URL)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
else:
    DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # An unreachable database answers 503 within this many seconds, never hangs a thread.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault(
        "connect_timeout", env.int("DATABASE_CONNECT_TIMEOUT", default=5)
    )

# `pgbouncer` when DATABASE_URL names PgBouncer in transaction mode: consecutive transactions
# of one connection may then run on different server connections, so nothing may outlive a
# transaction. Django's server-side cursors (DECLARE ... WITH HOLD for .iterator() outside a
# transaction) would; prepared statements stay off (Django's default with psycopg 3, kept so),
# and the code takes no advisory locks and sets no session state (Django's own SET TIME ZONE
# is a parameter PgBouncer tracks per client).
DATABASE_POOLER = env.str("DATABASE_POOLER", default="")
if DATABASE_POOLER not in {"", "pgbouncer"}:
    raise ImproperlyConfigured(
        f"DATABASE_POOLER must be empty or 'pgbouncer', got {DATABASE_POOLER!r}"
    )
if DATABASE_POOLER == "pgbouncer":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None

REDIS_URL = env.str("REDIS_URL", default="")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "gshost",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

Q_CLUSTER = {
    "name": "gshost",
    # Each worker process runs a delivery engine (sender threads) beside its short
    # tasks such as "attempt these deliveries". One per core, at least 2: more processes than
    # cores only compete for them, and late recording is what a crash sends again (3 on 2
    # cores: about the same throughput, first-attempt p99 +50 %, more re-sent after a SIGKILL).
    "workers": env.int("Q_WORKERS", default=max(2, os.cpu_count() or 2)),
    # Tasks are short; retry (ORM broker re-delivery of an unacknowledged task) must exceed
    # timeout so a running task is never handed out twice.
    "timeout": 90,
    "retry": 120,
    "max_attempts": 1,
    "catch_up": False,
    "poll": 0.2,
    # Successful results are not stored: saving one (with django-q2 pruning to a limit) costs
    # more than the webhook tasks themselves. Failures are still stored.
    "save_limit": -1,
    "ack_failures": True,
    # A recycled worker first finishes its in-flight deliveries; do that rarely.
    "recycle": 5000,
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked account or address before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/panel/keys/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = env.str("STATIC_ROOT", default="") or PROJECT_DIR / "staticfiles"
STATICFILES_DIRS = [ASSETS_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

EMAIL_BACKEND = env.str("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="gshost <noreply@gshost.example>")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["accounts.authentication.BearerKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["accounts.permissions.HasRequiredScope"],
    "DEFAULT_THROTTLE_CLASSES": [],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["gshost.api.parsers.JsonObjectParser"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "gshost.api.negotiation.JsonOnlyNegotiation",
    "DEFAULT_PAGINATION_CLASS": "gshost.api.pagination.NewestFirstCursorPagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "gshost.api.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "gshost Customer API",
    "DESCRIPTION": "Game-server hosting Customer API: keys, webhooks, servers, audit.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/public/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    # The Application API has a schema of its own (/api/application/v1/schema/).
    "PREPROCESSING_HOOKS": ["gshost.api.schema.public_routes_only"],
    # The event names are one enum, whether a field holds one (`event`) or a list.
    "ENUM_NAME_OVERRIDES": {"EventEnum": "webhooks.api.views.EVENT_CHOICES"},
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "gshost.api.schema.postprocess_schema",
    ],
}

# Rate limits, fixed one-minute windows.
API_RATE_DEFAULT = _rate("API_RATE_DEFAULT", "300/min")
API_RATE_REALTIME = _rate("API_RATE_REALTIME", "600/min")
# The Application API (billing systems' integration keys), per key and route.
API_RATE_APPLICATION = _rate("API_RATE_APPLICATION", "240/min")
AUTH_FAILURE_RATE = _rate("AUTH_FAILURE_RATE", "30/min")
# Reports of leaked keys (POST /api/public/v1/keys/report-leaked) per client IP.
LEAK_REPORT_RATE = _rate("LEAK_REPORT_RATE", "10/min")

# Key pepper: the stored hash is HMAC-SHA256(pepper, secret). Defaults to one derived from
# SECRET_KEY; set it separately to rotate SECRET_KEY without invalidating every API key.
API_KEY_PEPPER = env.str("API_KEY_PEPPER", default="")
API_KEY_CACHE_SECONDS = env.int("API_KEY_CACHE_SECONDS", default=30)
# GitHub's secret-scanning public keys, which sign its leak alerts. The operator's setting, not
# customer input: any http(s) URL (a test or a mirror may serve the document).
SECRET_SCANNING_KEYS_URL = (
    env.str("SECRET_SCANNING_KEYS_URL", default="")
    or "https://api.github.com/meta/public_keys/secret_scanning"
)
if not SECRET_SCANNING_KEYS_URL.lower().startswith(("https://", "http://")):
    raise ImproperlyConfigured(
        f"SECRET_SCANNING_KEYS_URL must be an http(s) URL, got {SECRET_SCANNING_KEYS_URL!r}"
    )
# Audit rows are written in small batches; 0 writes each row at the end of its request.
AUDIT_FLUSH_INTERVAL_SECONDS = env.float("AUDIT_FLUSH_INTERVAL_SECONDS", default=0.25)
AUDIT_RETENTION_HOURS = 24

WEBHOOK_SECRET_KEYS = env.list("WEBHOOK_SECRET_KEYS", default=[])
WEBHOOK_CA_BUNDLE = env.str("WEBHOOK_CA_BUNDLE", default="") or None
WEBHOOK_ALLOWED_NETWORKS = env.list("WEBHOOK_ALLOWED_NETWORKS", default=[])
WEBHOOK_RETRY_DELAYS = [
    int(s) for s in env.list("WEBHOOK_RETRY_DELAYS", default=[60, 300, 1800, 7200, 21600])
]
WEBHOOK_TIMEOUT_SECONDS = env.float("WEBHOOK_TIMEOUT_SECONDS", default=10.0)
# A claimed delivery is leased for timeout + margin: a dead worker's rows are retaken then.
WEBHOOK_LEASE_MARGIN_SECONDS = env.float("WEBHOOK_LEASE_MARGIN_SECONDS", default=2.0)
# Per worker process; each sender thread holds one database connection.
WEBHOOK_SENDER_THREADS = env.int("WEBHOOK_SENDER_THREADS", default=16)
# Rows one claim leases for the process's senders (each takes the next, sends and records it).
WEBHOOK_CLAIM_ROWS = env.int("WEBHOOK_CLAIM_ROWS", default=16)
WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK = env.int("WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK", default=4)
WEBHOOKS_PER_ORGANIZATION = env.int("WEBHOOKS_PER_ORGANIZATION", default=20)
SIMULATED_RUNTIME_DELAY_SECONDS = env.float("SIMULATED_RUNTIME_DELAY_SECONDS", default=2.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Every refused API call is already an audit row; a log line each would flood the logs.
        "django.request": {"level": "ERROR"},
    },
}

# Sign-in throttling (panel and admin share one login), with django-axes.
# Limits per account and address together, per address, and per account from every address.
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=10)  # per account + address
LOGIN_FAILURE_ADDRESS_LIMIT = env.int("LOGIN_FAILURE_ADDRESS_LIMIT", default=50)  # per address
LOGIN_FAILURE_ACCOUNT_LIMIT = env.int("LOGIN_FAILURE_ACCOUNT_LIMIT", default=100)  # per account
LOGIN_LOCKOUT_MINUTES = env.int("LOGIN_LOCKOUT_MINUTES", default=15)
_LOGIN_SETTINGS = (
    "LOGIN_FAILURE_LIMIT",
    "LOGIN_FAILURE_ADDRESS_LIMIT",
    "LOGIN_FAILURE_ACCOUNT_LIMIT",
)
for _name in (*_LOGIN_SETTINGS, "LOGIN_LOCKOUT_MINUTES"):
    if globals()[_name] < 1:
        raise ImproperlyConfigured(f"{_name} must be at least 1")
AXES_HANDLER = "accounts.signin.AccountAndAddressHandler"
AXES_FAILURE_LIMIT = LOGIN_FAILURE_LIMIT  # the handler answers it when any of the three is reached
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address", "username"]
# A refused attempt during a lock is not recorded: it neither counts nor extends the lock.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_COOLOFF_TIME = timedelta(minutes=LOGIN_LOCKOUT_MINUTES)
AXES_CLIENT_IP_CALLABLE = "accounts.signin.client_address"
AXES_USERNAME_FORM_FIELD = "username"  # the sign-in forms post the email as `username`
AXES_USERNAME_CALLABLE = "accounts.signin.account_name"
AXES_LOCKOUT_CALLABLE = "accounts.signin.lockout_response"
AXES_RESET_ON_SUCCESS = False  # the handler clears the account's failures from that address
AXES_HTTP_RESPONSE_CODE = 429
AXES_VERBOSE = False

# --- Second factors for the panel (docs/panel-security.md) ---
# Staff need a second factor, proved at sign-in, for /admin/ (off by default only with DEBUG).
ADMIN_REQUIRE_2FA = env.bool("ADMIN_REQUIRE_2FA", default=not DEBUG)
OTP_TOTP_ISSUER = "gshost"
# django-otp's own back-off is off: a wrong code counts as a failed sign-in instead, toward the
# LOGIN_FAILURE_* limits above (accounts.second_factor.code_check).
OTP_TOTP_THROTTLE_FACTOR = 0
OTP_STATIC_THROTTLE_FACTOR = 0
# Codes are taken one step either side of the server's clock, always: no drift is learnt from
# the codes accepted, which would move the window for good.
OTP_TOTP_SYNC = False

# Request bodies: at most 1 MiB (the API answers 413 payload_too_large, the panel 400).
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

# Content-Security-Policy of the panel and admin pages (django-csp): scripts and styles only
# from our own origin, no inline script, nothing framed. The public API answers JSON only.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Django's own CSRF check (security.W003) looks for its middleware by name; ours is a subclass
# that skips the stateless API, and gshost.checks verifies a CsrfViewMiddleware is installed.
SILENCED_SYSTEM_CHECKS = ["security.W003"]
# django-axes logs every sign-in at INFO; failures and lockouts (WARNING) are the useful part.
LOGGING["loggers"]["axes"] = {"level": "WARNING"}  # type: ignore[index]

# --- Webhook notices, endpoint health, metrics and probes ---
# Absolute base of links in emails (failure notices): the address people reach the panel at.
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="http://127.0.0.1:8000")

# --- The live console (docs/console.md) ---
# Browsers may open a node's console websocket from PANEL_URL's origin and from PANEL_ORIGINS;
# the agents are told both in every heartbeat's answer.
PANEL_URL = env.str("PANEL_URL", default=PUBLIC_BASE_URL)
PANEL_ORIGINS = env.list("PANEL_ORIGINS", default=[])
# Console tokens are signed with Ed25519 keys derived from these secrets (default SECRET_KEY):
# the first signs, all are published to the agents (rotation: docs/console.md).
CONSOLE_TOKEN_SECRETS = env.list("CONSOLE_TOKEN_SECRETS", default=[])
WEBHOOK_FAILURE_NOTICE_HOURS = env.float("WEBHOOK_FAILURE_NOTICE_HOURS", default=24.0)
# /metrics answers only these networks (others get 404); METRICS_ENABLED=false turns metrics off.
METRICS_ENABLED = env.bool("METRICS_ENABLED", default=True)
METRICS_ALLOWED_NETWORKS = env.list("METRICS_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"])
# prometheus-client's multi-process mode: every process (gunicorn workers, delivery workers)
# writes its samples here and /metrics adds them up. Must be set before prometheus_client loads.
PROMETHEUS_MULTIPROC_DIR = multiproc_dir(BASE_DIR)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
Path(PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
# OpenAPI 3.1, for its `webhooks` section (the event payloads and the test ping).
SPECTACULAR_SETTINGS["OAS_VERSION"] = "3.1.0"
_hooks = SPECTACULAR_SETTINGS.get("POSTPROCESSING_HOOKS")
SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] = [
    *(_hooks if isinstance(_hooks, list) else ["drf_spectacular.hooks.postprocess_schema_enums"]),
    "webhooks.api.openapi.add_webhooks",
]

# --- Backups in S3-compatible object storage (docs/nodes.md, "Backups off the node") ---
# Endpoint, bucket and both keys set: backups of servers on agent nodes are streamed to the
# bucket; none of them set: backups stay on their node. Half of them is a mistake, refused here.
BACKUP_S3_ENDPOINT = env.str("BACKUP_S3_ENDPOINT", default="")
BACKUP_S3_BUCKET = env.str("BACKUP_S3_BUCKET", default="")
BACKUP_S3_ACCESS_KEY_ID = env.str("BACKUP_S3_ACCESS_KEY_ID", default="")
BACKUP_S3_SECRET_ACCESS_KEY = env.str("BACKUP_S3_SECRET_ACCESS_KEY", default="")
BACKUP_S3_REGION = env.str("BACKUP_S3_REGION", default="") or "us-east-1"
_BACKUP_S3 = {
    "BACKUP_S3_ENDPOINT": BACKUP_S3_ENDPOINT,
    "BACKUP_S3_BUCKET": BACKUP_S3_BUCKET,
    "BACKUP_S3_ACCESS_KEY_ID": BACKUP_S3_ACCESS_KEY_ID,
    "BACKUP_S3_SECRET_ACCESS_KEY": BACKUP_S3_SECRET_ACCESS_KEY,
}
if any(_BACKUP_S3.values()) and not all(_BACKUP_S3.values()):
    _missing = ", ".join(name for name, value in _BACKUP_S3.items() if not value)
    raise ImproperlyConfigured(f"Backups to object storage need {_missing} too (or none of them).")
if BACKUP_S3_ENDPOINT and not BACKUP_S3_ENDPOINT.startswith(("https://", "http://")):
    raise ImproperlyConfigured("BACKUP_S3_ENDPOINT must be an http(s):// URL.")
