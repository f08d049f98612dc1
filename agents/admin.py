from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .heartbeats import node_agent_tokens_revoke
from .models import NodeAgentToken, NodeHostKey
from .services import node_host_key_approve


@admin.register(NodeHostKey)
class NodeHostKeyAdmin(admin.ModelAdmin):
    """The known-hosts store. Compare a pending key's fingerprint with the node's own
    (`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` there) before approving it."""

    list_display = [
        "node",
        "key_type",
        "fingerprint",
        "first_seen_at",
        "approved_at",
        "approved_by",
    ]
    list_filter = ["node"]
    readonly_fields = ["node", "key_type", "key_base64", "fingerprint", "first_seen_at",
                       "approved_at", "approved_by"]  # fmt: skip
    actions = ["approve"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # keys are recorded from what nodes present, never typed in

    @admin.action(description="Approve this host key (replaces the node's other keys)")
    def approve(self, request: HttpRequest, queryset: QuerySet[NodeHostKey]) -> None:
        if queryset.values("node").distinct().count() != queryset.count():
            self.message_user(request, "Approve one key per node.", messages.ERROR)
            return
        for key in queryset:
            node_host_key_approve(key_id=key.pk, by=request.user)  # type: ignore[arg-type]
        self.message_user(request, f"Approved {queryset.count()} key(s).", messages.SUCCESS)


@admin.register(NodeAgentToken)
class NodeAgentTokenAdmin(admin.ModelAdmin):
    """Nodes' agent tokens: who holds one and whether it still works. Only a digest is
    stored, so a token is created where its key can be handed over once
    (`manage.py node_agent_token NODE` or `node_bootstrap`), never here."""

    list_display = ["node", "created_at", "revoked_at"]
    list_filter = ["node"]
    readonly_fields = ["node", "digest", "created_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke (the node's agent is refused until it gets a new token)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[NodeAgentToken]) -> None:
        revoked = node_agent_tokens_revoke(
            token_ids=queryset.values_list("pk", flat=True), by=request.user
        )
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
