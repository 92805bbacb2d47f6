from django.urls import path

from gpurental.teams import views

urlpatterns = [
    path("", views.teams, name="teams"),
    path("switch/", views.switch, name="team_switch"),
    path("invite/<str:token>/", views.invitation, name="team_invitation"),
    path("<slug:slug>/", views.team, name="team"),
]
