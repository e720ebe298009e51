import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from volcano_guard.base.jsonbody import shown
from volcano_guard.cli import main
from volcano_guard.webhook.config import (
    Config,
    ConfigError,
    config_from_dict,
    load_config,
    parse_config,
)


def test_no_file_means_every_safe_default():
    config = load_config(None)
    assert config == Config()
    assert config.volcanoSchedulerNames == ("volcano",)
    assert config.failClosed is True
    assert config.policies.resourceRequests.mode == "enforce"
    assert config.policies.resourceRequests.resources == ("cpu", "memory")
    assert config.policies.nodeName.bindingGuard.mode == "audit"


def test_empty_file_means_defaults(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("")
    assert load_config(path) == Config()


def test_reads_the_design_example(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(
        """
volcanoSchedulerNames: [volcano, volcano-batch]
failClosed: false
policies:
  resourceRequests:
    mode: warn
    resources: [cpu, memory, nvidia.com/gpu]
    defaults: {cpu: 100m, memory: 128Mi}
  nodeName:
    mode: enforce
    action: rewrite
    managedNodeSelectors: ["volcano.sh/role:train"]
    bindingGuard: {mode: audit, allowedBinders: [system:serviceaccount:x:y]}
  podGroups:
    stampGenerationId: true
    deleteGuard: {mode: enforce, exemptUsers: [], exemptGroups: []}
  sidecarInjection: {mode: enforce, image: volcano-guard:latest, nativeSidecar: true, port: 8001}
"""
    )
    config = load_config(path)
    assert config.volcanoSchedulerNames == ("volcano", "volcano-batch")
    assert config.failClosed is False
    assert config.policies.resourceRequests.defaults == {"cpu": "100m", "memory": "128Mi"}
    assert config.policies.nodeName.action == "rewrite"
    assert config.policies.nodeName.exemptNamespaces == ("kube-system",)


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"policies": {"resourceRequests": {"mode": "block"}}}, "policies.resourceRequests.mode"),
        ({"policies": {"resourceRequests": {"mdoe": "warn"}}}, "policies.resourceRequests.mdoe"),
        ({"failClosed": "yes"}, "failClosed"),
        ({"volcanoSchedulerNames": "volcano"}, "volcanoSchedulerNames"),
        ({"volcanoSchedulerNames": []}, "volcanoSchedulerNames"),
        ({"volcanoSchedulerNames": [""]}, "volcanoSchedulerNames[0]"),
        (
            {"policies": {"resourceRequests": {"defaults": {"cpu": "lots"}}}},
            "policies.resourceRequests.defaults.cpu",
        ),
        (
            {"policies": {"resourceRequests": {"defaults": {"cpu": "-1"}}}},
            "policies.resourceRequests.defaults.cpu",
        ),
        (
            {"policies": {"nodeName": {"managedNodeSelectors": ["no-colon"]}}},
            "policies.nodeName.managedNodeSelectors[0]",
        ),
        ({"policies": {"sidecarInjection": {"port": 0}}}, "policies.sidecarInjection.port"),
        ({"maxRequestBytes": True}, "maxRequestBytes"),
        ({"policies": []}, "policies"),
        ([1, 2], "config"),
        (
            {"policies": {"sidecarInjection": {"metricsPort": 65536}}},
            "policies.sidecarInjection.metricsPort",
        ),
        (
            {"policies": {"sidecarInjection": {"flushInterval": 0}}},
            "policies.sidecarInjection.flushInterval",
        ),
        (
            {"policies": {"sidecarInjection": {"limits": {"memory": "lots"}}}},
            "policies.sidecarInjection.limits.memory",
        ),
        (
            {"policies": {"resourceRequests": {"defaults": {"": "1"}}}},
            "policies.resourceRequests.defaults",
        ),
        ({"audit": {"orphanGracePeriod": "5 minutes"}}, "audit.orphanGracePeriod"),
        ({"policies": {"nodeName": {"exemptUsers": None}}}, "policies.nodeName.exemptUsers"),
    ],
)
def test_bad_value_is_refused_naming_its_key(data, key):
    with pytest.raises(ConfigError) as info:
        config_from_dict(data)
    assert str(info.value).startswith(key), str(info.value)


def test_unquoted_numeric_default_is_kept_as_a_quantity():
    config = config_from_dict({"policies": {"resourceRequests": {"defaults": {"cpu": 1}}}})
    assert config.policies.resourceRequests.defaults == {"cpu": "1"}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("policies: {resourceRequests: {mode: loud}}", "policies.resourceRequests.mode"),
        ("policies: [unclosed", "line 1: not YAML"),
        ("policies: {queues: {mode: bogus}}", 'policies.queues.mode: a string "bogus" is not'),
        (  # a full image reference never matches: the audit compares the name alone
            'audit: {volcanoImages: {"docker.io/me/vc-sched:v1.10.0": scheduler}}',
            "audit.volcanoImages: each key: expected an image name without registry, tag or "
            'digest (such as vc-scheduler); the keys are "docker.io/me/vc-sched:v1.10.0"',
        ),
    ],
)
def test_cli_exits_2_naming_the_bad_key(tmp_path, capsys, text, needle):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    assert main(["check", "-f", str(path), "--config", str(path)]) == 2
    assert needle in capsys.readouterr().err


def test_cli_exits_2_for_a_missing_config_file(tmp_path, capsys):
    webhook = ["webhook", "--config", str(tmp_path / "nope.yaml"), "--tls-cert", "x"]
    assert main([*webhook, "--tls-key", "y"]) == 2
    assert "nope.yaml: no such file" in capsys.readouterr().err


def test_unquoted_off_is_the_mode_off_not_a_boolean(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("policies:\n  nodeName:\n    mode: off\n    bindingGuard: {mode: off}\n")
    config = load_config(path)
    assert config.policies.nodeName.mode == "off"
    assert config.policies.nodeName.bindingGuard.mode == "off"
    with pytest.raises(ConfigError, match=r"policies\.resourceRequests\.mode"):
        config_from_dict({"policies": {"resourceRequests": {"mode": True}}})


def test_the_guards_own_namespace_is_exempt_from_node_name():
    from volcano_guard.webhook.config import exempt_own_namespace

    config = exempt_own_namespace(config_from_dict({}), "volcano-guard")
    assert config.policies.nodeName.exemptNamespaces == ("kube-system", "volcano-guard")
    assert exempt_own_namespace(config, "volcano-guard") == config
    assert exempt_own_namespace(config, None) == config


def test_own_namespace_comes_from_pod_namespace(monkeypatch):
    from volcano_guard.base.kubeconfig import own_namespace

    monkeypatch.setenv("POD_NAMESPACE", "guard-ns")
    assert own_namespace() == "guard-ns"


def test_an_unknown_key_is_named_with_the_keys_known_there():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"policies": {"podGroups": {"deleteGaurd": {}}}})
    assert str(info.value) == (
        "policies.podGroups.deleteGaurd: unknown key (known here: annotatePodGeneration, "
        "deleteGuard, stampGenerationId)"
    )


def test_a_wrong_value_is_shown_beside_what_was_expected():
    with pytest.raises(ConfigError) as info:
        config_from_dict({"failClosed": "yes", "policies": {}})
    assert str(info.value) == 'failClosed: expected true or false, got a string "yes"'
    with pytest.raises(ConfigError) as info:
        config_from_dict({"policies": {"nodeName": {"action": "block"}}})
    assert str(info.value) == (
        'policies.nodeName.action: a string "block" is not one of deny | rewrite'
    )


def test_a_section_written_empty_takes_its_defaults(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("policies:\n  nodeName:\n    # mode: warn\n  podGroups: {deleteGuard: }\n")
    assert load_config(path) == Config()


def test_yaml_yes_and_no_are_text_not_booleans(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("failClosed: no\n")
    with pytest.raises(ConfigError, match='failClosed: expected true or false, got a string "no"'):
        load_config(path)


# Keys as operators mistype them, and as msgspec's messages could be confused by.
KEYS = st.text(max_size=6) | st.sampled_from(["x - at `y`", "a.b", "k[0]", "in `$", " ", ""])


def _config_shaped(struct: type = Config) -> st.SearchStrategy:
    """Mappings with the config's own keys (and a stranger), holding anything at any depth."""
    leaves = (
        st.none()
        | st.booleans()
        | st.integers(-2, 70000)
        | st.floats(allow_nan=True)
        | st.text(max_size=12)
        | st.sampled_from(["off", "enforce", "5m", "100m", "a:b", "-1"])
    )
    anything = st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(KEYS | st.integers(), inner, max_size=3)
        ),
        max_leaves=8,
    )
    fields: dict[str, st.SearchStrategy] = {}
    for field in msgspec.structs.fields(struct):
        kind = field.type
        nested = isinstance(kind, type) and issubclass(kind, msgspec.Struct)
        fields[field.name] = (_config_shaped(kind) | anything) if nested else anything
    strangers = st.dictionaries(KEYS, anything, max_size=2)
    return st.fixed_dictionaries({}, optional=fields) | strangers | anything


@settings(max_examples=200, deadline=None)
@given(_config_shaped())
def test_any_input_is_a_config_or_a_config_error_naming_a_key(data):
    try:
        config_from_dict(data)
    except ConfigError as exc:
        message = str(exc)
        keys = (
            {str(key) for key in data} | {shown(key) for key in data}
            if isinstance(data, dict)
            else set()
        )
        assert message.startswith("config: ") or any(
            message.startswith((f"{key}: ", f"{key}.", f"{key}[")) for key in keys
        ), message


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("audit: {orphanGracePeriod: 99999999999999d}", "audit.orphanGracePeriod"),
        ("a: " + "[" * 3000 + "]" * 3000, "nests too deeply"),
    ],
)
def test_an_overflowing_duration_or_deep_nesting_is_a_config_error(tmp_path, text, needle):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_config(path)


# The policies off by default, and the config that turns each on.
ON_WHEN_ASKED: dict[str, dict[str, Any]] = {
    "podGroupGeneration": {"policies": {"podGroups": {"annotatePodGeneration": True}}}
}


@pytest.mark.parametrize(
    "policy",
    __import__("volcano_guard.webhook.evaluation", fromlist=["POLICIES"]).POLICIES,
    ids=lambda p: p.name,
)
def test_the_setting_each_policy_names_to_turn_it_off_does(policy):
    from volcano_guard.webhook.config import read_yaml

    path, _, value = policy.off.partition(": ")
    data = tree = {}
    *parents, leaf = path.split(".")
    for key in parents:
        tree = tree.setdefault(key, {})
    tree[leaf] = read_yaml(value)
    turned_on = ON_WHEN_ASKED.get(policy.name, {})
    assert policy.mode(config_from_dict(turned_on)) != "off"
    assert policy.mode(config_from_dict(data)) == "off"


def test_the_pods_podgroup_generation_is_off_unless_asked_for():
    """It alone needs the webhook for a pod joining a PodGroup (docs/decisions/registrations.md)."""
    from volcano_guard.webhook.evaluation import enabled_policies

    assert "podGroupGeneration" not in [p.name for p in enabled_policies(config_from_dict({}))]
    on = config_from_dict(ON_WHEN_ASKED["podGroupGeneration"])
    assert "podGroupGeneration" in [p.name for p in enabled_policies(on)]
    stamps_off = {
        "policies": {"podGroups": {"annotatePodGeneration": True, "stampGenerationId": False}}
    }
    assert "podGroupGeneration" not in [
        p.name for p in enabled_policies(config_from_dict(stamps_off))
    ]


SHIPPED_CONFIG_MAP = Path(__file__).parents[2] / "deploy" / "base" / "config.yaml"


def test_a_config_map_manifest_is_read_from_its_config_yaml_key(tmp_path):
    manifest = yaml.safe_load(SHIPPED_CONFIG_MAP.read_text())
    shipped = manifest["data"]["config.yaml"]
    assert "failClosed: true" in shipped
    manifest["data"]["config.yaml"] = shipped.replace("failClosed: true", "failClosed: false")
    path = tmp_path / "config-map.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert load_config(path).failClosed is False


def test_manifests_from_the_config_map_equal_those_from_its_config(tmp_path, capsys):
    inner = tmp_path / "config.yaml"
    inner.write_text(yaml.safe_load(SHIPPED_CONFIG_MAP.read_text())["data"]["config.yaml"])
    assert main(["manifests", "--config", str(inner)]) == 0
    from_file = capsys.readouterr().out
    assert main(["manifests", "--config", str(SHIPPED_CONFIG_MAP)]) == 0
    assert capsys.readouterr().out == from_file


CONFIG_MAP_WITHOUT_KEY = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {x: y}\n"


@pytest.mark.parametrize(
    "command",
    [
        ["manifests"],
        ["check", "-f", "{config}"],
        ["audit", "--kubeconfig", "{config}"],
        ["webhook", "--tls-cert", "x", "--tls-key", "y"],
    ],
    ids=lambda command: command[0],
)
def test_every_command_names_the_file_and_key_of_a_config_map_without_its_config(
    tmp_path, capsys, command
):
    path = tmp_path / "cm.yaml"
    path.write_text(CONFIG_MAP_WITHOUT_KEY)
    argv = [part.format(config=path) for part in command]
    assert main([*argv, "--config", str(path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert str(path) in line and "no data key 'config.yaml'" in line


def test_a_bad_config_inside_a_config_map_is_named_by_its_file_and_key(tmp_path):
    path = tmp_path / "cm.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
        'data: {config.yaml: "policies: [unclosed"}\n'
    )
    with pytest.raises(ConfigError, match=r"cm.yaml key config.yaml line 1: not YAML"):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('volcanoSchedulerNames: ["\\ud800"]', "volcanoSchedulerNames[0]"),
        ('policies: {resourceRequests: {defaults: {"a\\udfffb": 1}}}', "a\udfffb"),
        ('policies: {sidecarInjection: {image: "x\\ud83d"}}', "sidecarInjection.image"),
    ],
)
def test_half_of_a_surrogate_pair_is_a_config_error_naming_where(text, where):
    """YAML's \\ud800 escape makes a string no CEL literal, JSON or UTF-8 can carry: refused
    when read, never a traceback when the policies are rendered."""
    with pytest.raises(ConfigError, match="half of a UTF-16 surrogate pair") as refused:
        parse_config(text)
    assert where in str(refused.value)
