"""Tool names as the model sees them: `<server>__<tool>`, valid for every provider
(`^[a-zA-Z0-9_-]{1,64}$`), distinct for distinct tools of one server."""
from __future__ import annotations

from seats.tools.builtins import BUILTINS
from seats.tools.names import is_valid, tool_name


def test_a_tool_is_named_by_its_server_and_its_own_name():
    assert tool_name("notes", "append") == "notes__append"
    assert tool_name("my-tracker", "issues.search") == "my-tracker__issues_search"
    assert tool_name("wiki", "pages/get page") == "wiki__pages_get_page"


def test_a_long_name_stays_within_64_characters_and_two_long_tools_stay_two():
    server = "s" * 32
    first, second = tool_name(server, "a" * 60 + "one"), tool_name(server, "a" * 60 + "two")
    assert len(first) == len(second) == 64 and first != second
    assert is_valid(first) and is_valid(second)


def test_every_name_is_valid_for_both_providers_and_no_builtin_can_meet_a_servers():
    for server, tool in (("x", "ünïcode tool"), ("a-b", "*"), ("n", "")):
        assert is_valid(tool_name(server, tool))
    assert all(is_valid(name) and "__" not in name for name in BUILTINS)
