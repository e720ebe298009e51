"""The one place the conformance runner meets the sandbox's CEL: compile an expression as a
1.30 policy's is compiled when written, and evaluate one in the sandbox's CEL environment.

Other work changes that environment (type checking, cross-type numerics, optionals, format, an
evaluator with cost): rewire these two functions to it, and the runner follows.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from volcano_guard_sandbox.apiserver import cel_check, kubernetes_cel, matching


@dataclass(frozen=True)
class Outcome:
    """An expression's fate: refused when compiled (compile_error), failed when evaluated
    (error), or its value."""

    compile_error: str = ""
    error: str = ""
    value: Any = None


def policy_compile_error(expression: str, has_params: bool, has_authorizer: bool) -> str:
    """Why the API would refuse expression as a boolean policy expression compiled with the
    variables the case declares (compile.go OptionalVariableDeclarations), or ""."""
    declarations = cel_check.Declarations(params=has_params, authorizer=has_authorizer)
    return cel_check.check(expression, declarations, cel_check.BOOL).error


@functools.cache
def _compiled_in(names: tuple[str, ...]) -> Callable[[str], cel.Expression]:
    """One compile callable an environment (the evaluator caches its plans by it)."""
    environment = kubernetes_cel.environment({name: cel.Type.DYN for name in names})
    return functools.lru_cache(maxsize=4096)(environment.compile)


def evaluate(expression: str, variables: Mapping[str, Any]) -> Outcome:
    """expression compiled in the sandbox's environment, with variables as dynamic values,
    then evaluated as the sandbox's admission evaluates it (matching.evaluate: cel_eval with
    cel-go's cost, cel-cpp for what it does not model)."""
    compiled = _compiled_in(tuple(sorted(variables)))
    try:
        compiled(expression)
    except RuntimeError as exc:
        return Outcome(compile_error=str(exc))
    try:
        value, error = matching.evaluate(compiled, expression, variables)
    except (RuntimeError, TypeError, ValueError) as exc:  # a value the binding cannot take
        return Outcome(error=f"{type(exc).__name__}: {exc}")
    if error:
        return Outcome(error=error.partition(" resulted in error: ")[2] or error)
    return Outcome(value=value)
