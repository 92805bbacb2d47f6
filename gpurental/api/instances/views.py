"""Instances over the API: launch, watch (a long-poll), stop, start, restart, connect,
terminate. Thin: parse, call one service or selector, shape the answer.

Visibility: a customer sees their own instances (or their team's, acting for it); staff
see every instance, but only its owner gets in (connect). Anything else is a 404, worded
the same whether the instance does not exist or belongs to someone else.
"""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.db.models import Prefetch
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response

from gpurental.api.errors import TooMany
from gpurental.api.idempotency import IDEMPOTENCY_KEY, idempotent
from gpurental.api.instances import serializers as s
from gpurental.api.lookups import UUID_RE, LookupMixin
from gpurental.api.savedimages.serializers import SavedImageSerializer, SaveImageSerializer
from gpurental.gateway import routes, tickets
from gpurental.images.services import ImageRefused
from gpurental.rentals import selectors as rental_selectors
from gpurental.rentals.events import WAIT_ENDS, wait_for_status, wait_slot
from gpurental.rentals.models import Allocation, Instance
from gpurental.rentals.services.clusters import cluster_launch
from gpurental.rentals.services.lifecycle import (
    instance_launch,
    instance_restart,
    instance_set_auto_recover,
    instance_set_idle_policy,
    instance_start,
    instance_stop,
    instance_terminate,
)
from gpurental.rentals.services.saving import image_save_request
from gpurental.teams.acting import account_of
from gpurental.volumes import selectors as volumes_selectors


def _instance_action(summary: str):
    return extend_schema(
        summary=summary,
        request=None,
        responses={200: s.InstanceDetailSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )


def instances_for(user, *, with_events: bool = True):
    """The instances ``user`` may see (staff: all), ready for the instance serializers."""
    queryset = Instance.objects.select_related(
        "gpu_model", "plan", "image", "host__zone", "recovered_as"
    )
    queryset = queryset.prefetch_related(
        Prefetch(
            "allocations",
            # The GPUs' indices is all the serializers read of them.
            queryset=Allocation.objects.filter(rental_selectors.HELD)
            .select_related("gpu")
            .only("instance_id", "gpu__index"),
            to_attr="held_allocations",
        ),
        Prefetch("volumes", queryset=volumes_selectors.mounted(), to_attr="mounted_volumes"),
    )
    if with_events:
        queryset = queryset.prefetch_related("events")
    return queryset if user.is_staff else queryset.filter(user=user)


# What InstanceSerializer reads (a list of 200 makes 1,200 model objects: every column
# left out is 1,200 fewer to decode). A column missing here costs a query per item:
# tests/api/instances/test_list_shape.py counts them.
LIST_COLUMNS = [
    *[
        "id",
        "name",
        "status",
        "status_reason",
        "gpu_model",
        "plan",
        "image",
        "image_ref",
        "image_alias",
        "hf_model",
        "host",
        "without_gpus",
        "created_at",
        "running_since",
        "stopped_at",
        "jupyter_port",
        "idle_stop_minutes",
        "auto_recover",
        "recovered_from",
        "lease",
        "user",
        "gpu_count",
        "cluster_id",
        "cluster_rank",
        "cluster_size",
    ],
    "gpu_model__slug",
    "plan__slug",
    "image__slug",
    "image__ssh_port",
    "host__name",
    "host__zone__name",
    "recovered_as__id",
]


@extend_schema(tags=["instances"])
class InstanceViewSet(
    LookupMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """GPU containers: launch, watch, stop, start, restart, terminate."""

    scope_area = "instances"

    noun = gettext_lazy("instance")
    lookup_value_regex = UUID_RE
    wait_outcome: str | None = None  # set by a long-poll (_wait), sent as Wait-Outcome

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Instance.objects.none()
        if self.action == "list":  # only the columns the list's items show
            return instances_for(account_of(self.request), with_events=False).only(*LIST_COLUMNS)
        return instances_for(account_of(self.request))

    def get_serializer_class(self):
        if self.action == "list":
            return s.InstanceSerializer
        if self.action == "create":
            return s.InstanceCreateSerializer
        return s.InstanceDetailSerializer

    def _detail(self, instance: Instance, status_code: int = status.HTTP_200_OK) -> Response:
        fresh = self.get_queryset().get(pk=instance.pk)
        return Response(
            s.InstanceDetailSerializer(fresh, context=self.get_serializer_context()).data,
            status=status_code,
        )

    @extend_schema(
        parameters=[s.InstanceWaitQuerySerializer],
        responses={200: s.InstanceDetailSerializer},
    )
    def retrieve(self, request, *args, **kwargs):
        """One instance. With `wait_for`, a long-poll: the answer comes the moment the
        status changes to it (or to failed, lost or terminated), else after `timeout`
        seconds with the status then. The `Wait-Outcome` header says which: reached,
        ended (failed, lost or terminated instead) or timeout."""
        query = s.InstanceWaitQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        instance = self.get_object()  # another customer's instance: 404 before any wait
        wanted = query.validated_data.get("wait_for")
        if not wanted:  # read once, with its prefetches: get_object used the same queryset
            return Response(self.get_serializer(instance).data)
        self._wait(instance, wanted, query.validated_data["timeout"])
        return self._detail(instance)

    def _wait(self, instance: Instance, wanted: str, timeout: float) -> None:
        """A long-poll: wait until ``instance`` is ``wanted`` (or failed, lost or terminated),
        for at most ``timeout`` s, holding no database connection. The answer, whatever it
        is (an error too), then carries the outcome in ``Wait-Outcome``: reached, ended or
        timeout (``finalize_response``)."""

        def current() -> str:
            status_now = Instance.objects.values_list("status", flat=True).get(pk=instance.pk)
            waits_on = status_now != wanted and status_now not in WAIT_ENDS
            if waits_on and not connection.in_atomic_block:
                # Hold no database connection while waiting; once the wait is over, the
                # answer's own reads use this one (a new one costs ~4 ms).
                connection.close()
            return status_now

        limit = settings.API_WAITS_PER_USER
        with wait_slot(str(self.request.user.pk), limit, ttl=2 * s.WAIT_TIMEOUT_MAX) as allowed:
            if not allowed:
                raise TooMany(
                    _(
                        "%(limit)s long-polls of yours are already waiting; wait on fewer "
                        "instances at once (or read without wait_for)"
                    )
                    % {"limit": limit},
                    wait=1,
                )
            seen, changed = wait_for_status(instance.pk, wanted, timeout, current=current)
        self.wait_outcome = "timeout" if not changed else "reached" if seen == wanted else "ended"

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if self.wait_outcome is not None:  # on an error answer too (a connect's 409)
            response["Wait-Outcome"] = self.wait_outcome
        return response

    @extend_schema(parameters=[s.InstanceListQuerySerializer])
    def list(self, request, *args, **kwargs):
        query = s.InstanceListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        queryset = self.get_queryset()
        if "status" in query.validated_data:
            queryset = queryset.filter(status=query.validated_data["status"])
        page = self.paginate_queryset(queryset)
        data = s.InstanceSerializer(page, many=True, context=self.get_serializer_context()).data
        return self.get_paginated_response(data)

    @extend_schema(
        summary="Launch an instance",
        request=s.InstanceCreateSerializer,
        responses={201: s.InstanceDetailSerializer},
        parameters=[IDEMPOTENCY_KEY],
        examples=[
            OpenApiExample(
                "By GPU model",
                value={"gpu_model": "A10G", "gpu_count": 1, "image": "pytorch-2.1"},
                request_only=True,
            ),
            OpenApiExample(
                "By plan, with the Hugging Face cache",
                value={
                    "plan": "a10g-x2",
                    "image": "jupyter-cpu",
                    "name": "finetune",
                    "model_repo": "huggingface",
                },
                request_only=True,
            ),
        ],
    )
    @idempotent
    def create(self, request, *args, **kwargs):
        form = s.InstanceCreateSerializer(data=request.data, context={"request": request})
        form.is_valid(raise_exception=True)
        instance = instance_launch(user=account_of(request), **form.launch_kwargs())
        return self._detail(instance, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Launch a cluster: N instances that reach each other on your private "
        "network, with MASTER_ADDR, WORLD_SIZE, RANK and NCCL's interface set for torchrun",
        request=s.ClusterCreateSerializer,
        responses={201: s.ClusterSerializer},
        parameters=[IDEMPOTENCY_KEY],
        examples=[
            OpenApiExample(
                "Two A10G instances for torchrun",
                value={"gpu_model": "A10G", "gpu_count": 1, "image": "pytorch-2.1", "size": 2},
                request_only=True,
            )
        ],
    )
    @action(detail=False, methods=["post"])
    @idempotent
    def cluster(self, request):
        form = s.ClusterCreateSerializer(data=request.data, context={"request": request})
        form.is_valid(raise_exception=True)
        ranks = cluster_launch(user=account_of(request), **form.launch_kwargs())
        fresh = {i.pk: i for i in self.get_queryset().filter(pk__in=[r.pk for r in ranks])}
        context = self.get_serializer_context()
        return Response(
            {
                "id": str(ranks[0].cluster_id),
                "instances": [
                    s.InstanceDetailSerializer(fresh[r.pk], context=context).data for r in ranks
                ],
            },
            status=status.HTTP_201_CREATED,
        )

    @_instance_action(
        "Stop: the GPUs are released, /workspace stays, and the stopped container stays on "
        "its host until the next start (it can be saved as an image)"
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def stop(self, request, pk=None):
        return self._detail(instance_stop(instance=self.get_object(), actor=request.user))

    @extend_schema(
        summary="Start a stopped instance again, on the same host (with its GPUs, or without "
        "them in no-GPU mode)",
        request=s.StartRequestSerializer,
        responses={200: s.InstanceDetailSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"])
    @idempotent
    def start(self, request, pk=None):
        form = s.StartRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return self._detail(
            instance_start(
                instance=self.get_object(),
                actor=request.user,
                without_gpus=form.validated_data["without_gpus"],
            )
        )

    @_instance_action("Restart the container in place (same GPUs, same /workspace)")
    @action(detail=True, methods=["post"])
    @idempotent
    def restart(self, request, pk=None):
        return self._detail(instance_restart(instance=self.get_object(), actor=request.user))

    @extend_schema(
        summary="A one-time link that logs you in at the instance's origin (JupyterLab)",
        request=s.ConnectRequestSerializer,
        responses={201: s.ConnectLinkSerializer},
        parameters=[s.ConnectWaitQuerySerializer],
    )
    @action(detail=True, methods=["post"])
    def connect(self, request, pk=None):
        """A one-time link into the running instance. With `wait_for=running`, a long-poll:
        the link comes the moment the instance runs; if it ends failed, lost or terminated
        instead, or still does not run after `timeout` seconds, the answer is a 409
        (invalid_state). The `Wait-Outcome` header says which: reached, ended or timeout."""
        instance = self.get_object()  # another customer's instance: 404 before any wait
        if instance.user_id != account_of(request).pk:
            # Staff see every instance, but only its owner (or its team's members) gets in.
            raise NotFound(_("there is no %(noun)s %(id)s") % {"noun": self.noun, "id": pk})
        form = s.ConnectRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        query = s.ConnectWaitQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        port = form.validated_data.get("port")
        wanted = query.validated_data.get("wait_for")
        if wanted:
            tickets.connect_port_check(instance=instance, port=port)  # not after a long wait
            self._wait(instance, wanted, query.validated_data["timeout"])
            # One read after the wake-up (tickets.connect needs the image's ports).
            instance = Instance.objects.select_related("image").get(pk=instance.pk)
        # The ticket is the person's; the gateway admits a team's members who may operate.
        ticket = tickets.connect(user=request.user, instance=instance, port=port)
        return Response(
            {
                "url": ticket.url,
                "expires_at": ticket.expires_at,
                "origin": routes.origin(instance.pk, port),
                "status": instance.status,
            },
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(
        summary="Set the idle auto-stop policy (0 turns it off)",
        request=s.IdlePolicySerializer,
        responses={200: s.InstanceDetailSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"], url_path="idle-policy")
    @idempotent
    def idle_policy(self, request, pk=None):
        form = s.IdlePolicySerializer(data=request.data)
        form.is_valid(raise_exception=True)
        instance = instance_set_idle_policy(
            instance=self.get_object(),
            minutes=form.validated_data["idle_stop_minutes"],
            actor=request.user,
        )
        return self._detail(instance)

    @extend_schema(
        summary="Turn auto-recover on or off",
        description="On: when the instance's host is declared lost, it is relaunched on another "
        "host with the same image and plan, its /workspace from its newest workspace snapshot "
        "(else empty), and billed from when it runs there. Off: it waits for its host. "
        "On-demand instances only.",
        request=s.AutoRecoverSerializer,
        responses={200: s.InstanceDetailSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"], url_path="auto-recover")
    @idempotent
    def auto_recover(self, request, pk=None):
        form = s.AutoRecoverSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        instance = instance_set_auto_recover(
            instance=self.get_object(), enabled=form.validated_data["enabled"], actor=request.user
        )
        return self._detail(instance)

    @_instance_action("Terminate: remove the instance and its /workspace for good")
    @extend_schema(
        summary="Save the running or stopped instance's container as a private image",
        description="Committed on its host (without /workspace: that is the instance's data, "
        "and without the run's secrets) and pushed to the platform's registry; the image is "
        "`saving` until the host reports it `ready` (or `failed`). Launch it on any host with "
        '`"image": "<reference>"`.',
        request=SaveImageSerializer,
        responses={202: SavedImageSerializer},
        parameters=[IDEMPOTENCY_KEY],
    )
    @action(detail=True, methods=["post"], url_path="save-image")
    @idempotent
    def save_image(self, request, pk=None):
        form = SaveImageSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        instance = self.get_object()
        try:
            image = image_save_request(
                instance=instance, name=form.validated_data["name"], actor=request.user
            )
        except ImageRefused as exc:
            raise ValidationError({exc.field: [exc.message]}) from exc
        return Response(SavedImageSerializer(image).data, status=status.HTTP_202_ACCEPTED)

    @action(detail=True, methods=["post"])
    @idempotent
    def terminate(self, request, pk=None):
        return self._detail(instance_terminate(instance=self.get_object(), actor=request.user))
