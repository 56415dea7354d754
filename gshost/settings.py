"""Settings, all read from the environment (see .env.example for every variable)."""

import hashlib
import os
import tempfile
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def _rate(name: str, default: str) -> str:
    """A rate like `300/min`; refuse anything we cannot enforce, loudly, at start-up."""
    value = env.str(name, default=default)
    count, _, unit = value.partition("/")
    if not count.isdigit() or int(count) < 1 or unit not in {"min", "minute", "m"}:
        raise ImproperlyConfigured(f"{name} must look like '300/min', got {value!r}")
    return value


SECRET_KEY = env.str("SECRET_KEY", default="django-insecure-gshost-development-only")
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=SECURE_SSL_REDIRECT)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=SECURE_SSL_REDIRECT)
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
    "accounts",
    "servers",
    "audit",
    "webhooks",
]

MIDDLEWARE = [
    "gshost.monitoring.middleware.RequestMetricsMiddleware",  # outermost: times everything
    "gshost.api.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "gshost.api.middleware.PublicApiMiddleware",
    "gshost.panel_middleware.PanelSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "gshost.panel_middleware.PanelCsrfViewMiddleware",
    "gshost.panel_middleware.PanelAuthenticationMiddleware",
    "gshost.panel_middleware.PanelMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "gshost.urls"
WSGI_APPLICATION = "gshost.wsgi.application"

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
                "accounts.panel.context.current_organization",
            ],
        },
    },
]

DATABASE_URL = env.str("DATABASE_URL", default="") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}"
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
    # One worker is usually inside the webhook sweep (a task polling for ~60 s), and for a few
    # seconds a minute two sweeps may overlap; the others take short tasks such as "attempt
    # these deliveries", which hand rows to sender threads. So: one per core, plus one, and at
    # least 3. Many more processes than cores only compete for them (4 on 2 cores: -30 %).
    "workers": env.int("Q_WORKERS", default=max(3, (os.cpu_count() or 2) + 1)),
    # The sweep runs ~60 s: timeout leaves it room, and retry (ORM broker re-delivery of an
    # unacknowledged task) must exceed timeout so a running sweep is never handed out twice.
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
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/panel/keys/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
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
}

# Rate limits, fixed one-minute windows.
API_RATE_DEFAULT = _rate("API_RATE_DEFAULT", "300/min")
API_RATE_REALTIME = _rate("API_RATE_REALTIME", "600/min")
AUTH_FAILURE_RATE = _rate("AUTH_FAILURE_RATE", "30/min")

# Key pepper: the stored hash is HMAC-SHA256(pepper, secret). Defaults to one derived from
# SECRET_KEY; set it separately to rotate SECRET_KEY without invalidating every API key.
API_KEY_PEPPER = env.str("API_KEY_PEPPER", default="")
API_KEY_CACHE_SECONDS = env.int("API_KEY_CACHE_SECONDS", default=30)
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
# A claimed delivery is leased for timeout + margin; a worker that dies mid-attempt loses it then.
WEBHOOK_LEASE_MARGIN_SECONDS = env.float("WEBHOOK_LEASE_MARGIN_SECONDS", default=30.0)
WEBHOOK_SENDER_THREADS = env.int("WEBHOOK_SENDER_THREADS", default=64)  # per worker process
WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK = env.int("WEBHOOK_MAX_IN_FLIGHT_PER_WEBHOOK", default=4)
SIMULATED_RUNTIME_DELAY_SECONDS = env.float("SIMULATED_RUNTIME_DELAY_SECONDS", default=2.0)
# Dotted path of the servers.runtime.Runtime that acts on hosts; empty = the simulated one.
SERVER_RUNTIME = env.str("SERVER_RUNTIME", default="") or "servers.runtime.SimulatedRuntime"

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

# --- Webhook notices, endpoint health, metrics and probes ---
# Absolute base of links in emails (failure notices): the address people reach the panel at.
PUBLIC_BASE_URL = env.str("PUBLIC_BASE_URL", default="http://127.0.0.1:8000")
WEBHOOK_FAILURE_NOTICE_HOURS = env.float("WEBHOOK_FAILURE_NOTICE_HOURS", default=24.0)
# /metrics answers only these networks (others get 404); METRICS_ENABLED=false turns metrics off.
METRICS_ENABLED = env.bool("METRICS_ENABLED", default=True)
METRICS_ALLOWED_NETWORKS = env.list("METRICS_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"])
# prometheus-client's multi-process mode: every process (gunicorn workers, delivery workers)
# writes its samples here and /metrics adds them up. Must be set before prometheus_client loads.
PROMETHEUS_MULTIPROC_DIR = env.str("PROMETHEUS_MULTIPROC_DIR", default="") or str(
    Path(tempfile.gettempdir())
    / f"gshost-prometheus-{hashlib.sha256(str(BASE_DIR).encode()).hexdigest()[:12]}"
)
os.environ["PROMETHEUS_MULTIPROC_DIR"] = PROMETHEUS_MULTIPROC_DIR
Path(PROMETHEUS_MULTIPROC_DIR).mkdir(parents=True, exist_ok=True)
# OpenAPI 3.1, for its `webhooks` section (the event payloads and the test ping).
SPECTACULAR_SETTINGS["OAS_VERSION"] = "3.1.0"
_hooks = SPECTACULAR_SETTINGS.get("POSTPROCESSING_HOOKS")
SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"] = [
    *(_hooks if isinstance(_hooks, list) else ["drf_spectacular.hooks.postprocess_schema_enums"]),
    "webhooks.openapi.add_webhooks",
]
