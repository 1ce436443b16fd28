from django.contrib import admin
from django.urls import path

from notes import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("whoami", views.whoami),
    path("note", views.note),
    path("stream", views.stream),
    path("events", views.events),
    path("cookies/set", views.set_cookies),
    path("cookies", views.cookies),
]
