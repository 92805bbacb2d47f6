from django.urls import path

from gpurental.console import views

urlpatterns = [
    path("", views.home, name="home"),
]
