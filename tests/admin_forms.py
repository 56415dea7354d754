"""What a browser submits of an admin page's form, for tests that drive the admin as staff do."""

from html.parser import HTMLParser


class FormFields(HTMLParser):
    """A form's inputs (checkboxes and radios only when checked), textareas and each select's
    chosen option."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []
        self._select: str | None = None
        self._chosen: str | None = None
        self._textarea: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "input" and attributes.get("name") and self._submitted(attributes):
            self.fields.append((attributes["name"], attributes.get("value", "")))
        elif tag == "textarea":
            self._textarea, self._text = attributes["name"], []
        elif tag == "select":
            self._select, self._chosen = attributes["name"], None
        elif tag == "option" and self._select is not None and self._first_or_selected(attributes):
            self._chosen = attributes.get("value", "")

    @staticmethod
    def _submitted(attributes: dict[str, str]) -> bool:
        kind = attributes.get("type", "text")
        return kind != "submit" and (kind not in ("checkbox", "radio") or "checked" in attributes)

    def _first_or_selected(self, attributes: dict[str, str]) -> bool:
        return self._chosen is None or "selected" in attributes

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea" and self._textarea is not None:
            self.fields.append((self._textarea, "".join(self._text).removeprefix("\n")))
            self._textarea = None
        elif tag == "select" and self._select is not None:
            self.fields.append((self._select, self._chosen or ""))
            self._select = None


def submitted(page: str, form_start: str = "<form") -> dict[str, list[str]]:
    """The fields of the first form from `form_start` on, as the test client posts them."""
    parser = FormFields()
    parser.feed(page[page.index(form_start) :])
    body: dict[str, list[str]] = {}
    for name, value in parser.fields:
        body.setdefault(name, []).append(value)
    return body
