"""The HTTP surface: the REST API at the root (as the seeds spell its routes), admin, docs."""
from django.contrib import admin
from django.urls import include, path

from crewlet_site.api import api, mount_routers

mount_routers()

admin.site.site_header = "Crewlet operations"
admin.site.site_title = "Crewlet"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("dashboard/", include("dashboard.urls")),
    path("", api.urls),
]
