from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.i18n import JavaScriptCatalog

from gpurental.console import (
    views,
    views_baremetal,
    views_billing_self,
    views_groups,
    views_images,
    views_language,
    views_notifications,
    views_security,
    views_sshkeys,
    views_volumes,
)

urlpatterns = [
    path("", views.home, name="home"),
    path("language/", views_language.language_set, name="language_set"),
    # The words static/js shows, in the page's language (djangojs catalogues).
    path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript_catalog"),
    path("signup/", views.signup, name="signup"),
    path("signup/confirm/<str:token>/", views.signup_confirm_view, name="signup_confirm"),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("logout/everywhere/", views_security.logout_everywhere, name="logout_everywhere"),
    path("password/change/", views_security.PasswordChange.as_view(), name="password_change"),
    path(
        "password/change/done/",
        auth_views.PasswordChangeDoneView.as_view(),
        name="password_change_done",
    ),
    path("password/reset/", views.PasswordReset.as_view(), name="password_reset"),
    path(
        "password/reset/done/",
        auth_views.PasswordResetDoneView.as_view(),
        name="password_reset_done",
    ),
    path(
        "password/reset/<uidb64>/<token>/",
        views_security.PasswordResetConfirm.as_view(),
        name="password_reset_confirm",
    ),
    path(
        "password/reset/complete/",
        auth_views.PasswordResetCompleteView.as_view(),
        name="password_reset_complete",
    ),
    path("dashboard/", views.dashboard, name="dashboard"),
    path("dashboard/instances/", views.dashboard_instances, name="dashboard_instances"),
    path("launch/", views.launch, name="launch"),
    path("instances/<uuid:instance_id>/", views.instance_detail, name="instance"),
    path("instances/<uuid:instance_id>/open/", views.instance_open, name="instance_open"),
    path(
        "instances/<uuid:instance_id>/auto-recover/",
        views.instance_auto_recover,
        name="instance_auto_recover",
    ),
    path(
        "instances/<uuid:instance_id>/idle-policy/",
        views.instance_idle_policy,
        name="instance_idle_policy",
    ),
    path(
        "instances/<uuid:instance_id>/save-image/",
        views_images.instance_save_image,
        name="instance_save_image",
    ),
    path(
        "instances/<uuid:instance_id>/snapshot/",
        views_volumes.workspace_snapshot_view,
        name="workspace_snapshot",
    ),
    path(
        "instances/<uuid:instance_id>/<str:action>/", views.instance_action, name="instance_action"
    ),
    path("dedicated/", views_baremetal.leases, name="leases"),
    path("dedicated/<uuid:lease_id>/", views_baremetal.lease_detail, name="lease"),
    path(
        "dedicated/<uuid:lease_id>/<str:action>/",
        views_baremetal.lease_action,
        name="lease_action",
    ),
    path("keys/", views.api_keys, name="api_keys"),
    path("keys/<uuid:key_id>/revoke/", views.api_key_revoke_view, name="api_key_revoke"),
    path("ssh-keys/", views_sshkeys.ssh_keys, name="ssh_keys"),
    path("images/", views_images.images, name="images"),
    path("volumes/", views_volumes.volumes, name="volumes"),
    path(
        "volumes/<uuid:volume_id>/delete/",
        views_volumes.volume_action_view,
        {"action": "delete"},
        name="volume_delete",
    ),
    path(
        "volumes/<uuid:volume_id>/resize/", views_volumes.volume_resize_view, name="volume_resize"
    ),
    path(
        "volumes/<uuid:volume_id>/snapshot/",
        views_volumes.snapshot_create_view,
        name="snapshot_create",
    ),
    path(
        "snapshots/<uuid:snapshot_id>/restore/",
        views_volumes.snapshot_action_view,
        {"action": "restore"},
        name="snapshot_restore",
    ),
    path(
        "snapshots/<uuid:snapshot_id>/delete/",
        views_volumes.snapshot_action_view,
        {"action": "delete"},
        name="snapshot_delete",
    ),
    path(
        "volumes/<uuid:volume_id>/detach/",
        views_volumes.volume_action_view,
        {"action": "detach"},
        name="volume_detach",
    ),
    path(
        "images/saved/<uuid:image_id>/delete/",
        views_images.saved_image_delete_view,
        name="saved_image_delete",
    ),
    path(
        "images/logins/<uuid:login_id>/delete/",
        views_images.registry_login_delete,
        name="registry_login_delete",
    ),
    path(
        "ssh-keys/<uuid:key_id>/delete/", views_sshkeys.ssh_key_delete_view, name="ssh_key_delete"
    ),
    path("credit/", views_billing_self.credit, name="billing_credit"),
    path("credit/top-up/", views_billing_self.credit_topup, name="billing_credit_topup"),
    path("credit/redeem/", views_billing_self.credit_redeem, name="billing_credit_redeem"),
    path("credit/details/", views_billing_self.credit_details, name="billing_credit_details"),
    path("credit/auto-top-up/", views_billing_self.credit_auto_topup, name="billing_auto_topup"),
    path(
        "credit/auto-top-up/card/",
        views_billing_self.credit_auto_topup_card,
        name="billing_auto_topup_card",
    ),
    path(
        "credit/auto-top-up/card/remove/",
        views_billing_self.credit_auto_topup_card_remove,
        name="billing_auto_topup_card_remove",
    ),
    path(
        "credit/payments/<uuid:payment_id>/",
        views_billing_self.payment_receipt,
        name="billing_payment",
    ),
    path(
        "notifications/",
        views_notifications.notification_preferences,
        name="notification_preferences",
    ),
    path("notifications/webhooks/", views_notifications.webhooks, name="webhooks"),
    path(
        "notifications/webhooks/<uuid:endpoint_id>/",
        views_notifications.webhook_detail,
        name="webhook",
    ),
    path(
        "notifications/webhooks/<uuid:endpoint_id>/delete/",
        views_notifications.webhook_delete_view,
        name="webhook_delete",
    ),
    path(
        "notifications/webhooks/<uuid:endpoint_id>/reenable/",
        views_notifications.webhook_reenable_view,
        name="webhook_reenable",
    ),
    path(
        "notifications/deliveries/<uuid:delivery_id>/resend/",
        views_notifications.webhook_resend_view,
        name="webhook_resend",
    ),
    path("reservations/", views.reservation_list, name="reservations"),
    path("reservations/quote/", views.reservation_quote, name="reservation_quote"),
    path("reservations/<uuid:reservation_id>/", views.reservation_detail, name="reservation"),
    path(
        "reservations/<uuid:reservation_id>/cancel/",
        views.reservation_cancel_view,
        name="reservation_cancel",
    ),
    path(
        "reservations/<uuid:reservation_id>/relaunch/",
        views.reservation_relaunch_view,
        name="reservation_relaunch",
    ),
    path("groups/", views_groups.group_list, name="groups"),
    path("groups/<uuid:group_id>/", views_groups.group_detail, name="group"),
    path("groups/<uuid:group_id>/samples/", views_groups.group_samples, name="group_samples"),
    path("groups/<uuid:group_id>/delete/", views_groups.group_delete_view, name="group_delete"),
    path(
        "groups/<uuid:group_id>/rotate-key/",
        views_groups.group_rotate_key_view,
        name="group_rotate_key",
    ),
    path("staff/fleet/", views.fleet, name="fleet"),
    path("staff/fleet/tables/", views.fleet_hosts, name="fleet_tables"),
    path("staff/revenue/", views.revenue, name="revenue"),
    path("staff/revenue.csv", views.revenue_csv, name="revenue_csv"),
    path(
        "staff/hosts/<int:host_id>/<str:action>/", views.fleet_host_action, name="fleet_host_action"
    ),
    path(
        "staff/instances/<uuid:instance_id>/stop/",
        views.fleet_instance_stop,
        name="fleet_instance_stop",
    ),
]
