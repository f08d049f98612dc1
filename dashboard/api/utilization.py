"""Placeholder: filled in by the dashboard work (issue 6)."""

from __future__ import annotations

from rest_framework.views import APIView


class UtilizationApi(APIView):
    pass
