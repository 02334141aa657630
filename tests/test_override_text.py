"""litforge.runtime.override_text writes values that Hydra's own override parser reads back unchanged."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from litforge.runtime.override_text import override_text

VALUES = [
    None,
    True,
    False,
    0,
    -7,
    3.5,
    1e-4,
    -2.5e10,
    float("inf"),
    "plain",
    "path/to/file.ckpt",
    "a b",
    "it's",
    'say "hi"',
    "both ' and \"",
    "a,b",
    "k=v",
    "[x]",
    "{x}",
    "${seed}",
    "1",
    "3.5",
    "true",
    "null",
    "",
    " lead",
    "tab\there",
    "back\\slash",
    "ends with \\",
    "file://C:\\dir\\",
    "ümlaut",
    "a\\'b",
    "\\",
    "x'\"\\",
    [1, "a b", None, [2.5, "x"]],
    [],
    {"lr": 0.1, "name": "a b", "nested": {"k": [1, 2]}},
    {"_target_": "litforge.callbacks.optuna_pruning.OptunaPruning", "trial_number": 3, "storage": "sqlite:///x.db"},
    ["file:///work/my project/conf", "pkg://litforge.conf"],
]


@pytest.mark.parametrize("value", VALUES, ids=[repr(v) for v in VALUES])
def test_hydra_reads_the_text_back_as_the_same_value(value):
    parsed = OverridesParser.create().parse_override(f"key={override_text(value)}").value()
    assert parsed == value and type(parsed) is type(value), (override_text(value), parsed)


def test_a_value_without_override_text_is_refused():
    with pytest.raises(TypeError, match="object has no Hydra override text"):
        override_text(object())
