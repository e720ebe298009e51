"""Just enough of Go to read upstream's test tables as text: a tokenizer, an expression parser
(literals, names, calls, composite literals, unary and binary operators) and the values of the
expressions test tables hold (`types.Int(3)`, `[]interface{}{"a", int64(1)}`, `math.MaxInt64`,
`fmt.Sprintf("%d", ...)`, ...).

There is no Go toolchain here, and none is needed: a table is data. What this reader does not
know raises GoSyntaxError or UnknownValue, and the caller counts that case as unparsed rather
than guessing.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class GoSyntaxError(ValueError):
    """Text this reader cannot parse as a Go expression."""


class UnknownValue(ValueError):
    """A Go expression whose value this reader does not know (a function, a type it lacks)."""


# -- tokens --------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""(?P<space>\s+|//[^\n]*|/\*.*?\*/)
    |(?P<raw>`[^`]*`)
    |(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<rune>'(?:[^'\\\n]|\\[^\n]+?)')
    |(?P<number>0[xX][0-9a-fA-F_]+|(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op>:=|\.\.\.|&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%&|^!<>=.,:;(){}\[\]])
    """,
    re.S | re.X,
)


@dataclass(frozen=True)
class Token:
    kind: str  # raw, string, rune, number, name, op
    text: str
    position: int


def tokens(source: str, start: int = 0, end: int | None = None) -> list[Token]:
    found, position, end = [], start, len(source) if end is None else end
    while position < end:
        match = _TOKEN.match(source, position)
        if match is None:
            raise GoSyntaxError(f"unexpected {source[position : position + 20]!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            found.append(Token(kind, match.group(), position))
        position = match.end()
    return found


_SIMPLE_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}


def unquote(literal: str) -> str:
    """A Go string literal's value: raw (backquoted) or interpreted, escapes included."""
    if literal.startswith("`"):
        return literal[1:-1].replace("\r", "")
    body, out, index = literal[1:-1], bytearray(), 0
    while index < len(body):
        char = body[index]
        if char != "\\":
            out += char.encode()
            index += 1
            continue
        escape = body[index + 1]
        if escape in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[escape])
            index += 2
        elif escape in "\\'\"":
            out += escape.encode()
            index += 2
        elif escape == "x":
            out.append(int(body[index + 2 : index + 4], 16))
            index += 4
        elif escape in "uU":
            width = 4 if escape == "u" else 8
            out += chr(int(body[index + 2 : index + 2 + width], 16)).encode()
            index += 2 + width
        elif escape in "01234567":
            out.append(int(body[index + 1 : index + 4], 8))
            index += 4
        else:
            raise GoSyntaxError(f"unknown escape \\{escape}")
    return out.decode("utf-8", errors="surrogateescape")


def quote(text: str) -> str:
    """Go's strconv.Quote (the `%q` verb), which a CEL string literal reads back."""
    named = {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
    named |= {"\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = []
    for char in text:
        if char in named:
            out.append(named[char])
        elif char.isprintable():
            out.append(char)
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return '"' + "".join(out) + '"'


# -- syntax --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass(frozen=True)
class Name:
    dotted: str  # `types.Int`, `trueVal`, `math.MaxInt64`


@dataclass(frozen=True)
class Call:
    function: Node
    arguments: tuple[Node, ...]


@dataclass(frozen=True)
class Composite:
    """`T{...}`: type is T's text ("" where elided), elements (key or None, value)."""

    type: str
    elements: tuple[tuple[Node | None, Node], ...]


@dataclass(frozen=True)
class Unary:
    operator: str
    operand: Node


@dataclass(frozen=True)
class Binary:
    operator: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Opaque:
    """An expression this reader does not model (a func literal): its text, for messages."""

    text: str


Node = Literal | Name | Call | Composite | Unary | Binary | Opaque

_BINARY = {"+": 4, "-": 4, "|": 4, "*": 5, "/": 5, "%": 5, "==": 3, "!=": 3, "&&": 2, "||": 1}


class Parser:
    """A recursive-descent parser over one span of tokens."""

    def __init__(self, source: str, items: Sequence[Token]) -> None:
        self.source, self.items, self.index = source, items, 0

    def peek(self, offset: int = 0) -> Token | None:
        at = self.index + offset
        return self.items[at] if at < len(self.items) else None

    def take(self, text: str | None = None) -> Token:
        token = self.peek()
        if token is None or (text is not None and token.text != text):
            found = token.text if token else "the end"
            raise GoSyntaxError(f"expected {text or 'a token'}, found {found}")
        self.index += 1
        return token

    def at(self, text: str) -> bool:
        token = self.peek()
        return token is not None and token.text == text

    def expression(self, precedence: int = 0) -> Node:
        left = self.unary()
        while (token := self.peek()) is not None and _BINARY.get(token.text, -1) > precedence:
            self.take()
            left = Binary(token.text, left, self.expression(_BINARY[token.text]))
        return left

    def unary(self) -> Node:
        token = self.peek()
        if token is not None and token.text in ("-", "+", "!", "&", "*") and token.kind == "op":
            self.take()
            return Unary(token.text, self.unary())
        return self.postfix(self.primary())

    def primary(self) -> Node:
        token = self.take()
        if token.kind in ("string", "raw"):
            return Literal(unquote(token.text))
        if token.kind == "rune":
            return Literal(ord(unquote('"' + token.text[1:-1] + '"')))
        if token.kind == "number":
            return Literal(_number(token.text))
        if token.text == "(":
            inner = self.expression()
            self.take(")")
            return inner
        if token.text in ("[", "map", "struct", "func", "interface", "chan"):
            self.index -= 1
            return self.typed()
        if token.text == "{":  # an elided composite type, inside a composite
            self.index -= 1
            return Composite("", self.elements())
        if token.kind == "name":
            dotted = token.text
            while self.at(".") and (following := self.peek(1)) and following.kind == "name":
                self.take()
                dotted += "." + self.take().text
            return Name(dotted)
        raise GoSyntaxError(f"unexpected {token.text!r}")

    def typed(self) -> Node:
        """A composite literal of a written type (`[]T{}`, `map[K]V{}`), or a func literal."""
        start = self.peek()
        assert start is not None
        if start.text == "func":
            return self.func_literal()
        type_text = self.type_text()
        if self.at("{"):
            return Composite(type_text, self.elements())
        return Name(type_text)  # a conversion's type, as in []byte("x")

    def type_text(self) -> str:
        parts = []
        while (token := self.peek()) is not None:
            if token.text == "[":
                self.take()
                parts.append("[" + ("" if self.at("]") else self.take().text) + "]")
                self.take("]")
            elif token.text == "map":
                self.take()
                self.take("[")
                key = self.type_text()
                self.take("]")
                parts.append(f"map[{key}]")
            elif token.text in ("*", "&"):
                parts.append(self.take().text)
            elif token.text in ("struct", "interface"):
                self.take()
                parts.append(token.text + self.skip_braces())
                return "".join(parts)
            elif token.kind == "name":
                dotted = self.take().text
                while self.at(".") and (following := self.peek(1)) and following.kind == "name":
                    self.take()
                    dotted += "." + self.take().text
                parts.append(dotted)
                return "".join(parts)
            else:
                raise GoSyntaxError(f"unexpected {token.text!r} in a type")
        raise GoSyntaxError("a type ends early")

    def skip_braces(self) -> str:
        """The text of a balanced {...} (a struct's fields), skipped."""
        opening = self.take("{")
        depth = 1
        while depth:
            token = self.take()
            depth += {"{": 1, "}": -1}.get(token.text, 0)
        return self.source[opening.position : token.position + 1]

    def func_literal(self) -> Node:
        start = self.take("func").position
        while not self.at("{"):
            self.take()
        self.skip_braces()
        last = self.items[self.index - 1]
        return Opaque(self.source[start : last.position + 1])

    def elements(self) -> tuple[tuple[Node | None, Node], ...]:
        self.take("{")
        found: list[tuple[Node | None, Node]] = []
        while not self.at("}"):
            value = self.expression()
            key = None
            if self.at(":"):
                self.take()
                key, value = value, self.expression()
            found.append((key, value))
            if not self.at("}"):
                self.take(",")
        self.take("}")
        return tuple(found)

    def postfix(self, node: Node) -> Node:
        while (token := self.peek()) is not None:
            if token.text == "(":
                self.take()
                arguments = []
                while not self.at(")"):
                    arguments.append(self.expression())
                    if self.at("..."):
                        self.take()
                    if not self.at(")"):
                        self.take(",")
                self.take(")")
                node = Call(node, tuple(arguments))
            elif token.text == "{" and isinstance(node, Name):  # tables hold no statements
                node = Composite(node.dotted, self.elements())
            elif token.text == "." and (following := self.peek(1)) and following.kind == "name":
                self.take()
                node = Call(Name("." + self.take().text), (node,))  # a selector on a value
            else:
                return node
        return node


def _number(text: str) -> int | float:
    text = text.replace("_", "")
    if text.lower().startswith("0x"):
        return int(text, 16)
    if re.fullmatch(r"\d+", text):
        return int(text, 8) if len(text) > 1 and text.startswith("0") else int(text)
    return float(text)


def parse_expression(source: str, items: Sequence[Token]) -> Node:
    parser = Parser(source, items)
    node = parser.expression()
    if parser.peek() is not None:
        raise GoSyntaxError(f"unexpected {parser.take().text!r} after an expression")
    return node


# -- where tables are ----------------------------------------------------------------------------


def function_body(source: str, name: str) -> tuple[int, int] | None:
    """The span of func name's body (inside its braces), or None."""
    match = re.search(rf"^func (?:\([^)]*\) )?{re.escape(name)}\(", source, re.M)
    if match is None:
        return None
    opening = source.index("{\n", match.end())
    closing = re.compile(r"^}", re.M).search(source, opening)
    return (opening + 1, closing.start()) if closing else None


def balanced_end(items: Sequence[Token], start: int) -> int:
    """The index of the token closing the bracket at items[start]."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    depth = 0
    for index in range(start, len(items)):
        text = items[index].text
        if text in pairs:
            depth += 1
        elif text in pairs.values():
            depth -= 1
            if depth == 0:
                return index
    raise GoSyntaxError("an unclosed bracket")


@dataclass(frozen=True)
class Table:
    """A composite literal of a test table: each element's tokens, parsed or not."""

    elements: tuple[Sequence[Token], ...]


def table(source: str, span: tuple[int, int], variable: str) -> Table | None:
    """The table assigned to variable (`cases := []struct{...}{...}`) within span, each element
    kept as its own tokens, so one element the parser cannot read leaves the others readable."""
    name = re.escape(variable)
    pattern = rf"(?:\b{name}\s*:=|\bvar {name} =)\s*\[\]struct\s*\{{"
    match = re.compile(pattern).search(source, *span)
    if match is None:
        return None
    items = tokens(source, match.end() - 1, span[1])
    body_start = balanced_end(items, 0) + 1  # past the struct's fields
    body_end = balanced_end(items, body_start)
    return Table(tuple(split_elements(items[body_start + 1 : body_end])))


def split_elements(items: Sequence[Token]) -> list[Sequence[Token]]:
    """The top-level comma-separated parts of a composite literal's body."""
    parts, depth, start = [], 0, 0
    for index, token in enumerate(items):
        if token.text in "{([" and token.kind == "op":
            depth += 1
        elif token.text in "})]" and token.kind == "op":
            depth -= 1
        elif token.text == "," and depth == 0:
            parts.append(items[start:index])
            start = index + 1
    if start < len(items):
        parts.append(items[start:])
    return [part for part in parts if part]


def fields(source: str, element: Sequence[Token]) -> dict[str, Node]:
    """A keyed struct element `{name: ..., expr: ...}` as field name -> expression."""
    node = parse_expression(source, element)
    if not isinstance(node, Composite):
        raise GoSyntaxError("a table element is not a composite literal")
    found = {}
    for key, value in node.elements:
        if not isinstance(key, Name):
            raise GoSyntaxError("a table element has an unkeyed field")
        found[key.dotted] = value
    return found


def local_values(source: str, span: tuple[int, int]) -> dict[str, Node]:
    """`name := expression` lines of a function body: the locals a table refers to."""
    found = {}
    for match in re.finditer(r"^\t(\w+)\s*:=\s*(.+)$", source[span[0] : span[1]], re.M):
        try:
            found[match.group(1)] = parse_expression(match.group(2), tokens(match.group(2)))
        except GoSyntaxError:
            continue
    return found


# -- values --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """resource.MustParse(text): compared as a value by the runner."""

    text: str


@dataclass(frozen=True)
class Unsigned:
    """A Go uint: CEL's uint type, kept apart from int."""

    value: int


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_TIME_CONSTANTS = {f"time.{month}": number for number, month in enumerate(_MONTHS, 1)}


_CONSTANTS: Mapping[str, Any] = {
    "true": True,
    "false": False,
    "nil": None,
    "math.MaxInt64": 2**63 - 1,
    "math.MinInt64": -(2**63),
    "math.MaxInt32": 2**31 - 1,
    "math.MinInt32": -(2**31),
    "math.MaxUint64": 2**64 - 1,
    "math.MaxFloat64": 1.7976931348623157e308,
    "math.MaxFloat32": 3.4028234663852886e38,
    "types.True": True,
    "types.False": False,
    "celtypes.True": True,
    "celtypes.False": False,
    "types.NullValue": None,
    "time.UTC": "UTC",
    **_TIME_CONSTANTS,
}
_SAME = ("types.Bool", "types.Int", "types.Double", "types.String", "int64", "int32", "int")
_FLOAT = ("float64", "float32", "types.Double")
_UNSIGNED = ("uint64", "uint32", "uint", "types.Uint")
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-3, "us": 1, "µs": 1, "ms": 1e3, "s": 1e6, "m": 6e7, "h": 3.6e9}


def go_duration(text: str) -> datetime.timedelta:
    """time.ParseDuration for the forms test tables use ("1h45m", "7m2s")."""
    if not re.fullmatch(rf"-?(?:{_GO_DURATION.pattern})+", text):
        raise UnknownValue(f"duration {text!r}")
    micros = sum(float(n) * _DURATION_UNITS[unit] for n, unit in _GO_DURATION.findall(text))
    return datetime.timedelta(microseconds=-micros if text.startswith("-") else micros)


def go_date(*parts: Any) -> datetime.datetime:
    """time.Date(year, month, day, hour, min, sec, nsec, time.UTC)."""
    year, month, day, hour, minute, second, nanos, _ = parts
    moment = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.UTC)
    return moment + datetime.timedelta(microseconds=nanos // 1000)


class Values:
    """Evaluates table expressions to Python values, with a function's locals and helpers."""

    def __init__(
        self,
        local: Mapping[str, Node] | None = None,
        helpers: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.local = dict(local or {})
        self.helpers = dict(helpers or {})

    def __call__(self, node: Node) -> Any:
        if isinstance(node, Literal):
            return node.value
        if isinstance(node, Name):
            return self.name(node.dotted)
        if isinstance(node, Unary):
            value = self(node.operand)
            if node.operator == "-":
                return -value
            if node.operator == "!":
                return not value
            return value  # & and * change nothing a table's reader sees
        if isinstance(node, Binary):
            return self.binary(node)
        if isinstance(node, Call):
            return self.call(node)
        if isinstance(node, Composite):
            return self.composite(node)
        raise UnknownValue(f"no value for {node}")

    def name(self, dotted: str) -> Any:
        if dotted in _CONSTANTS:
            return _CONSTANTS[dotted]
        if dotted in self.local:
            return self(self.local[dotted])
        raise UnknownValue(f"unknown name {dotted}")

    def binary(self, node: Binary) -> Any:
        left, right = self(node.left), self(node.right)
        operations: dict[str, Callable[[Any, Any], Any]] = {
            "+": lambda a, b: a + b,
            "-": lambda a, b: a - b,
            "*": lambda a, b: a * b,
        }
        if node.operator not in operations:
            raise UnknownValue(f"operator {node.operator}")
        return operations[node.operator](left, right)

    def call(self, node: Call) -> Any:
        if not isinstance(node.function, Name):
            raise UnknownValue("a call of an expression")
        name, arguments = node.function.dotted, [self(a) for a in node.arguments]
        if name in self.helpers:
            return self.helpers[name](*arguments)
        if name in _FLOAT:
            return float(arguments[0])
        if name in _SAME:
            return arguments[0]
        if name in _UNSIGNED:
            return Unsigned(int(arguments[0]))
        if name == "fmt.Sprintf":
            return go_sprintf(arguments[0], arguments[1:])
        if name == "resource.MustParse":
            return Quantity(arguments[0])
        if name == "math.NaN":
            return math.nan
        if name == "math.Inf":
            return math.inf if arguments[0] >= 0 else -math.inf
        if name in ("mustParseDuration", "time.ParseDuration"):
            return go_duration(arguments[0])
        raise UnknownValue(f"unknown function {name}")

    def composite(self, node: Composite) -> Any:
        if node.type.startswith("[]"):
            return [self(value) for _, value in node.elements]
        if node.type.startswith("map["):
            return {self(key): self(value) for key, value in node.elements if key is not None}
        if node.type in ("apiservercel.Quantity", "cel.Quantity"):
            (_, inner), *_ = node.elements
            return self(inner)
        raise UnknownValue(f"a composite of {node.type or 'an elided type'}")


def go_sprintf(template: str, arguments: Sequence[Any]) -> str:
    """fmt.Sprintf for the verbs tables use: %d, %s, %v, %f and %q."""
    remaining = list(arguments)

    def verb(match: re.Match[str]) -> str:
        kind = match.group(1)
        if kind == "%":
            return "%"
        value = remaining.pop(0)
        if kind == "q":
            return quote(str(value))
        if kind == "f":
            return f"{value:f}"
        if kind == "d":
            return str(int(value))
        return str(value)

    return re.sub(r"%([%dsvfq])", verb, template)
