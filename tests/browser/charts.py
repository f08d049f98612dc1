"""Reading Plotly charts back from the page: were they drawn, and do they show data?"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # without playwright the browser tests skip; collecting must not fail
    from playwright.sync_api import Page

DRAWN = '.chart[data-drawn="true"] .main-svg'

# For each drawn chart: its id, trace count, and per trace its type and number of points.
# Plotly keeps the figure on the element (`el.data`); the arrays may stay in the typed-array
# form the Python package writes ({dtype, bdata}), so `_fullData` (what was really drawn) is
# read too, where Plotly stores the decoded length as `_length`.
_CHARTS_JS = """() => [...document.querySelectorAll('.chart[data-drawn="true"]')].map((el) => {
  const size = (value) => {
    if (value == null) return 0;
    if (typeof value.length === "number") return value.length;
    if (typeof value.bdata === "string") return value.bdata.length > 0 ? 1 : 0;
    return 0;
  };
  const full = el._fullData || [];
  return {
    id: el.id,
    svg: el.querySelectorAll(".main-svg").length,
    traces: (el.data || []).map((trace, i) => ({
      type: trace.type || "scatter",
      name: trace.name || "",
      points: Math.max(
        size(trace.x), size(trace.y), size(trace.z), size(trace.values), size(trace.r),
        (full[i] && full[i]._length) || 0,
      ),
    })),
  };
})"""


def charts_drawn(page: Page) -> list[dict[str, Any]]:
    """Wait for the first drawn chart, then describe every drawn chart of the page."""
    page.wait_for_selector(DRAWN, state="attached")
    return page.evaluate(_CHARTS_JS)


def charts_with_points(page: Page) -> list[dict[str, Any]]:
    """The drawn charts that have at least one trace with at least one point."""
    return [
        chart
        for chart in charts_drawn(page)
        if chart["svg"] and any(trace["points"] > 0 for trace in chart["traces"])
    ]


def charts_not_drawn(page: Page) -> list[str]:
    """Ids of charts on the page that gpulab.js did not draw (all draw at DOMContentLoaded)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.chart[data-figure]')]
              .filter((el) => el.dataset.drawn !== "true" || !el.querySelector(".main-svg"))
              .map((el) => el.id || "(no id)")"""
    )
