"""Text PostgreSQL cannot store is refused at the door, naming where it was.

PostgreSQL rejects a NUL character in text (and psycopg2 cannot encode a lone UTF-16
surrogate, which JSON's "\\ud800" escape decodes to): reaching a query, either was a 500.
Every request's query and form parameters and every API JSON body are checked once here,
so no view has to remember to. A JSON body nested deeper than any API takes is refused here
too: `json.load` recurses once per level and would otherwise end in a RecursionError (a 500);
so is an object that names a key twice, which `json.load` would settle by keeping the last
value without a word (`{"env": {"A": "1", "A": "2"}}` ran with A=2).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json

from config.api_middleware import API_PREFIX

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


class _RepeatedKeys(dict):  # type: ignore[type-arg]
    """A JSON object that named some of its keys more than once (`repeated`)."""

    repeated: list[str]


def _object_from_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.load`'s object_pairs_hook: a dict, marked when a key came more than once."""
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    seen: set[str] = set()
    marked = _RepeatedKeys(obj)
    marked.repeated = []
    for key, _ in pairs:
        if key in seen and key not in marked.repeated:
            marked.repeated.append(key)
        seen.add(key)
    return marked


def _problems(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        if (problem := text_problem(value)) is not None:
            yield path, problem
    elif isinstance(value, dict):
        for key in getattr(value, "repeated", ()):
            yield (f"{path}.{key}" if path else str(key)), "is given more than once"
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
    """DRF's JSON parser, refusing strings PostgreSQL cannot store and repeated keys
    (400 naming the field)."""

    def parse(self, stream, media_type=None, parser_context=None):  # type: ignore[no-untyped-def]
        # DRF's JSONParser.parse, with the hook that sees each object's keys as given.
        encoding = get_encoding(parser_context or {})
        try:
            data = json.load(
                codecs.getreader(encoding)(stream),
                parse_constant=json.strict_constant if self.strict else None,
                object_pairs_hook=_object_from_pairs,
            )
        except RecursionError as exc:
            raise ParseError(TOO_DEEP) from exc
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from exc
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
    """400 for a query or form parameter holding a NUL character, before any view runs:
    JSON under /api/, an HTML page naming the field for a person's form or link."""

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
                        if request.path.startswith(API_PREFIX):
                            return JsonResponse({label: [message]}, status=400)
                        return _html_refusal(request, label, problem)
        return self.get_response(request)


def _html_refusal(request: HttpRequest, field: str, problem: str) -> HttpResponse:
    # Rendered without a request: this runs before the session and user are loaded, and
    # the page needs neither (a bare page, with a way back).
    html = render_to_string("bad_parameter.html", {"field": field, "problem": problem})
    return HttpResponse(html, status=400)


def _is_form(request: HttpRequest) -> bool:
    # The API reads JSON only (its parser guards the text itself) and answers a form body
    # with 415; reading request.POST here would consume a multipart body before DRF sees it.
    if request.path.startswith(API_PREFIX):
        return False
    content_type = request.content_type or ""
    return request.method == "POST" and content_type in (
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    )


def _printable(name: str) -> str:
    return name.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
