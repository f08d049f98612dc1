"""Keyboard only: the skip link, the navigation, and submitting a job without a mouse."""

from __future__ import annotations

from accounts.models import User
from cluster.models import Device
from jobs.models import Job
from tests.browser.conftest import Ui

# What has focus, in words: "a:Submit", "input#id_image", "main#main".
FOCUSED_JS = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return "body";
  const tag = el.tagName.toLowerCase();
  if (tag === "a" || tag === "button") return `${tag}:${el.textContent.trim()}`;
  return el.id ? `${tag}#${el.id}` : tag;
}"""
MAX_TABS = 60


def focused(ui: Ui) -> str:
    return ui.page.evaluate(FOCUSED_JS)


def tab_to(ui: Ui, target: str) -> list[str]:
    """Press Tab until `target` (as `focused` names it) has focus; return the path taken."""
    path = []
    for _ in range(MAX_TABS):
        ui.page.keyboard.press("Tab")
        path.append(focused(ui))
        if path[-1] == target:
            return path
    raise AssertionError(f"{target} never got focus in {MAX_TABS} Tabs; focus went {path}")


def test_skip_link_then_tab_to_submit_and_submit_a_job_by_keyboard(
    ui: Ui, owner: User, small_cluster: list[Device]
) -> None:
    ui.login("alice")
    ui.goto("dashboard:queue", step="queue")

    # The first Tab lands on the skip link, and Enter moves focus into the content.
    ui.page.keyboard.press("Tab")
    assert focused(ui) == "a:Skip to content"
    assert ui.page.locator("a.skip").is_visible(), "a focused skip link must be visible"
    ui.shot("skip-link-focused")
    ui.page.keyboard.press("Enter")
    assert ui.page.url.endswith("#main")
    assert focused(ui) == "main#main"

    # From the top of the page, Tab walks the navigation in order to "Submit"; Enter follows.
    ui.goto("dashboard:queue", step="queue-again")
    path = tab_to(ui, "a:Submit")
    assert path.index("a:Jobs") < path.index("a:Submit"), path
    ui.shot("submit-link-focused")
    with ui.page.expect_navigation():
        ui.page.keyboard.press("Enter")
    assert ui.page.url == ui.url("jobs:submit")
    ui.shot("submit-form")

    # The form, by keyboard alone: Tab to each field, type, and press Enter on the button.
    tab_to(ui, "input#id_name")
    ui.page.keyboard.type("keyboard-job")
    ui.page.keyboard.press("Tab")
    assert focused(ui) == "input#id_image"
    ui.page.keyboard.type("pytorch/pytorch:2.4.0")
    ui.page.keyboard.press("Tab")
    assert focused(ui) == "input#id_command"
    ui.page.keyboard.type("python train.py --lr 0.1")
    ui.page.keyboard.press("Tab")
    assert focused(ui) == "input#id_interactive"  # left unticked: a batch job
    ui.page.keyboard.press("Tab")
    assert focused(ui) == "input#id_num_gpus"
    ui.page.keyboard.press("ControlOrMeta+A")
    ui.page.keyboard.type("2")
    tab_to(ui, "button:Submit")
    ui.shot("form-filled")
    with ui.page.expect_navigation():
        ui.page.keyboard.press("Enter")
    ui.shot("submitted")

    job = Job.objects.get(owner=owner, name="keyboard-job")
    assert ui.page.url == ui.url("jobs:detail", job_id=job.pk)
    assert job.image == "pytorch/pytorch:2.4.0"
    assert job.command == ["python", "train.py", "--lr", "0.1"]
    assert job.num_gpus == 2
