from django.contrib import admin
from django.urls import path

from notes import views

urlpatterns = [
    path("", views.hello),
    path("notes/new", views.new_note),
    path("notes/<int:note_id>", views.note_detail),
    path("notes/count", views.note_count),
    path("meta", views.meta),
    path("boom", views.boom),
    path("admin/", admin.site.urls),
]
