"""The one place the conformance runner meets the sandbox's CEL: compile an expression as a
1.30 policy's is compiled when written, and evaluate one in the sandbox's CEL environment.

Other work changes that environment (type checking, cross-type numerics, optionals, format, an
evaluator with cost): rewire these two functions to it, and the runner follows.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from volcano_guard_sandbox.apiserver import cel_check, kubernetes_cel


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
def _environment(names: tuple[str, ...]) -> cel.Env:
    return kubernetes_cel.environment({name: cel.Type.DYN for name in names})


def evaluate(expression: str, variables: Mapping[str, Any]) -> Outcome:
    """expression compiled in the sandbox's environment, with variables as dynamic values."""
    environment = _environment(tuple(sorted(variables)))
    try:
        program = environment.compile(expression)
    except RuntimeError as exc:
        return Outcome(compile_error=str(exc))
    try:
        result = program.eval(data=dict(variables))
    except (RuntimeError, TypeError, ValueError) as exc:  # a value the binding cannot take
        return Outcome(error=f"{type(exc).__name__}: {exc}")
    if result.type() == cel.Type.ERROR:
        return Outcome(error=str(result.value()))
    return Outcome(value=result.plain_value())
