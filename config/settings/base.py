"""Settings shared by every environment.

Every environment variable is read here, once, with an explicit type and default
(django-environ). A value that does not parse stops the process at startup with
ImproperlyConfigured instead of surfacing at 3 a.m. `<NAME>_FILE` may point to a file
holding a secret (Docker/Kubernetes secrets).
"""

from __future__ import annotations

import re
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()


def env_secret(name: str, default: str | None = None) -> str | None:
    """Read a secret from NAME, or from the file named by NAME_FILE."""
    file_path = env.str(f"{name}_FILE", default="")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    return env.str(name, default=default)


def env_bool(name: str, default: bool) -> bool:
    """Strict boolean: only true/false/1/0/yes/no (any case); anything else is an error."""
    raw = env.str(name, default="")
    if raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true or false)")


def env_rate(name: str, default: str) -> str:
    """A DRF throttle rate such as `120/min`: a bad one would make every throttled request
    a 500 (DRF parses it per request), so it is checked here."""
    raw = env.str(name, default=default).strip()
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", raw):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a rate such as 120/min (s, min, h, day)")
    return raw


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    raw = env.str(name, default="")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from exc
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} must be at most {maximum}")
    return value


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_secret("DJANGO_SECRET_KEY", default="insecure-dev-key-change-me")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/gpulab"
DATABASE_URL = env.str("DATABASE_URL", default=DEFAULT_DATABASE_URL)
try:
    DATABASES = {"default": environ.Env.db_url_config(DATABASE_URL)}
except Exception as exc:  # django-environ raises several types for a malformed URL
    raise ImproperlyConfigured(f"DATABASE_URL={DATABASE_URL!r} is not a database URL") from exc
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0)

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "accounts",
    "cluster",
    "jobs",
    "scheduler",
    "agents",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "config.api_middleware.ApiJsonErrors",  # JSON errors under /api/, also for 404 and 500
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.text_guards.RejectUnstorableParameters",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

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
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "jobs:list"
LOGOUT_REDIRECT_URL = "login"
# Django's four: the lockout allows ten guesses per account and address, so a password
# on the common-password list ("password", "qwertyui") or all digits would fall to one
# guess tried across every account.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("GPULAB_TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js from the installed plotly package: pages never depend on a CDN.
    "dashboard.finders.PlotlyJsFinder",
]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env.str("GPULAB_CACHE_PREFIX", default="gpulab"),
    }
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON only: a form-encoded or multipart body (415) would reach the fields' own
    # json.loads, past every guard of StoredTextJSONParser (depth, storable text, keys
    # named twice). The pages' forms are Django forms, not API calls.
    "DEFAULT_PARSER_CLASSES": ["config.text_guards.StoredTextJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "config.api_errors.api_exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "job_submit": env_rate("GPULAB_SUBMIT_RATE", "120/min"),
    },
}

SPECTACULAR_SETTINGS = {
    "TITLE": "gpulab API",
    "DESCRIPTION": "Submit, watch and cancel jobs on the lab's GPU cluster.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Lab clusters are often offline: serve Swagger UI from our own static files.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery: JSON only, broker and results on Redis. Schedules live in config/celery_app.py.
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=REDIS_URL)
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = TIME_ZONE
# Reliability: one message at a time per worker process, redelivery after a crash well
# after the longest task (120 s) could have finished, and results kept for an hour.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = False  # per task: only idempotent tasks opt in (scheduler.round)
# Socket timeouts: sending a task to a Redis that accepts connections but never answers
# (hung, or cut off after the accept) raises after 5 s instead of blocking the sender (a
# round's dispatch, a web request) for ever. Workers wait for tasks with 1 s BRPOPs, well
# inside them.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": 600,
    "socket_timeout": 5,
    "socket_connect_timeout": 5,
}
CELERY_RESULT_EXPIRES = 3600
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Rounds, SSH work and the rest go to separate queues (config/celery_app.py), each with
# its own worker, so a round never waits behind a long launch or stop.
CELERY_TASK_ROUTES = ("config.celery_app.task_route",)

# gpulab's own settings. Scheduler knobs an admin tunes live are in the database
# (scheduler.models.SchedulerConfig); these are deployment facts.
# Fair-share usage decays with this half-life (algorithms.md §2: 7 days).
GPULAB_USAGE_HALF_LIFE_HOURS = env_int("GPULAB_USAGE_HALF_LIFE_HOURS", 168, minimum=1)
# Password logins (site and Django admin): this many failures within the lockout window
# lock that username out from that client address for the window; an address is locked
# for every username at ten times as many (accounts/lockout.py).
GPULAB_LOGIN_MAX_FAILURES = env_int("GPULAB_LOGIN_MAX_FAILURES", 10, minimum=1)
GPULAB_LOGIN_LOCKOUT_SECONDS = env_int("GPULAB_LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
# Reverse proxies in front of gunicorn whose X-Forwarded-For is trusted for the client's
# address (0: REMOTE_ADDR). Behind one proxy and left at 0, every client shares the proxy's
# address, and one client's failed logins lock everybody out.
GPULAB_TRUSTED_PROXY_COUNT = env_int("GPULAB_TRUSTED_PROXY_COUNT", 0, minimum=0)
# Scheduling-round records older than this are deleted daily (scheduler.rounds_prune).
GPULAB_ROUND_HISTORY_DAYS = env_int("GPULAB_ROUND_HISTORY_DAYS", 30, minimum=1)
# Estimated start times (scheduler.forecast_services, every minute): the pending jobs
# nearest the head of the line that get one, how far ahead the forecast looks, and the
# seconds of computing one forecast may take.
GPULAB_FORECAST_MAX_JOBS = env_int("GPULAB_FORECAST_MAX_JOBS", 300, minimum=1, maximum=100_000)
GPULAB_FORECAST_HORIZON_HOURS = env_int(
    "GPULAB_FORECAST_HORIZON_HOURS", 168, minimum=1, maximum=24 * 365
)
GPULAB_FORECAST_BUDGET_SECONDS = env_int(
    "GPULAB_FORECAST_BUDGET_SECONDS", 20, minimum=1, maximum=50
)
# How scheduling rounds run: "celery" (worker + beat), "embedded" (a thread in the web
# process, for the demo), or "off" (nothing is requested; tests drive rounds directly).
# Mail to job owners who asked for it (`Job.notify`): SMTP when GPULAB_EMAIL_HOST is set,
# otherwise Django's console backend (the mail is written to the log, as in the demo).
GPULAB_EMAIL_HOST = env.str("GPULAB_EMAIL_HOST", default="")
if GPULAB_EMAIL_HOST:
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST = GPULAB_EMAIL_HOST
    EMAIL_PORT = env_int("GPULAB_EMAIL_PORT", 587, minimum=1, maximum=65535)
    EMAIL_HOST_USER = env.str("GPULAB_EMAIL_USER", default="")
    EMAIL_HOST_PASSWORD = env.str("GPULAB_EMAIL_PASSWORD", default="")
    EMAIL_USE_TLS = env_bool("GPULAB_EMAIL_USE_TLS", True)
    # Short: with the embedded (demo) loop a mail is sent inline, after the change commits.
    EMAIL_TIMEOUT = 10
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = env.str("GPULAB_EMAIL_FROM", default="gpulab@localhost")
# The address people open gpulab at, for links in mail ("" = no link).
GPULAB_SITE_URL = env.str("GPULAB_SITE_URL", default="")
if GPULAB_SITE_URL and not GPULAB_SITE_URL.startswith(("https://", "http://")):
    # Pasted in front of every link in mail and chat posts: without a scheme they break.
    raise ImproperlyConfigured("GPULAB_SITE_URL must be an http(s) URL.")
# Node events (down, back, drained for a GPU fault) posted as JSON to this incoming
# webhook (Slack, Mattermost, or any receiver); empty = none (agents/webhooks.py).
GPULAB_ADMIN_WEBHOOK_URL = env.str("GPULAB_ADMIN_WEBHOOK_URL", default="")
if GPULAB_ADMIN_WEBHOOK_URL and not GPULAB_ADMIN_WEBHOOK_URL.startswith(("https://", "http://")):
    raise ImproperlyConfigured("GPULAB_ADMIN_WEBHOOK_URL must be an http(s) URL.")

# Interactive sessions (jobs.sessions): the walltime one gets when it asks for none, the
# most it may ask for (the scheduler does not preempt a session, so it must end), and the TCP ports
# sessions are given on their node ("first-last").
GPULAB_SESSION_DEFAULT_HOURS = env_int("GPULAB_SESSION_DEFAULT_HOURS", 4, minimum=1, maximum=168)
GPULAB_SESSION_MAX_HOURS = env_int("GPULAB_SESSION_MAX_HOURS", 12, minimum=1, maximum=168)
if GPULAB_SESSION_DEFAULT_HOURS > GPULAB_SESSION_MAX_HOURS:
    raise ImproperlyConfigured("GPULAB_SESSION_DEFAULT_HOURS exceeds GPULAB_SESSION_MAX_HOURS.")
_session_ports = env.str("GPULAB_SESSION_PORTS", default="30000-30999")
try:
    _first_port, _last_port = (int(part) for part in _session_ports.split("-"))
except ValueError as exc:
    raise ImproperlyConfigured(
        f"GPULAB_SESSION_PORTS={_session_ports!r}: give a range such as 30000-30999"
    ) from exc
if not 1024 <= _first_port <= _last_port <= 65535:
    raise ImproperlyConfigured(
        f"GPULAB_SESSION_PORTS={_session_ports!r}: ports 1024-65535, first <= last"
    )
GPULAB_SESSION_PORTS = (_first_port, _last_port)
# A host people reach the nodes through (a login node): sessions are then shown with an
# `ssh -N -L port:node:port GATEWAY` tunnel and a localhost address. Empty: the node's.
GPULAB_SESSION_GATEWAY = env.str("GPULAB_SESSION_GATEWAY", default="")

GPULAB_SCHEDULER_MODE = env.str("GPULAB_SCHEDULER_MODE", default="celery")
if GPULAB_SCHEDULER_MODE not in {"celery", "embedded", "off"}:
    raise ImproperlyConfigured(
        f"GPULAB_SCHEDULER_MODE={GPULAB_SCHEDULER_MODE!r}: use celery, embedded or off"
    )

# Node agents and launching over SSH (agents/). The control plane logs in to nodes with
# this private key; host keys are trusted only once an admin approves them (NodeHostKey).
GPULAB_SSH_KEY_FILE = env.str("GPULAB_SSH_KEY_FILE", default="")
GPULAB_SSH_TIMEOUT_SECONDS = env_int("GPULAB_SSH_TIMEOUT_SECONDS", 10, minimum=1)
GPULAB_SSH_CONNECT_ATTEMPTS = env_int("GPULAB_SSH_CONNECT_ATTEMPTS", 3, minimum=1)
# A launch may pull a container image first.
# agents.launch's Celery time limit is this plus SSH time (agents/tasks.py).
GPULAB_LAUNCH_TIMEOUT_SECONDS = env_int(
    "GPULAB_LAUNCH_TIMEOUT_SECONDS", 600, minimum=10, maximum=3600
)
# Where attempts' run directories (pid, stdout, stderr, exit_code) live on a node;
# relative paths are relative to the SSH user's home.
GPULAB_NODE_RUN_ROOT = env.str("GPULAB_NODE_RUN_ROOT", default=".gpulab/runs")
# Finished attempts (their containers, run directories and logs) are kept on the node this
# many days after they ended, then removed by the hourly `agents.prune_all`; 0 keeps them.
GPULAB_FINISHED_ATTEMPT_KEEP_DAYS = env_int(
    "GPULAB_FINISHED_ATTEMPT_KEEP_DAYS", 7, minimum=0, maximum=3650
)
# Where `manage.py node_bootstrap` installs the node agent (relative = the SSH user's home).
GPULAB_NODE_AGENT_DIR = env.str("GPULAB_NODE_AGENT_DIR", default=".gpulab/agent")
# Heartbeat liveness: a node silent this long is SUSPECT (nothing new starts), then DOWN
# (its jobs are LOST and requeued).
GPULAB_NODE_SUSPECT_SECONDS = env_int("GPULAB_NODE_SUSPECT_SECONDS", 40, minimum=1)
GPULAB_NODE_DOWN_SECONDS = env_int("GPULAB_NODE_DOWN_SECONDS", 300, minimum=1)
# Heartbeats accepted per node (agents send one every 10 s).
GPULAB_AGENT_HEARTBEAT_RATE = env_rate("GPULAB_AGENT_HEARTBEAT_RATE", "30/min")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("GPULAB_LOG_LEVEL", default="INFO")},
    # urllib3 logs each request's path at DEBUG, and a webhook's path is its secret
    # (agents.webhooks): never below INFO, whatever GPULAB_LOG_LEVEL says.
    "loggers": {"urllib3": {"level": "INFO"}},
}
