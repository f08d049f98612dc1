"""Text PostgreSQL cannot store is refused at the door, naming where it was.

PostgreSQL rejects a NUL character in text (and psycopg2 cannot encode a lone UTF-16
surrogate, which JSON's "\\ud800" escape decodes to): reaching a query, either was a 500.
Every request's query and form parameters and every API JSON body are checked once here,
so no view has to remember to. A JSON body nested deeper than any API takes is refused here
too: `json.load` recurses once per level and would otherwise end in a RecursionError (a 500).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

# No API body goes deeper than a heartbeat's gpus[i].processes[j] (4 levels); 64 leaves room
# and keeps the walkers below far from Python's recursion limit.
MAX_JSON_DEPTH = 64
TOO_DEEP = "JSON nested too deeply."


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored, or None."""
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text (a lone surrogate)"
    return None


def json_depth_exceeds(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `value` nests lists and objects more than `limit` deep (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _problems(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        if (problem := text_problem(value)) is not None:
            yield path, problem
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and (problem := text_problem(key)) is not None:
                yield path or "(body)", f"has a key that {problem}"
            else:
                yield from _problems(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _problems(item, f"{path}[{index}]" if path else f"[{index}]")


class StoredTextJSONParser(JSONParser):
    """DRF's JSON parser, refusing strings PostgreSQL cannot store (400 naming the field)."""

    def parse(self, stream, media_type=None, parser_context=None):  # type: ignore[no-untyped-def]
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError as exc:
            raise ParseError(TOO_DEEP) from exc
        if json_depth_exceeds(data):
            raise ParseError(TOO_DEEP)
        errors: dict[str, list[str]] = {}
        for path, problem in _problems(data, ""):
            # Keyed by the top-level field ("env" for env.A), as ValidationFailed is.
            field = re.match(r"[^.\[]*", path)[0] or path  # type: ignore[index]
            errors.setdefault(field, []).append(f"{path} {problem}.")
        if errors:
            raise ParseError(errors)
        return data


class RejectUnstorableParameters:
    """400 for a query or form parameter holding a NUL character, before any view runs."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        sources = [request.GET, request.POST] if _is_form(request) else [request.GET]
        for source in sources:
            for name, values in source.lists():
                for text in (name, *values):
                    if (problem := text_problem(text)) is not None:
                        label = _printable(name)
                        message = f"Parameter {label!r} {problem}."
                        return JsonResponse({label: [message]}, status=400)
        return self.get_response(request)


def _is_form(request: HttpRequest) -> bool:
    content_type = request.content_type or ""
    return request.method == "POST" and content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    )


def _printable(name: str) -> str:
    return name.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
