"""The usage report: GPU-hours per user and group by device type, as a page or CSV.

Lab admins see the whole lab; a group coordinator the groups they coordinate.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from ..forms import USAGE_DEFAULT_DAYS, UsageRangeForm
from ..selectors.usage import usage_report, usage_report_csv, usage_scope_for


@login_required
def usage_report_page(request: HttpRequest) -> HttpResponse:
    scope = usage_scope_for(request.user)
    form = UsageRangeForm(request.GET)
    if not form.is_valid():
        # Bad dates: the page again, with the message next to the field (never a 500).
        return render(
            request,
            "dashboard/usage.html",
            {
                "form": form,
                "report": None,
                "values": {name: request.GET.get(name, "") for name in ("start", "end")},
                "default_days": USAGE_DEFAULT_DAYS,
            },
            status=400,
        )
    report = usage_report(
        start=form.cleaned_data["start"], end=form.cleaned_data["end"], group_ids=scope
    )
    if request.GET.get("format") == "csv":
        response = HttpResponse(usage_report_csv(report), content_type="text/csv; charset=utf-8")
        filename = f"gpulab-usage-{report.start:%Y%m%d}-{report.end:%Y%m%d}.csv"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response
    return render(
        request,
        "dashboard/usage.html",
        {
            "form": form,
            "report": report,
            "values": {"start": f"{report.start:%Y-%m-%d}", "end": f"{report.end:%Y-%m-%d}"},
            "tables": [("Per user", report.users), ("Per group", report.groups)],
            "default_days": USAGE_DEFAULT_DAYS,
            "csv_query": f"start={report.start:%Y-%m-%d}&end={report.end:%Y-%m-%d}&format=csv",
        },
    )
