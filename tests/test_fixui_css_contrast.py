"""WCAG contrast of the colours static/css/gpulab.css gives its badges, fields and focus ring,
read from the stylesheet itself so a new or changed badge colour is checked too.

Text (badges) needs 4.5:1 against its background (WCAG 1.4.3); a field's border and the
focus indicator, 3:1 against the white they sit on (1.4.11).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = (Path(__file__).resolve().parents[1] / "static" / "css" / "gpulab.css").read_text()
WHITE = "#ffffff"
# A badge is one of these classes: the job states, the node states and the "check" mark.
BADGE = re.compile(r"^\.(state|state-[\w-]+|node-state-[\w-]+|badge-check)$")


def _rules() -> list[tuple[list[str], dict[str, str]]]:
    text = re.sub(r"/\*.*?\*/", "", CSS, flags=re.DOTALL)
    rules = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", text):
        declarations = {}
        for declaration in body.split(";"):
            if ":" in declaration:
                name, value = declaration.split(":", 1)
                declarations[name.strip()] = value.strip()
        rules.append(([s.strip() for s in selectors.split(",")], declarations))
    return rules


RULES = _rules()
VARIABLES = next(d for selectors, d in RULES if selectors == [":root"])


def _colour(value: str) -> str:
    """A colour of the stylesheet as #rrggbb (var() resolved, #rgb widened)."""
    if match := re.fullmatch(r"var\((--[\w-]+)\)", value):
        value = VARIABLES[match.group(1)]
    match = re.search(r"#([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b", value)
    assert match, f"no colour in {value!r}"
    digits = match.group(1)
    if len(digits) == 3:
        digits = "".join(c * 2 for c in digits)
    return "#" + digits.lower()


def contrast(first: str, second: str) -> float:
    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    light, dark = sorted((luminance(first), luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def _badges() -> list[pytest.param]:
    # Every badge also has the class "state" (its background unless it sets one) and the
    # page's text colour unless it sets one.
    base = next(d for selectors, d in RULES if selectors == [".state"])
    cases = []
    for selectors, declarations in RULES:
        for selector in selectors:
            if BADGE.match(selector):
                text = _colour(declarations.get("color", "var(--fg)"))
                background = _colour(declarations.get("background", base["background"]))
                cases.append(pytest.param(text, background, id=selector))
    return cases


def test_the_stylesheet_has_the_badges_this_test_reads():
    names = {case.id for case in _badges()}
    assert {".state-pending", ".node-state-suspect", ".node-state-draining"} <= names


@pytest.mark.parametrize(("text", "background"), _badges())
def test_every_badges_text_is_readable_on_its_background(text, background):
    assert contrast(text, background) >= 4.5, f"{text} on {background}"


def test_a_fields_border_stands_out_from_the_white_page():
    fields = next(d for selectors, d in RULES if selectors[:3] == ["input", "select", "textarea"])
    assert contrast(_colour(fields["border"]), WHITE) >= 3


def test_the_focus_ring_is_visible_on_white_and_on_the_dark_top_bar():
    focus = next(d for selectors, d in RULES if "a:focus-visible" in selectors)
    rings = [_colour(focus[name]) for name in ("outline", "box-shadow") if name in focus]
    for background in (WHITE, _colour("var(--fg)")):  # cards, and the top bar (#1d2430)
        assert max(contrast(ring, background) for ring in rings) >= 3, background
