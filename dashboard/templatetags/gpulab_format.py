"""Template filters for numbers people read: durations and GPU-hours."""

from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def duration(seconds: float | int | None) -> str:
    """4000 -> '1 h 6 min'; 42 -> '42 s'; 200000 -> '2 d 7 h'. Empty for None."""
    if seconds is None or seconds == "":
        return ""
    total = int(float(seconds))
    if total < 60:
        return f"{total} s"
    minutes, _ = divmod(total, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
