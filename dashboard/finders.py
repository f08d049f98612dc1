"""Serve the plotly.js that the installed `plotly` package ships, as a static file.

Labs often run offline, so pages never load plotly.js from a CDN. This finder exposes
exactly one file of the package, `vendor/plotly.min.js`, to runserver, WhiteNoise and
`collectstatic`, so its version always matches the Python package that built the figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_JS_NAME = "plotly.min.js"
PLOTLY_JS_STATIC_PATH = f"vendor/{PLOTLY_JS_NAME}"


class PlotlyJsFinder(BaseFinder):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=Path(plotly.__file__).parent / "package_data")
        self.storage.prefix = "vendor"  # collectstatic copies it to STATIC_ROOT/vendor/

    def check(self, **kwargs) -> list:  # type: ignore[no-untyped-def]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs) -> str | list[str]:  # type: ignore[no-untyped-def, override]
        if path != PLOTLY_JS_STATIC_PATH:
            return []  # Django's own finders answer "not found" with an empty list
        found = self.storage.path(PLOTLY_JS_NAME)
        return [found] if find_all else found

    def list(self, ignore_patterns) -> Iterator[tuple[str, FileSystemStorage]]:  # type: ignore[no-untyped-def]
        yield PLOTLY_JS_NAME, self.storage
