"""managedNodeSelectors read exactly as Volcano's scheduler reads --node-selector.

Table transcribed from volcano-sh/volcano pkg/scheduler/cache/cache.go `updateNodeSelectors`
(kept entries) and pkg/scheduler/cache/event_handlers.go `nodeCanAddCache` (matching nodes)."""

from __future__ import annotations

import pytest

from tests.upstream import go_function, volcano_file
from volcano_guard.base.jsonbody import shown
from volcano_guard.base.node_selectors import is_managed, kept_selector, selector_set
from volcano_guard.webhook.config import ConfigError, config_from_dict

# entry -> what updateNodeSelectors stores (None: skipped by its `continue`s)
KEPT = [
    ("volcano.sh/role:train", "volcano.sh/role:train"),
    ("", None),  # nodeSelectorLabelLen <= 0
    ("no-colon", None),  # index < 0
    ("key:", None),  # index >= len-1: ':' is the last character
    ("key: ", "key:"),  # a value of spaces: kept, trimmed to ""
    (" key : value ", "key:value"),  # key and value trimmed
    ("a:b:c", "a:b:c"),  # the first ':' splits; the value keeps the rest
    (":x", ":x"),  # an empty key is kept (and matches no label)
    ("::", "::"),  # index 0 < len-1: key "", value ":"
]


@pytest.mark.parametrize(("entry", "stored"), KEPT)
def test_an_entry_is_kept_and_trimmed_as_volcano_keeps_it(entry, stored):
    assert kept_selector(entry) == stored


@pytest.mark.parametrize(
    ("labels", "entries", "managed"),
    [
        ({}, [], True),  # no selectors: every node
        ({}, ["key:"], True),  # nothing kept: every node
        ({"pool": "a"}, ["no-colon", "key:"], True),
        ({"volcano.sh/role": "train"}, ["volcano.sh/role:train"], True),
        ({"volcano.sh/role": "serve"}, ["volcano.sh/role:train", "volcano.sh/role:serve"], True),
        ({"volcano.sh/role": "serve"}, ["volcano.sh/role:train"], False),
        ({"volcano.sh/role": "train"}, [" volcano.sh/role : train "], True),
        ({"key": ""}, ["key: "], True),  # an empty label value
        ({"key": ""}, ["key:"], True),  # ignored: every node
        ({"key": "x"}, ["key: ", "other:y"], False),
        ({"a": "b:c"}, ["a:b:c"], True),
        ({"pool": "a"}, [":x"], False),  # kept, matches nothing
    ],
)
def test_a_node_is_managed_as_node_can_add_cache_decides(labels, entries, managed):
    assert is_managed(labels, selector_set(entries)) is managed


@pytest.mark.parametrize("entry", ["key:", "no-colon", "pool:a,pool:b"])
def test_config_refuses_an_entry_volcano_would_ignore_or_split_naming_it(entry):
    data = {"policies": {"nodeName": {"managedNodeSelectors": ["pool:a", entry]}}}
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert str(info.value).startswith("policies.nodeName.managedNodeSelectors[1]: ")
    assert shown(entry) in str(info.value)  # the entry, quoted as messages quote values


@pytest.mark.parametrize("entry", [entry for entry, stored in KEPT if stored is not None])
def test_config_accepts_every_entry_volcano_keeps_with_its_meaning(entry):
    config = config_from_dict({"policies": {"nodeName": {"managedNodeSelectors": [entry]}}})
    assert config.policies.nodeName.managed_selectors == {kept_selector(entry)}


def test_volcanos_source_still_reads_node_selectors_this_way():
    cache = go_function(volcano_file("pkg/scheduler/cache/cache.go"), "updateNodeSelectors")
    for line in (
        'index := strings.Index(nodeSelectorLabel, ":")',
        "if index < 0 || index >= (nodeSelectorLabelLen-1) {",
        "strings.TrimSpace(nodeSelectorLabel[:index])",
        "strings.TrimSpace(nodeSelectorLabel[index+1:])",
        'key := nodeSelectorLabelName + ":" + nodeSelectorLabelValue',
    ):
        assert line in cache
    handlers = volcano_file("pkg/scheduler/cache/event_handlers.go")
    can_add = go_function(handlers, "nodeCanAddCache")
    for line in (
        "if len(sc.nodeSelectorLabels) == 0 {",
        'key := labelName + ":" + labelValue',
        "if _, ok := sc.nodeSelectorLabels[key]; ok {",
    ):
        assert line in can_add
    options = volcano_file("cmd/scheduler/app/options/options.go")
    assert 'fs.StringSliceVar(&s.NodeSelector, "node-selector"' in options  # splits on commas
