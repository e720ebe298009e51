"""What every config section is built from, and how a config is read: the Section base (frozen,
unknown keys refused), the modes, the bounded scalars, the str types with a grammar of their own
(quantities, durations, node selectors, checked in the decoding pass: _decode), YAML as the
config reads it, and the one pass that turns data into a root Struct or a ConfigError naming the
key's full path (`policies.resourceRequests.mode`).

Below every policy and webhook.config: a policy's section is built from these, and config.py
gathers the sections into the root Config.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import msgspec
import yaml

from volcano_guard.base.durations import parse_duration
from volcano_guard.base.jsonbody import shown
from volcano_guard.base.node_selectors import kept_selector
from volcano_guard.base.quantity import QuantityError, parse_quantity

Mode = Literal["enforce", "warn", "audit", "off"]
MODES: tuple[str, ...] = get_args(Mode)

Name = Annotated[str, msgspec.Meta(min_length=1)]
Positive = Annotated[int, msgspec.Meta(gt=0)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the key."""


class QuantityText(str):
    """A Kubernetes quantity as written ("100m", "128Mi"); YAML's unquoted `cpu: 1` reads as 1."""


class DurationText(str):
    """A duration as operators write it: 90s, 5m, 1h, 30d."""


class NodeSelector(str):
    """One entry of the Volcano scheduler's --node-selector: key:value."""


class Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A config section: immutable once loaded, and a key it does not declare is an error."""


class _ConfigLoader(yaml.SafeLoader):
    """YAML whose only booleans are true and false (as in YAML 1.2): YAML 1.1 also reads an
    unquoted on/off/yes/no as a boolean, which would turn `mode: off` into false."""


_ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def read_yaml(text: str) -> Any:
    """YAML text as the config reads it: true and false are the only booleans. yaml.YAMLError
    when it is not YAML, or nests too deeply to read."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader
    except RecursionError:
        raise yaml.YAMLError("it nests too deeply") from None


Root = TypeVar("Root", bound=Section)


def convert(data: object, root: type[Root]) -> Root:
    """data (as read from YAML) as the Struct root, checked in one pass; ConfigError naming the
    full path of the first key that is wrong."""
    try:
        if where := _unpaired_surrogate(data):
            raise ConfigError(
                f"{where}: holds half of a UTF-16 surrogate pair (a YAML escape such as "
                "\\ud800), not a character"
            )
        return msgspec.convert(_empty_sections_dropped(data, root), root, dec_hook=_decode)
    except msgspec.ValidationError as exc:
        raise _config_error(str(exc), data, root) from None
    except RecursionError:
        raise ConfigError("config: nests too deeply") from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _unpaired_surrogate(data: object, where: str = "") -> str:
    """The path of the first key or string holding a lone UTF-16 surrogate ("": none): YAML's
    `\\ud800` escape makes one, and no text the guard writes (CEL, JSON, UTF-8) can carry it."""
    if isinstance(data, str):
        return (where or "config") if _SURROGATE.search(data) else ""
    items: Iterable[tuple[object, object]] = data.items() if isinstance(data, dict) else ()
    if isinstance(data, list):
        items = ((f"[{index}]", item) for index, item in enumerate(data))
    for key, value in items:
        path = f"{where}{key}" if isinstance(data, list) else _join(where, str(key))
        if _SURROGATE.search(str(key)):
            return path
        if found := _unpaired_surrogate(value, path):
            return found
    return ""


def _empty_sections_dropped(data: object, section: type) -> object:
    """data without the sections written empty (`nodeName:` with every line under it commented
    out), which then take their defaults."""
    if not isinstance(data, dict):
        return data
    fields = _field_types(section)
    kept = {}
    for key, value in data.items():
        declared = _declared(fields.get(key))
        if isinstance(declared, type) and issubclass(declared, Section):
            if value is None:
                continue
            value = _empty_sections_dropped(value, declared)
        kept[key] = value
    return kept


def _decode(kind: type, value: Any) -> Any:
    """Check and build the str types with a grammar of their own."""
    if kind is QuantityText:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # quantities are often written unquoted
        text = _text(value)
        try:
            quantity = parse_quantity(text)
        except QuantityError as exc:
            raise ValueError(f"{shown(text)}: {exc}") from None
        if quantity < 0:
            raise ValueError(f"{shown(text)} is negative")
        return QuantityText(text)
    if kind is DurationText:
        text = _text(value)
        parse_duration(text)  # ValueError naming the forms it takes
        return DurationText(text)
    if kind is NodeSelector:
        return NodeSelector(_node_selector(_text(value)))
    raise NotImplementedError(kind)


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {_describe(value)}")
    return value


def _node_selector(selector: str) -> str:
    # Volcano's scheduler silently ignores such an entry; refusing it keeps both lists equal in
    # effect instead of leaving an operator to wonder which nodes are protected.
    if "," in selector:
        raise ValueError(
            f"{shown(selector)} holds a comma; the scheduler's --node-selector "
            "splits on commas, so write one key:value a list item"
        )
    if kept_selector(selector) is None:
        raise ValueError(
            f"{shown(selector)} is not in the Volcano scheduler's --node-selector "
            "format key:value (a ':' followed by a value); the scheduler ignores "
            "such an entry"
        )
    return selector


# msgspec names JSON types; the config is YAML.
# An image's name as the audit matches it: the last path segment, no registry, tag or digest.
IMAGE_NAME = "^[^/:@ ]+$"
ImageName = Annotated[str, msgspec.Meta(pattern=IMAGE_NAME)]
_TYPE_NAMES = {
    f"`str` matching regex '{IMAGE_NAME}'": "an image name without registry, tag or digest "
    "(such as vc-scheduler)",
    "`int` >= 1": "a positive integer",
    "`float` > 0.0": "a positive number",
    "`object`": "a mapping",
    "`array`": "a list",
    "`str`": "a string",
    "`int`": "an integer",
    "`float`": "a number",
    "`bool`": "true or false",
    "`null`": "nothing (null)",
}
_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(.*)`")


def _config_error(message: str, data: object, root: type) -> ConfigError:
    """ConfigError from msgspec's message (`Expected ... - at `$.a.b[0]``): the path first, as
    the operator writes it, then what is wrong and the value found there."""
    if " - at `" in message:  # rpartition: a key's own name may hold " - at `"
        message, _, at = message.rpartition(" - at `")
    else:  # at the top
        at = ""
    is_key, _, at = at.rpartition("in `")  # `key` in `$.a.b`: a mapping's key is wrong
    parts = re.findall(r"\.([^.\[`]+)|(\[[^\]]+\])", at)
    where, value, hint = _locate(data, parts, root)
    if unknown := _UNKNOWN_FIELD.fullmatch(message):
        known = ", ".join(sorted(field.name for field in msgspec.structs.fields(hint)))
        key = unknown.group(1)
        named = key if re.fullmatch(r"[\w/-]+", key) else shown(key)  # "", a space, ...
        return ConfigError(f"{_join(where, named)}: unknown key (known here: {known})")
    where = where or "config"
    if get_origin(hint) is Literal and not is_key:
        choices = " | ".join(str(choice) for choice in get_args(hint))
        return ConfigError(f"{where}: {_describe(value)} is not one of {choices}")
    if not message.startswith("Expected"):  # a check of ours (_decode), which shows the value
        return ConfigError(f"{where}: {message}")
    message = message.partition(", got ")[0]
    for name, readable in _TYPE_NAMES.items():
        message = message.replace(name, readable)
    if is_key:
        keys = ", ".join(shown(key) for key in value) if isinstance(value, dict) else ""
        return ConfigError(f"{where}: each key: {message.lower()}; the keys are {keys}")
    return ConfigError(f"{where}: {message.lower()}, got {_describe(value)}")


def _locate(data: object, parts: list[tuple[str, str]], root: type) -> tuple[str, object, Any]:
    """The readable path of msgspec's path parts, the value there and its declared type. A
    mapping's value is shown by msgspec as `[...]`: the entry that fails is found again."""
    where, value, hint = "", data, root
    for field_name, index in parts:
        hint = _declared(hint)
        if field_name:
            where, hint = _join(where, field_name), _field_types(hint)[field_name]
            value = value.get(field_name) if isinstance(value, dict) else None
        elif index == "[...]" and isinstance(value, dict):
            hint = get_args(hint)[1]
            key, value = next(
                ((key, item) for key, item in value.items() if not _valid(item, hint)), ("?", None)
            )
            where = _join(where, str(key))
        else:
            hint = get_args(hint)[0]
            value = value[int(index[1:-1])] if isinstance(value, list) else None
            where += index
    return where, value, _declared(hint)


def _declared(hint: Any) -> Any:
    """hint without its Annotated bounds."""
    return get_args(hint)[0] if get_origin(hint) is Annotated else hint


def _field_types(struct: type) -> dict[str, Any]:
    return typing.get_type_hints(struct, include_extras=True)


def _valid(value: object, hint: Any) -> bool:
    try:
        msgspec.convert(value, hint, dec_hook=_decode)
    except msgspec.ValidationError:
        return False
    return True


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    kind = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
    return f"{kind} {shown(value)}" if isinstance(value, str | bool | int | float) else kind
