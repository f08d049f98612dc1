"""Plotly report of a comparison: JCT CDF per policy and GPUs busy over time.

One self-contained HTML file (plotly.js inlined from the installed package, so it opens
offline). Timelines are thinned to at most `max_points` steps per policy so a 20,000-job
replay still produces a file a browser opens quickly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.sim.engine import SimResult

if TYPE_CHECKING:
    import plotly.graph_objects as go


def _thin(points: Sequence[tuple[float, int]], max_points: int) -> list[tuple[float, int]]:
    if len(points) <= max_points:
        return list(points)
    step = len(points) / max_points
    kept = [points[int(i * step)] for i in range(max_points)]
    kept.append(points[-1])
    return kept


def write_plot(
    results: Mapping[str, SimResult],
    path: str | Path,
    *,
    title: str = "",
    max_points: int = 5000,
) -> None:
    """Write the HTML report for `results` (label -> replay) to `path`."""
    figure = build_figure(results, title=title, max_points=max_points)
    figure.write_html(str(path), include_plotlyjs=True, full_html=True)


def build_figure(
    results: Mapping[str, SimResult], *, title: str = "", max_points: int = 5000
) -> go.Figure:
    """The report's figure: one colour and one legend group per policy, shared by its JCT
    CDF and its GPUs-held line, so a policy reads the same in both panels and clicking
    its legend entry hides both."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative
    from plotly.subplots import make_subplots

    figure = make_subplots(
        rows=2,
        cols=1,
        subplot_titles=("JCT CDF (seconds, log scale)", "GPUs held over time (hours)"),
        vertical_spacing=0.12,
    )
    palette = qualitative.Plotly + qualitative.Dark24  # 34 colours: 6 policies x 2 placements fit
    for index, (label, result) in enumerate(results.items()):
        line = {"shape": "hv", "color": palette[index % len(palette)]}
        jcts = sorted(r.jct for r in result.records if r.jct is not None)
        if jcts:
            n = len(jcts)
            figure.add_trace(
                go.Scatter(
                    x=jcts,
                    y=[(i + 1) / n for i in range(n)],
                    mode="lines",
                    line=line,
                    name=f"{label} JCT",
                    legendgroup=label,
                ),
                row=1,
                col=1,
            )
        timeline = _thin(result.busy_timeline, max_points)
        if timeline:
            start = timeline[0][0]
            figure.add_trace(
                go.Scatter(
                    x=[(t - start) / 3600.0 for t, _ in timeline],
                    y=[busy for _, busy in timeline],
                    mode="lines",
                    line=line,
                    name=f"{label} GPUs",
                    legendgroup=label,
                ),
                row=2,
                col=1,
            )
    figure.update_xaxes(type="log", title_text="JCT (s)", row=1, col=1)
    figure.update_yaxes(title_text="fraction of jobs", range=[0, 1.02], row=1, col=1)
    figure.update_xaxes(title_text="hours since first submission", row=2, col=1)
    figure.update_yaxes(title_text="GPUs held", row=2, col=1)
    figure.update_layout(title=title or "gpulab simulation", height=900)
    return figure
