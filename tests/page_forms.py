"""What a browser would post back for a page's form, unchanged: for tests of edit forms."""

from __future__ import annotations

from html.parser import HTMLParser


class _FormValues(HTMLParser):
    """Collects <input> values (hidden ones included), each <select>'s selected option and
    each <textarea>'s text, by name. Buttons and unchecked boxes post nothing."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = {key: value or "" for key, value in attrs}
        name = attr.get("name")
        if tag == "input" and name:
            kind = attr.get("type", "text")
            if kind in {"submit", "button", "image", "reset"}:
                return
            if kind in {"checkbox", "radio"} and "checked" not in attr:
                return
            self.values[name] = attr.get("value", "on" if kind == "checkbox" else "")
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and "selected" in attr:
            self.values[self._select] = attr.get("value", "")
        elif tag == "textarea" and name:
            self._textarea = name
            self.values[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea:
            # Browsers drop the one newline that may follow <textarea>.
            text = self.values[self._textarea] + data
            self.values[self._textarea] = text.removeprefix("\n")


def form_values(page: str) -> dict[str, str]:
    """Name → value of every field the page's forms would post as shown."""
    parser = _FormValues()
    parser.feed(page)
    return parser.values
