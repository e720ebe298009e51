"""Label selectors validated on write as kube-apiserver 1.30 validates them, so the sandbox never
stores a selector that Go's matcher could not parse at admission.

k8s.io/apimachinery v0.30 pkg/apis/meta/v1/validation/validation.go `ValidateLabelSelector`,
`ValidateLabelSelectorRequirement`, `ValidateLabelName`, `ValidateLabels`, with the strict
options (`AllowInvalidLabelValueInSelector: false`); the names and values by
pkg/util/validation/validation.go `IsQualifiedName`, `IsDNS1123Subdomain`, `IsValidLabelValue`.
kubernetes pkg/apis/admissionregistration/validation/validation.go applies them to a webhook's
namespaceSelector and objectSelector (`validateValidatingWebhook`, `validateMutatingWebhook`),
to a policy's matchConstraints and a binding's matchResources (`validateMatchResources`) and to
a binding's paramRef.selector (`validateParamRef`). An update keeps an invalid value only if the
stored webhook had one already; the sandbox refuses them on create, so it never has one.

Each error is one line, as field.Error prints it: `PATH: Invalid value: "VALUE": DETAIL`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_QUALIFIED_NAME_FORMAT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QUALIFIED_NAME_MESSAGE = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_QUALIFIED_NAME_MAX_LENGTH = 63
_LABEL_VALUE_FORMAT = f"({_QUALIFIED_NAME_FORMAT})?"
_LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MAX_LENGTH = 63
_DNS1123_LABEL_FORMAT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FORMAT = _DNS1123_LABEL_FORMAT + "(\\." + _DNS1123_LABEL_FORMAT + ")*"
_DNS1123_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MAX_LENGTH = 253
_OPERATORS_WITH_VALUES = ("In", "NotIn")
_OPERATORS_WITHOUT_VALUES = ("Exists", "DoesNotExist")


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    """validation.go RegexError, to the character (its examples each end with a comma)."""
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


def _max_length_error(length: int) -> str:
    return f"must be no more than {length} characters"


def _too_long(value: str, length: int) -> bool:
    return len(value.encode()) > length  # Go's len counts bytes


def _length_and_format_errors(value: str, length: int, pattern: str, regex_error: str) -> list[str]:
    """The shape of IsDNS1123Subdomain and IsValidLabelValue: too long, then not matching."""
    errors = []
    if _too_long(value, length):
        errors.append(_max_length_error(length))
    if not re.fullmatch(pattern, value):
        errors.append(regex_error)
    return errors


def dns1123_subdomain_errors(value: str) -> list[str]:
    """IsDNS1123Subdomain."""
    words = _regex_error(_DNS1123_SUBDOMAIN_MESSAGE, _DNS1123_SUBDOMAIN_FORMAT, "example.com")
    return _length_and_format_errors(
        value, _DNS1123_SUBDOMAIN_MAX_LENGTH, _DNS1123_SUBDOMAIN_FORMAT, words
    )


def qualified_name_errors(value: str) -> list[str]:
    """IsQualifiedName: a name of at most 63 characters, with an optional DNS subdomain prefix
    and '/'."""
    name_regex_error = _regex_error(
        _QUALIFIED_NAME_MESSAGE, _QUALIFIED_NAME_FORMAT, "MyName", "my.name", "123-abc"
    )
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a qualified name {name_regex_error} with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')"
        ]
    errors = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            errors += [f"prefix part {error}" for error in dns1123_subdomain_errors(prefix)]
    if not name:
        errors.append("name part must be non-empty")
    elif _too_long(name, _QUALIFIED_NAME_MAX_LENGTH):
        errors.append(f"name part {_max_length_error(_QUALIFIED_NAME_MAX_LENGTH)}")
    if not re.fullmatch(_QUALIFIED_NAME_FORMAT, name):
        errors.append(f"name part {name_regex_error}")
    return errors


def label_value_errors(value: str) -> list[str]:
    """IsValidLabelValue: empty, or at most 63 characters as a qualified name's name part."""
    words = _regex_error(_LABEL_VALUE_MESSAGE, _LABEL_VALUE_FORMAT, "MyValue", "my_value", "12345")
    return _length_and_format_errors(value, _LABEL_VALUE_MAX_LENGTH, _LABEL_VALUE_FORMAT, words)


def _invalid(path: str, value: Any, detail: str) -> str:
    return f"{path}: Invalid value: {json.dumps(value, ensure_ascii=False)}: {detail}"


def selector_errors(selector: Any, path: str) -> list[str]:
    """ValidateLabelSelector with the strict options: matchLabels' keys and values, then each
    matchExpression's operator, values and key. None (no selector) is valid."""
    if selector is None:
        return []
    if not isinstance(selector, Mapping):
        return [f"{path}: Invalid value: must be an object"]
    errors = []
    match_labels = selector.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        errors.append(f"{path}.matchLabels: Invalid value: must be an object")
        match_labels = {}
    for key, value in match_labels.items():
        errors += [_invalid(f"{path}.matchLabels", key, e) for e in qualified_name_errors(key)]
        errors += [
            _invalid(f"{path}.matchLabels", value, e) for e in label_value_errors(str(value))
        ]
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        return [*errors, f"{path}.matchExpressions: Invalid value: must be a list"]
    for index, requirement in enumerate(expressions):
        errors += requirement_errors(requirement, f"{path}.matchExpressions[{index}]")
    return errors


def requirement_errors(requirement: Any, path: str) -> list[str]:
    """ValidateLabelSelectorRequirement: In and NotIn need values, Exists and DoesNotExist
    forbid them, any other operator is invalid; the key a qualified name, each value a label
    value."""
    if not isinstance(requirement, Mapping):
        return [f"{path}: Invalid value: must be an object"]
    errors = []
    operator, values = requirement.get("operator"), requirement.get("values") or []
    if not isinstance(values, list):
        values = [values]
    if operator in _OPERATORS_WITH_VALUES:
        if not values:
            errors.append(
                f"{path}.values: Required value: must be specified when `operator` is 'In' or "
                "'NotIn'"
            )
    elif operator in _OPERATORS_WITHOUT_VALUES:
        if values:
            errors.append(
                f"{path}.values: Forbidden: may not be specified when `operator` is 'Exists' or "
                "'DoesNotExist'"
            )
    else:
        errors.append(_invalid(f"{path}.operator", operator, "not a valid selector operator"))
    key = str(requirement.get("key") or "")
    errors += [_invalid(f"{path}.key", key, e) for e in qualified_name_errors(key)]
    for index, value in enumerate(values):
        errors += [
            _invalid(f"{path}.values[{index}]", value, e) for e in label_value_errors(str(value))
        ]
    return errors


def match_resources_errors(resources: Any, path: str) -> list[str]:
    """validateMatchResources, its selector part: the namespaceSelector and objectSelector of a
    policy's matchConstraints or a binding's matchResources."""
    if not isinstance(resources, Mapping):
        return []
    return [
        *selector_errors(resources.get("namespaceSelector"), f"{path}.namespaceSelector"),
        *selector_errors(resources.get("objectSelector"), f"{path}.objectSelector"),
    ]


def webhook_errors(webhook: Mapping[str, Any], path: str) -> list[str]:
    """validateValidatingWebhook / validateMutatingWebhook, their selector part."""
    return [
        *selector_errors(webhook.get("namespaceSelector"), f"{path}.namespaceSelector"),
        *selector_errors(webhook.get("objectSelector"), f"{path}.objectSelector"),
    ]


def policy_errors(spec: Mapping[str, Any]) -> list[str]:
    """validateValidatingAdmissionPolicySpec, its selector part: spec.matchConstraints."""
    return match_resources_errors(spec.get("matchConstraints"), "spec.matchConstraints")


def binding_errors(spec: Mapping[str, Any]) -> list[str]:
    """validateValidatingAdmissionPolicyBindingSpec, its selector part: the paramRef's selector
    and the matchResources. Upstream names the latter's path `spec.matchResouces` (sic, its
    fldPath.Child("matchResouces")); the sandbox prints the same path."""
    ref = spec.get("paramRef")
    errors = (
        selector_errors(ref.get("selector"), "spec.paramRef.selector")
        if isinstance(ref, Mapping)
        else []
    )
    return errors + match_resources_errors(spec.get("matchResources"), "spec.matchResouces")
