"""The CEL environment kube-apiserver gives a NEW expression, per Kubernetes version.

k8s.io/apiserver pkg/cel/environment/base.go lists the libraries and options of the base
environment with the version that introduced each. An API server compiles a new or changed
expression in its NewExpressions environment: the options introduced at or before its
compatibility version, which DefaultCompatibilityVersion sets to the release before it
(1.30 offers what 1.29 introduced; what 1.30 introduced, it keeps for stored expressions).

Two cel-expr-python environments make one Kubernetes environment:

- the type checker's, declaring every overload as upstream declares it: the element types of
  k8s.lists (`list(int).sum()`, not `list(string).sum()`), type parameters (`list(A).indexOf(A)`,
  `sets.contains(list(T), list(T))`), and the comparison operators with cel-go's cross-type
  numeric overloads (cel.CrossTypeNumericComparisons, since 1.28), which replace CEL's standard
  declarations of `_<_`, `_<=_`, `_>_` and `_>=_` (the runtime already implements them);
- the runtime's, which registers one Python function per function and argument kinds: CEL's
  C++ runtime dispatches on kinds (a list, not a list of int), so the per-type overloads of one
  function share one implementation there.

An expression is checked in the first, and its checked form planned in the second.

What base.go offers at a version and the sandbox does not implement is refused when written,
with a message saying so (`LIBRARIES`, `refusal`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from cel_expr_python import cel
from cel_expr_python.ext.ext_optional import ExtOptional
from google.protobuf import descriptor_pool

from volcano_guard_sandbox.apiserver import cel_go_semantics
from volcano_guard_sandbox.apiserver.cel_check import literal_issues
from volcano_guard_sandbox.apiserver.cel_checked import rename_calls
from volcano_guard_sandbox.apiserver.cel_sets import SETS_OVERLOADS
from volcano_guard_sandbox.apiserver.cel_strings import STRINGS_OVERLOADS
from volcano_guard_sandbox.apiserver.cel_types import checked as checked_tree
from volcano_guard_sandbox.apiserver.cel_urls import URL_OVERLOADS
from volcano_guard_sandbox.apiserver.kubernetes_cel import (
    LISTS_DISPATCH,
    LISTS_OVERLOADS,
    POOL,
    QUANTITY_OVERLOADS,
    REGEX_OVERLOADS,
    compile_regex,
    extension,
)

Version = tuple[int, int]
Overloads = Sequence[tuple[str, str, tuple[cel.Type, ...], cel.Type, bool, Any]]
# An environment's version is the one whose libraries it offers (base.go IntroducedVersion): a
# release offers a new expression those of the release before it (DefaultCompatibilityVersion,
# n-1), and evaluates stored ones with its own. The sandbox plays 1.30 to 1.36.
OLDEST, NEWEST = (1, 29), (1, 36)


def written_at(release: Version) -> Version:
    """The environment a release compiles a new expression in: the release before it."""
    return (release[0], release[1] - 1)


@dataclass(frozen=True)
class Library:
    """One entry of base.go: what it is, the version that introduced it, and its overloads
    (None where the sandbox does not model it: then `names` are the identifiers by which a
    compile error shows an expression uses it)."""

    name: str
    introduced: Version
    overloads: Overloads | None = None
    names: tuple[str, ...] = ()
    why: str = ""


LIBRARIES = (
    Library("k8s.url (library.URLs)", (1, 0), URL_OVERLOADS),
    Library("k8s.regex (library.Regex)", (1, 0), REGEX_OVERLOADS),
    Library("k8s.lists (library.Lists)", (1, 0), LISTS_OVERLOADS),
    Library(
        "the authorizer (library.Authz)",
        (1, 27),
        names=("authorizer",),
        why="it needs the API server's authorizer",
    ),
    Library("k8s.quantity (library.Quantity)", (1, 28), QUANTITY_OVERLOADS),
    Library("the strings extension, version 2 (ext.Strings)", (1, 29), STRINGS_OVERLOADS),
    Library("the sets extension (ext.Sets)", (1, 29), SETS_OVERLOADS),
    Library(
        "k8s.ip (library.IP)",
        (1, 30),
        names=("ip", "isIP", "ip.isCanonical", "isLoopback", "isGlobalUnicast", "family"),
    ),
    Library(
        "k8s.cidr (library.CIDR)",
        (1, 30),
        names=("cidr", "isCIDR", "containsIP", "containsCIDR", "prefixLength", "masked"),
    ),
    Library(
        "k8s.format (library.Format)",
        (1, 31),
        names=("format.named", "format.dns1123Label", "format.dns1123Subdomain", "validate"),
    ),
    Library(
        "the authorizer's selectors (library.AuthzSelectors)",
        (1, 31),
        names=("fieldSelector", "labelSelector"),
        why="it needs the API server's authorizer",
    ),
    Library(
        "two-variable comprehensions (ext.TwoVarComprehensions)",
        (1, 32),
        names=("transformList", "transformMap", "transformMapEntry"),
    ),
    Library("k8s.semver (library.SemverLib)", (1, 33), names=("semver", "isSemver")),
    Library(
        "the lists extension, version 3 (ext.Lists)",
        (1, 34),
        names=("lists.range", "slice", "flatten", "distinct", "reverse", "sort", "sortBy"),
    ),
)


# The pattern of find, findAll or matches (a member's first argument, the global matches'
# second), when it is a string literal.
_STRING_LITERAL = r"""r?(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
_PATTERN_LITERAL = re.compile(
    rf"""(?:\.(?:find|findAll|matches)\(\s*|\bmatches\([^,()]*,\s*)({_STRING_LITERAL})\s*[,)]"""
)


def _check_version(version: Version) -> None:
    if not OLDEST <= version <= NEWEST:
        raise ValueError(
            f"{version[0]}.{version[1]} is not a CEL environment version the sandbox has "
            f"({OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]})"
        )


def offered(version: Version) -> tuple[Library, ...]:
    """The libraries base.go gives the environment of this version."""
    _check_version(version)
    return tuple(lib for lib in LIBRARIES if lib.introduced <= version)


# cel-expr-python 0.1.3 builds cel-cpp's parser with a recursion limit of 32 (both its ANTLR
# listener and its AST builder) and exposes no setting, neither in NewEnv nor in the YAML config;
# cel-go v0.17.8's parser allows 250 (parser.go maxRecursionDepth), which Kubernetes 1.30 keeps.
PARSER_DEPTH = 32
_TOO_DEEP = re.compile(r"Exceeded max recursion depth of \d+|Expression recursion limit exceeded")
TOO_DEEP = (
    f"the sandbox does not model expressions nested deeper than {PARSER_DEPTH} (its CEL parser's "
    "limit, which cel-expr-python does not let it raise; Kubernetes 1.30 allows 250)"
)


def refusal(error: str, version: Version) -> str:
    """A compile error, saying so where it comes from a library the sandbox does not model."""
    if _TOO_DEEP.search(error):
        return f"{TOO_DEEP}: {error.splitlines()[0]}"
    quoted = set(re.findall(r"'([\w.]+)'", error))
    for library in LIBRARIES:
        if library.overloads is not None or not quoted & set(library.names):
            continue
        release = (version[0], version[1] + 1)  # whose new expressions compile at version
        if library.introduced > release:
            return error  # not in that release at all: the API server refuses it the same way
        stored_only = library.introduced > version
        reason = (
            f"Kubernetes {release[0]}.{release[1]} keeps it for stored expressions only"
            if stored_only
            else library.why or "not implemented"
        )
        return f"the sandbox does not model {library.name} ({reason}): {error}"
    return error


# -- declarations for the type checker ---------------------------------------------------------

_PRIMITIVES = {
    "INT": "int",
    "UINT": "uint",
    "DOUBLE": "double",
    "BOOL": "bool",
    "STRING": "string",
    "BYTES": "bytes",
    "DYN": "dyn",
    "NULL": "null_type",
    "DURATION": "google.protobuf.Duration",
    "TIMESTAMP": "google.protobuf.Timestamp",
}


def _split_parameters(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, character in enumerate(text):
        depth += {"<": 1, ">": -1}.get(character, 0)
        if character == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    parts.append(text[start:].strip())
    return parts


def _type_spec(name: str) -> dict[str, Any]:
    """A cel.Type's name (e.g. `LIST<A>`) as an environment config's type: a one-letter
    message name is a type parameter (cel-expr-python's Type has none of its own)."""
    if name in _PRIMITIVES:
        return {"type_name": _PRIMITIVES[name]}
    generic = re.fullmatch(r"(LIST|MAP)<(.*)>", name)
    if generic:
        parameters = [_type_spec(p) for p in _split_parameters(generic.group(2))]
        return {"type_name": generic.group(1).lower(), "params": parameters}
    if re.fullmatch(r"[A-Z]", name):
        return {"type_name": name, "is_type_param": True}
    return {"type_name": name}


def _declaration(
    overloads: Iterable[tuple[str, str, tuple[cel.Type, ...], cel.Type, bool, Any]],
) -> list[dict[str, Any]]:
    functions: dict[str, list[dict[str, Any]]] = {}
    for name, overload_id, parameters, result, member, _ in overloads:
        specs = [_type_spec(p.name()) for p in parameters]
        overload: dict[str, Any] = {"id": overload_id, "return": _type_spec(result.name())}
        if member:
            overload["target"], specs = specs[0], specs[1:]
        if specs:
            overload["args"] = specs
        functions.setdefault(name, []).append(overload)
    return [{"name": name, "overloads": declared} for name, declared in functions.items()]


_ORDERED = ("bool", "int64", "uint64", "double", "string", "bytes", "timestamp", "duration")
_NUMBERS = ("int64", "uint64", "double")
_SPEC = {
    "bool": "bool",
    "int64": "int",
    "uint64": "uint",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "timestamp": "google.protobuf.Timestamp",
    "duration": "google.protobuf.Duration",
}
_OPERATORS = {"_<_": "less", "_<=_": "less_equals", "_>_": "greater", "_>=_": "greater_equals"}


def _comparisons() -> list[dict[str, Any]]:
    """cel-go's ordering operators with cross-type numeric comparisons (checker/decls, stdlib),
    with cel-go's overload ids: one type on both sides, or two different numeric types."""
    declared = []
    for operator, prefix in _OPERATORS.items():
        overloads = []
        for left in _ORDERED:
            rights = [left] + ([n for n in _NUMBERS if n != left] if left in _NUMBERS else [])
            for right in rights:
                overload_id = f"{prefix}_{left}" + (f"_{right}" if right != left else "")
                overloads.append(
                    {
                        "id": overload_id,
                        "args": [{"type_name": _SPEC[left]}, {"type_name": _SPEC[right]}],
                        "return": {"type_name": "bool"},
                    }
                )
        declared.append({"name": operator, "overloads": overloads})
    return declared


_CHECKER_DECLARED = ("k8s.lists", "ext.Strings", "ext.Sets")  # declared in the config


def _dispatched(libraries: Sequence[Library]) -> list[Library]:
    """The libraries whose overloads the checker's config declares and the runtime dispatches."""
    return [
        library
        for library in libraries
        if library.overloads is not None and any(n in library.name for n in _CHECKER_DECLARED)
    ]


def _checker_config(libraries: Sequence[Library]) -> cel.EnvConfig:
    functions = _comparisons() + _declaration(
        overload for library in _dispatched(libraries) for overload in library.overloads or ()
    )
    config = {
        "stdlib": {"exclude_functions": [{"name": operator} for operator in _OPERATORS]},
        "functions": functions,
    }
    return cel.NewEnvConfigFromYaml(yaml.safe_dump(config, sort_keys=False))


# -- implementations for the runtime -------------------------------------------------------------


def _runtime_type(kind: cel.Type) -> cel.Type:
    name = kind.name()
    if name.startswith("LIST<"):
        return cel.Type.LIST
    if name.startswith("MAP<"):
        return cel.Type.Map(cel.Type.DYN, cel.Type.DYN)
    if re.fullmatch(r"[A-Z]", name):
        return cel.Type.DYN
    return kind


def _runtime_extension(name: str, overloads: Overloads) -> tuple[cel.CelExtension, dict[str, str]]:
    """One runtime overload a function and argument kinds: the implementation the overloads
    it stands for share (lists.go's per-type overloads mostly call one Go function), else the
    library's dispatching one (LISTS_DISPATCH: `sum`, whose zero depends on the type). Each
    overload of such a group also gets a runtime function of its own, `<function>@<overload
    id>`, to which `compile` renames the calls the checker resolved to that overload alone;
    returned with the extension, by overload id."""
    groups: dict[tuple[str, bool, tuple[str, ...]], list[Any]] = {}
    for overload in overloads:
        function, _, parameters, _, member, _ = overload
        kinds = tuple(_runtime_type(p).name() for p in parameters)
        groups.setdefault((function, member, kinds), []).append(overload)
    by_name: dict[str, list[cel.Overload]] = {}
    renamed: dict[str, str] = {}
    for (function, member, _), grouped in groups.items():
        _, overload_id, parameters, result, _, implementation = grouped[0]
        if len({id(o[5]) for o in grouped}) > 1:
            implementation = LISTS_DISPATCH[function]
            for _, typed_id, typed_parameters, _, _, typed in grouped:
                renamed[typed_id] = f"{function}@{typed_id}"
                by_name[renamed[typed_id]] = [
                    cel.Overload(
                        typed_id,
                        cel.Type.DYN,
                        [_runtime_type(p) for p in typed_parameters],
                        is_member=member,
                        impl=typed,
                    )
                ]
        results = {o[3].name() for o in grouped}
        runtime_result = result if len(results) == 1 else cel.Type.DYN
        if re.fullmatch(r"[A-Z]", runtime_result.name()):
            runtime_result = cel.Type.DYN
        runtime_id = overload_id if len(grouped) == 1 else f"{function}_{len(parameters)}_kinds"
        by_name.setdefault(function, []).append(
            cel.Overload(
                runtime_id,
                runtime_result,
                [_runtime_type(p) for p in parameters],
                is_member=member,
                impl=implementation,
            )
        )
    declarations = [cel.FunctionDecl(function, declared) for function, declared in by_name.items()]
    return cel.CelExtension(name, declarations), renamed


def implementations(version: Version = OLDEST) -> dict[str, Callable[..., Any]]:
    """Each overload the sandbox implements at this version, by its upstream overload id."""
    return {
        overload[1]: overload[5]
        for library in offered(version)
        if library.overloads is not None
        for overload in library.overloads
    }


class KubernetesEnvironment:
    """The Kubernetes CEL environment of one version: `compile` type-checks an expression as
    the API server would and plans it on CEL's C++ runtime with the libraries' Python code."""

    def __init__(
        self,
        variables: Mapping[str, cel.Type],
        version: Version,
        extensions: Sequence[cel.CelExtensionBase] = (),
        pool: descriptor_pool.DescriptorPool = POOL,
    ) -> None:
        libraries = offered(version)
        # Optionals (cel-go OptionalTypes) are in every environment since 1.28.
        extensions = [ExtOptional(), *extensions]
        self.version = version
        self.libraries = libraries
        dispatched = _dispatched(libraries)
        plain = [
            extension(lib.name, lib.overloads)
            for lib in libraries
            if lib.overloads is not None and lib not in dispatched
        ]
        runtime, self._renamed = _runtime_extension(
            "kubernetes.dispatched", [o for lib in dispatched for o in lib.overloads or ()]
        )
        self.checker = cel.NewEnv(
            pool,
            config=_checker_config(libraries),
            variables=dict(variables),
            extensions=[*plain, *extensions],
        )
        self._renamed |= cel_go_semantics.RENAMED
        self.runtime = cel.NewEnv(
            pool,
            variables=dict(variables),
            extensions=[*plain, runtime, cel_go_semantics.runtime_extension(), *extensions],
        )

    def compile(self, expression: str, disable_check: bool = False) -> cel.Expression:
        """The planned expression; RuntimeError with the checker's words if it does not
        compile (and why, where it uses what the sandbox does not model)."""
        if disable_check:
            return self.runtime.compile(expression, disable_check=True)
        try:
            checked = self.checker.compile(expression)
        except RuntimeError as exc:
            raise RuntimeError(refusal(str(exc), self.version)) from None
        issues = list(literal_issues(checked_tree(checked.serialize())))
        if issues:  # base.go's AST validators (1.29): part of compiling, as cel-go's
            raise RuntimeError("\n".join(issues))
        self._check_regex_literals(expression)
        return self.runtime.deserialize(rename_calls(checked.serialize(), self._renamed))

    def _check_regex_literals(self, expression: str) -> None:
        """A constant pattern of `find`, `findAll` or `matches` that Go's regexp refuses: the
        API server builds the program when a policy is written (admission/plugin/cel
        compile.go CompileCELExpression) with cel.OptOptimize (base.go), which compiles
        constant patterns then (regex.go OptimizeRegex; cel-go MatchesRegexOptimization takes
        the global `matches`' second argument, which the AST validator, reading the first,
        lets through), so it refuses the policy."""
        for literal in _PATTERN_LITERAL.findall(expression):
            pattern = self.runtime.compile(literal).eval(data={}).value()
            if not isinstance(pattern, str):
                continue
            try:
                compile_regex(pattern)
            except ValueError as exc:
                reason = str(exc).removeprefix("Illegal regex: ")
                raise RuntimeError(f"program instantiation failed: {reason}") from None

    def Activation(self, *args: Any, **kwargs: Any) -> cel.Activation:  # cel.Env's name
        return self.runtime.Activation(*args, **kwargs)

    def deserialize(self, serialized: str | bytes) -> cel.Expression:
        return self.runtime.deserialize(serialized)

    def config(self) -> cel.EnvConfig:
        return self.checker.config()
