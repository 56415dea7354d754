"""docs/leaked-keys.md gives scanners a regular expression and a checksum in Python: both agree
with the keys the service mints and the rule it checks."""

import re
from pathlib import Path

from accounts import keys

PAGE = Path(__file__).resolve().parents[2] / "docs" / "leaked-keys.md"


def documented_scanner() -> dict[str, object]:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    namespace: dict[str, object] = {}
    exec(code, namespace)  # our own documentation page
    return namespace


def test_the_documented_scanner_finds_minted_keys_in_text():
    found = documented_scanner()["gshost_keys"]
    minted = [keys.new_key_string(keys.new_key_id()) for _ in range(200)]
    text = "\n".join(f"API_KEY={key} # set on deploy" for key in minted)
    assert found(text) == minted  # type: ignore[operator]


def test_the_documented_scanner_agrees_with_the_service_on_look_alikes():
    found = documented_scanner()["gshost_keys"]
    key = keys.new_key_string(keys.new_key_id())
    look_alikes = [key[:-1] + ("0" if key[-1] != "0" else "1"), key[:20] + "x" + key[21:]]
    for candidate in look_alikes:
        assert (found(candidate) == [candidate]) == (keys.parse_key(candidate) is not None)  # type: ignore[operator]
    assert found("x" + key) == [] and found(key + "x") == []


def test_the_page_shows_the_same_expression_everywhere():
    expressions = set(re.findall(r"\\bgsk_[^\s`\"]*\\b", PAGE.read_text()))
    assert expressions == {r"\bgsk_[0-9A-Za-z]{8}_[0-9A-Za-z]{43}\b"}
