"""The HTTP surface: the REST API at the root (as the seeds spell its routes), admin, docs."""
from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from crewlet_site.api import api, mount_routers
from dashboard.signin import off_the_api_thread

mount_routers()

urlpatterns = [
    path("admin/login/", off_the_api_thread(admin.site.login)),  # password hashing off the API's thread
    path("admin/", admin.site.urls),
    path("dashboard/", include("dashboard.urls")),
    re_path(r"^static/(?P<path>.+)$", serve_static, {"insecure": True}),  # the node is its own web server
    path("", RedirectView.as_view(url="/dashboard/", permanent=False)),
    path("favicon.ico", RedirectView.as_view(url="/static/dashboard/favicon.svg", permanent=True)),  # browsers ask for it
    path("", api.urls),
]
