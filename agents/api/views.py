"""The heartbeat endpoint node agents post to, authenticated by a per-node token."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import authentication, exceptions, permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.api_errors import (
    BAD_NESTED_BODY,
    FIELD_ERRORS,
    NOT_AUTHENTICATED,
    NOT_JSON,
    ErrorOutput,
    error_response,
)
from config.api_params import query_params_check
from config.errors import ApplicationError, Conflict, NotFound, ValidationFailed
from config.throttling import FailOpenThrottle
from jobs.selectors import job_get_for_user

from ..heartbeats import (
    agent_heartbeat_record,
    agent_heartbeat_refused,
    node_agent_token_check,
)
from ..logs import job_log_tail
from ..runtimes import LOG_STREAMS
from .serializers import HeartbeatInput


class NodeAgentAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <node token>`; `request.auth` is the node."""

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != b"bearer":
            raise exceptions.AuthenticationFailed("Send 'Authorization: Bearer <node token>'.")
        try:
            key = header[1].decode("ascii")
        except UnicodeDecodeError as exc:
            raise exceptions.AuthenticationFailed("Token contains invalid characters.") from exc
        node = node_agent_token_check(key=key)
        if node is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked node token.")
        return AnonymousUser(), node

    def authenticate_header(self, request) -> str:  # type: ignore[no-untyped-def]
        return "Bearer"


class IsNodeAgent(permissions.BasePermission):
    def has_permission(self, request, view) -> bool:  # type: ignore[no-untyped-def]
        return request.auth is not None


class PerNodeThrottle(FailOpenThrottle):
    """A misbehaving agent (or a leaked token) cannot flood the database: limit per node."""

    scope = "agent_heartbeat"

    def get_rate(self) -> str:
        return settings.GPULAB_AGENT_HEARTBEAT_RATE

    def get_cache_key(self, request, view) -> str:  # type: ignore[no-untyped-def]
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class AgentHeartbeatApi(APIView):
    authentication_classes = [NodeAgentAuthentication]
    permission_classes = [IsNodeAgent]
    throttle_classes = [PerNodeThrottle]

    @extend_schema(
        summary="Node agent heartbeat",
        description=(
            "A refused heartbeat (400, 409, 415) stores none of its readings but counts as "
            "a sign of life: the node is not taken down, nor its jobs requeued, because its "
            "agent and the control plane disagree. A GPU conflict (409) drains the node "
            "with the conflict as its reason."
        ),
        request=HeartbeatInput,
        responses={
            200: dict,
            400: BAD_NESTED_BODY,
            401: NOT_AUTHENTICATED,
            409: error_response(
                "A reported GPU is registered on another node that may still use it, or "
                "replaces one still allocated to a job (`conflict`)."
            ),
            415: NOT_JSON,
            429: error_response("Too many heartbeats from this node (`throttled`)."),
        },
    )
    def post(self, request: Request) -> Response:
        try:
            return Response(self._record(request))
        except (ApplicationError, exceptions.APIException) as exc:
            # Refused (400, 409, 415): nothing of it is stored, a transaction that got as
            # far as a GPU conflict included. Its agent is up all the same: a node must not
            # go DOWN, and its jobs be requeued, because the agent and the control plane
            # disagree (a version skew, a GPU an admin has yet to free on another node).
            agent_heartbeat_refused(
                node=request.auth,
                errors=getattr(exc, "detail", str(exc)),
                conflict=exc.message if isinstance(exc, Conflict) else "",
            )
            raise

    def _record(self, request: Request) -> dict[str, Any]:
        query_params_check(request, allowed=[])
        serializer = HeartbeatInput(data=request.data)
        if not serializer.is_valid():
            raise exceptions.ValidationError(serializer.errors)
        return agent_heartbeat_record(node=request.auth, heartbeat=serializer.validated_data)


class LogTailOutput(serializers.Serializer):
    job = serializers.IntegerField()
    attempt = serializers.IntegerField()
    stream = serializers.ChoiceField(choices=list(LOG_STREAMS))
    text = serializers.CharField()
    archived = serializers.BooleanField(
        help_text="Read from the copy kept when the attempt ended, not from the node."
    )


class LogsUnavailableOutput(ErrorOutput):
    cause = serializers.CharField(
        required=False, help_text="Admins only: why the node could not be read."
    )


class JobLogsApi(APIView):
    """The tail of the current attempt's stdout or stderr: read from the node while it
    runs, and from the copy kept in the database once it has ended. Students see their
    own jobs' logs; admins any. When the node cannot be read: 503 with what a student may
    know; admins also get the technical `cause`."""

    @extend_schema(
        summary="Job logs (tail)",
        parameters=[
            OpenApiParameter(
                "stream", str, enum=list(LOG_STREAMS), default="stdout", description="Which log."
            )
        ],
        responses={
            200: LogTailOutput,
            400: FIELD_ERRORS,
            401: NOT_AUTHENTICATED,
            404: error_response("No such job of yours, or it has not started (`not_found`)."),
            410: error_response(
                "The attempt's log is gone and no copy was kept: its node removed it "
                "(GPULAB_FINISHED_ATTEMPT_KEEP_DAYS) before it was copied, or no longer "
                "had it when the attempt ended (`logs_removed`)."
            ),
            503: OpenApiResponse(
                response=LogsUnavailableOutput,
                description="The node could not be read (`logs_unavailable`).",
            ),
        },
    )
    def get(self, request: Request, job_id: int) -> Response:
        query_params_check(request, allowed=["stream"])
        job = job_get_for_user(user=request.user, job_id=job_id)
        stream = request.query_params.get("stream", "stdout")
        if stream not in LOG_STREAMS:
            raise ValidationFailed({"stream": ["Choose stdout or stderr."]})
        log = job_log_tail(job=job, stream=stream)
        if log.not_started:
            raise NotFound(log.problem)
        if log.removed:
            return Response({"detail": log.problem, "code": "logs_removed"}, status=410)
        if log.unavailable:
            body = {"detail": log.problem, "code": "logs_unavailable"}
            if log.detail and request.user.is_lab_admin:
                body["cause"] = log.detail
            return Response(body, status=503)
        return Response(
            {
                "job": job.pk,
                "attempt": job.attempt,
                "stream": stream,
                "text": log.text,
                "archived": log.archived,
            }
        )
