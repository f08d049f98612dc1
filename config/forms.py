"""Form building blocks shared by the apps' pages and the Django admin."""

from __future__ import annotations

from typing import Any

from django import forms


class ConcurrentEditForm(forms.ModelForm):
    """A ModelForm of a row that several admins may edit at once (optimistic concurrency).

    Each input carries the value the page showed in a hidden `initial-<name>` input
    (Django's `show_hidden_initial`), so that
    1. `edited_fields()` are the fields this admin changed from what they saw, rather than
       every field that differs from the row now: saving those would put back what another
       admin changed meanwhile, and audit it as this admin's change;
    2. `clean()` refuses a field this admin changed that someone else changed too since
       the page was shown (the row as it is when the form is built, `instance`), naming
       the field and its new value. That field's hidden value becomes the new one, so
       saving the same form again replaces it deliberately.
    A post without the hidden values (a script, a page older than this form) compares
    with the row as it is now.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.show_hidden_initial = True

    def _shown(self, name: str) -> Any:
        """What the page showed for field `name`, as posted (text), or None if not posted."""
        bound = self[name]
        if bound.html_initial_name not in self.data:
            return None
        return self._widget_data_value(bound.field.hidden_widget(), bound.html_initial_name)

    def _edited(self, name: str) -> bool:
        field, bound, shown = self.fields[name], self[name], self._shown(name)
        if shown is None:
            return field.has_changed(self.initial.get(name), bound.data)
        try:
            shown_value = field.to_python(shown)
        except forms.ValidationError:
            return True  # a tampered hidden value: treat the input as changed
        return field.has_changed(shown_value, bound.data)

    def edited_fields(self) -> list[str]:
        """The fields this admin changed from what the page showed them, in form order."""
        return [name for name in self.fields if self._edited(name)]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for name in self.edited_fields():
            field, shown = self.fields[name], self._shown(name)
            if shown is None or name in self.errors:
                continue
            current = self.initial.get(name)
            if not field.has_changed(current, shown):
                continue  # nobody else changed it
            if not field.has_changed(current, self[name].data):
                continue  # someone else made the same change: nothing left to save
            now_text = field.prepare_value(current)
            now_text = "" if now_text is None else str(now_text)
            self.add_error(
                name,
                f"Someone else changed this to “{now_text or '(empty)'}” since this page was "
                "opened; nothing was saved. Check the new value, then save again to replace "
                "it with yours.",
            )
            # Saving again is now a deliberate choice over the value just shown.
            self.data = self.data.copy()
            self.data[self[name].html_initial_name] = now_text
        return cleaned
