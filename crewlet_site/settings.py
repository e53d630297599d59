"""Django settings for Crewlet.

Nothing secret is written here: SECRET_KEY is derived from the node's keyring (seed 002,
"The single host"); the database is the node's own SQLite file (`store.path`), in WAL
mode with a busy timeout (DESIGN.md, "The store").
"""
from __future__ import annotations

import os
import secrets

from crewlet_site import nodeconfig

BASE_DIR = nodeconfig.BASE_DIR
NODE = nodeconfig.read()

if NODE.keyring is not None:
    SECRET_KEY = NODE.keyring.django_secret_key()
    SECRET_KEY_FALLBACKS = NODE.keyring.django_secret_key_fallbacks()
else:
    # No keyring loaded: commands that need one refuse to start (engine.config.keyring names
    # `secrets.keys`). What runs without one (keygen, validate) signs nothing that
    # outlives the process, so a per-process random key is the honest value.
    SECRET_KEY = secrets.token_urlsafe(50)

DEBUG = os.environ.get("CREWLET_DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["*"]  # the node binds where api.host says; Host checks belong to the proxy

INSTALLED_APPS = [
    "crewlet_site.admin.CrewletAdminConfig",  # Django's admin, with the apps' extra pages
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",   # the API docs' Swagger UI from the package's own static files, not a CDN
    "axes",
    "engine",
    "events",
    "seats",
    "notify",
    "a2a",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes asks
]

ROOT_URLCONF = "crewlet_site.urls"
ASGI_APPLICATION = "crewlet_site.asgi.application"

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

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(NODE.store_path),
        "OPTIONS": {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=20000;",
        },
        "TEST": {"NAME": os.environ.get("CREWLET_TEST_DB") or None},
    }
}

CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
LOGIN_URL = "/admin/login/"
LOGIN_REDIRECT_URL = "/dashboard/"  # a sign-in with nowhere to go lands on the dashboard

# -- the browser-facing surface: cookies, HSTS, trusted origins, CSP (README, "Security") --
from crewlet_site.browser import browser_settings  # noqa: E402

_browser = browser_settings(NODE.config)
SESSION_COOKIE_SECURE = _browser["SESSION_COOKIE_SECURE"]
CSRF_COOKIE_SECURE = _browser["CSRF_COOKIE_SECURE"]
SESSION_COOKIE_NAME = _browser["SESSION_COOKIE_NAME"]
CSRF_COOKIE_NAME = _browser["CSRF_COOKIE_NAME"]
SECURE_HSTS_SECONDS = _browser["SECURE_HSTS_SECONDS"]
CSRF_TRUSTED_ORIGINS = _browser["CSRF_TRUSTED_ORIGINS"]
CONTENT_SECURITY_POLICY = _browser["CONTENT_SECURITY_POLICY"]

# -- sign-in throttling (django-axes): five wrong passwords lock that login from that client --
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = 0.25  # hours: a locked login and client may try again after 15 minutes
# Per login and client address together (seed 002: a stranger guessing at somebody's login
# must not lock that person out from their own address); api.trusted_proxies make the address real.
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var" / "static"

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
}
