"""Query parameters of the REST API, read strictly: what a view does not know is refused.

A misspelt filter (`?sate=PENDING`, `?status=PENDING`) or one the API does not have
(`?page_size=1`) silently answered with everything; refusing it names the mistake, as an
unknown body field is refused in a submission. So is a parameter that takes one value given
twice (`?page=abc&page=1`): Django's `get` quietly answers with the last one.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.paginator import Page, Paginator
from rest_framework.request import Request

from .errors import ValidationFailed

# DRF's own: `?format=json` (or `api`) picks the renderer before any view code runs; any
# other value is refused there, as a 400 naming `format` (`config.api_errors`).
ALWAYS_ALLOWED = frozenset({"format"})
PAGE_MESSAGE = "A page number, 1 or more."


def query_params_check(
    request: Request, *, allowed: Iterable[str], repeatable: Iterable[str] = ()
) -> None:
    """ValidationFailed naming each query parameter the endpoint does not take, and each
    one given more than once that is not in `repeatable` (`?state=A&state=B`)."""
    known = sorted(set(allowed))
    params = request.query_params
    unknown = sorted(set(params) - set(known) - ALWAYS_ALLOWED)
    errors: dict[str, list[str]] = {}
    if unknown:
        hint = f"Known: {', '.join(known)}." if known else "This endpoint takes none."
        errors |= {name: [f"Unknown query parameter. {hint}"] for name in unknown}
    multi = set(repeatable)
    repeated = [
        name
        for name in sorted(params)
        if name not in errors and name not in multi and len(params.getlist(name)) > 1
    ]
    errors |= {name: ["Given more than once; it takes one value."] for name in repeated}
    if errors:
        raise ValidationFailed(errors)


def query_list(request: Request, name: str) -> list[str]:
    """Every value of a parameter given repeated (`?state=A&state=B`) or comma-separated
    (`?state=A,B`, as Slurm's `squeue -t PD,R`), blanks dropped, in order, once each."""
    values: list[str] = []
    for raw in request.query_params.getlist(name):
        for part in raw.split(","):
            if (value := part.strip()) and value not in values:
                values.append(value)
    return values


def page_number_parse(raw: str | None) -> int:
    """The `page` parameter as a number ≥ 1 (1 when absent); ValidationFailed else."""
    if raw is None:
        return 1
    # ASCII digits only, and few: "²".isdigit() is true, and int() refuses > 4300 digits.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 9) or int(raw) < 1:
        raise ValidationFailed({"page": [PAGE_MESSAGE]})
    return int(raw)


def page_get(paginator: Paginator, number: int) -> Page:
    """Page `number` of `paginator`; a page past the last is a 400 saying how many there
    are, except on an empty list, whose one (empty) page answers any number."""
    if paginator.count and number > paginator.num_pages:
        pages = paginator.num_pages
        there = "There is 1 page." if pages == 1 else f"There are {pages} pages."
        raise ValidationFailed({"page": [there]})
    return paginator.page(min(number, paginator.num_pages))
