"""cel-go's strings extension at version 2, as kube-apiserver runs it (cel-go v0.17.8 ext/strings.go
`Strings(StringsVersion(2))`, in the base environment since 1.29), in Python.

CEL's C++ runtime has its own strings extension, but its `format` differs from cel-go's (the
number formats, `%s` of lists and maps, infinities, the error texts) and it owns the names
`indexOf` and `lastIndexOf`, which the k8s.lists library also declares for lists. So the sandbox
declares the whole extension itself: each function below is cel-go's, transcribed, keyed by
cel-go's overload id. Strings are indexed by code point (Go's `[]rune`), as cel-go indexes them.

`format` is cel-go's `interpreter.ParseFormatString` with ext/strings.go's `stringFormatter` in
its default locale, en_US (the apiserver sets none): `%f` and `%e` print through
golang.org/x/text's message printer, so `%f` groups thousands ("1,234.500000") and `%e` writes
2.71828 as "2.718280", a narrow space, a multiplication sign, a narrow space and "10" with the
exponent in superscript digits (two at least), with six fraction digits whatever the precision
(cel-go passes the precision as the printer's width). cel-go's optional compile-time check of
format strings (cel.OptCheckStringFormat) is not enabled by the apiserver: a bad clause is an
evaluation error.
A uint reaches the sandbox's Python functions as an int, so an error names it `int`.
"""

from __future__ import annotations

import datetime
import math
import unicodedata
from collections.abc import Callable
from typing import Any

from cel_expr_python import cel

from volcano_guard_sandbox.apiserver import cel_go_values

_T = cel.Type
_GO_SPACE = " \t\n\v\f\r\x85\xa0"


class CelError(ValueError):
    """An evaluation error: CEL's error value, with cel-go's text."""


def _index_error(index: int) -> CelError:
    return CelError(f"index out of range: {index}")


def char_at(text: str, index: int) -> str:
    if index < 0 or index > len(text):
        raise _index_error(index)
    return text[index] if index < len(text) else ""


def index_of(text: str, sub: str, offset: int = 0) -> int:
    if sub == "":
        return offset
    if offset < 0 or offset >= len(text):
        raise _index_error(offset)
    return text.find(sub, offset)


def last_index_of(text: str, sub: str, offset: int | None = None) -> int:
    if offset is None:
        if sub == "":
            return len(text)
        offset = len(text) - 1
    if sub == "":
        return offset
    if offset < 0 or offset >= len(text):
        raise _index_error(offset)
    return text.rfind(sub, 0, min(offset, len(text) - len(sub)) + len(sub))


def _ascii(text: str, convert: Callable[[str], str]) -> str:
    return "".join(convert(c) if c < "\x80" else c for c in text)


def replace(text: str, old: str, new: str, count: int = -1) -> str:
    """Go's strings.Replace: an empty `old` matches before each rune and at the end."""
    if count < 0:
        count = len(text) + 1
    if old == "":
        pieces, done = [], 0
        for position in range(len(text) + 1):
            if done < count:
                pieces.append(new)
                done += 1
            if position < len(text):
                pieces.append(text[position])
        return "".join(pieces)
    return text.replace(old, new, count)


def split(text: str, separator: str, limit: int = -1) -> list[str]:
    """Go's strings.SplitN: 0 gives [], a negative limit all the pieces, "" splits runes."""
    if limit == 0:
        return []
    if separator == "":
        runes = list(text)
        if 0 < limit < len(runes):
            return [*runes[: limit - 1], "".join(runes[limit - 1 :])]
        return runes
    return text.split(separator, limit - 1 if limit > 0 else -1)


def substring(text: str, start: int, end: int | None = None) -> str:
    if end is None:
        if start < 0 or start > len(text):
            raise _index_error(start)
        return text[start:]
    if start > end:
        raise CelError(f"invalid substring range. start: {start}, end: {end}")
    for index in (start, end):
        if index < 0 or index > len(text):
            raise _index_error(index)
    return text[start:end]


def _is_go_space(character: str) -> bool:
    """Go's unicode.IsSpace: Latin-1 spaces and the White_Space property (category Z*)."""
    if character < "\u0100":
        return character in _GO_SPACE or character == " "
    return unicodedata.category(character) in ("Zs", "Zl", "Zp")


def trim(text: str) -> str:
    start, end = 0, len(text)
    while start < end and _is_go_space(text[start]):
        start += 1
    while end > start and _is_go_space(text[end - 1]):
        end -= 1
    return text[start:end]


def join(items: list[Any], separator: str = "") -> str:
    for item in items:
        if not isinstance(item, str):
            raise CelError(f"join: invalid input: {item}")
    return separator.join(items)


_QUOTED = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def quote(text: str) -> str:
    """strings.quote: CEL's escapes, every other rune as it is."""
    return '"' + "".join(_QUOTED.get(c, c) for c in text) + '"'


# -- format ---------------------------------------------------------------------------------------

DEFAULT_PRECISION = 6
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _kind(value: Any) -> str:
    """cel-go's type name of a value, as its errors print it."""
    if value is None:
        return "null_type"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes | bytearray):
        return "bytes"
    if isinstance(value, datetime.datetime):
        return "google.protobuf.Timestamp"
    if isinstance(value, datetime.timedelta):
        return "google.protobuf.Duration"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "map"
    if isinstance(value, cel.Type):
        return "type"
    if isinstance(value, cel_go_values.Optional):
        return "optional_type"
    full_name = getattr(getattr(value, "DESCRIPTOR", None), "full_name", None)
    return str(full_name or type(value).__name__)


def go_float(value: float) -> str:
    """Go's fmt %g: the shortest digits, in exponent form below 1e-4 or from 1e6 on."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    digits, exponent = _shortest(abs(value))
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole = digits[: exponent + 1].ljust(exponent + 1, "0")
    fraction = digits[exponent + 1 :]
    return sign + whole + ("." + fraction if fraction else "")


def _shortest(value: float) -> tuple[str, int]:
    """The shortest digits that read back as value (>= 0), and its decimal exponent."""
    if value == 0:
        return "0", 0
    significand, _, power = f"{value!r}".partition("e")
    whole, _, fraction = significand.partition(".")
    digits = (whole + fraction).lstrip("0")
    exponent = len(whole) - 1 + (int(power) if power else 0)
    if whole == "0":
        exponent = -(len(fraction) - len(fraction.lstrip("0"))) - 1 + (int(power) if power else 0)
    return digits.rstrip("0") or "0", exponent


def _go_fixed(value: float, precision: int) -> str:
    """Go's fmt %.Nf (no grouping): NaN, +Inf, -Inf for the special values."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.{precision}f}"


def _go_quote(text: str) -> str:
    """Go's %q (strconv.Quote) of a string."""
    out = []
    for character in text:
        if character in ('"', "\\"):
            out.append("\\" + character)
        elif character in "\a\b\f\n\r\t\v":
            out.append(_QUOTED[character])
        elif character.isprintable():
            out.append(character)
        elif ord(character) < 0x20 or ord(character) == 0x7F:
            out.append(f"\\x{ord(character):02x}")
        elif ord(character) < 0x10000:
            out.append(f"\\u{ord(character):04x}")
        else:
            out.append(f"\\U{ord(character):08x}")
    return '"' + "".join(out) + '"'


def _go_quote_bytes(data: bytes) -> str:
    """Go's %q of a byte string: its valid UTF-8 as a string, other bytes as \\x escapes."""
    out, position = [], 0
    while position < len(data):
        for width in (1, 2, 3, 4):
            try:
                character = data[position : position + width].decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append(_go_quote(character)[1:-1])
            position += width
            break
        else:
            out.append(f"\\x{data[position]:02x}")
            position += 1
    return '"' + "".join(out) + '"'


def _timestamp_text(value: datetime.datetime) -> str:
    """Go's time.RFC3339Nano in the timestamp's own zone (cel-go's string of it)."""
    return cel_go_values.rfc3339_nano(value)


def _duration_text(value: datetime.timedelta) -> str:
    """cel-go's duration as a string: strconv.FormatFloat(seconds, 'f', -1) + "s"."""
    seconds = value.total_seconds()
    return (repr(seconds).removesuffix(".0") if seconds == int(seconds) else repr(seconds)) + "s"


def _type_name(value: cel.Type) -> str:
    names = {"INT": "int", "UINT": "uint", "DOUBLE": "double", "STRING": "string"}
    name = value.name()
    return names.get(name, name.lower() if name.isupper() else name)


def format_string(value: Any) -> str:
    """stringFormatter.String (FormatString): the value as a string."""
    if isinstance(value, list):
        return _format_list(value)
    if isinstance(value, dict):
        return _format_map(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise CelError(
                'could not convert argument "invalid UTF-8 in bytes, cannot convert to string" '
                "to string"
            ) from None
    if isinstance(value, datetime.datetime):
        return _timestamp_text(value)
    if isinstance(value, datetime.timedelta):
        return _duration_text(value)
    if isinstance(value, cel.Type):
        return _type_name(value)
    raise CelError(
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
        f"types, durations, and timestamps, was given {_kind(value)}"
    )


def _format_member(value: Any) -> str:
    """clauseForType then quoteForCEL: a list's element or a map's value, as a CEL literal."""
    if isinstance(value, bool) or value is None:
        return format_string(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = _go_fixed(value, DEFAULT_PRECISION)
        return f'"{text}"' if math.isinf(value) or math.isnan(value) else text
    if isinstance(value, str):
        return _go_quote(value)
    if isinstance(value, bytes | bytearray):
        return "b" + _go_quote_bytes(bytes(value))
    if isinstance(value, datetime.datetime):
        return f'timestamp("{_timestamp_text(value)}")'
    if isinstance(value, datetime.timedelta):
        return f'duration("{_duration_text(value)}")'
    if isinstance(value, list):
        return _format_list(value)
    if isinstance(value, dict):
        return _format_map(value)
    if isinstance(value, cel.Type):
        return _type_name(value)
    raise CelError(f"no formatting function for {_kind(value)}")


def _format_list(items: list[Any]) -> str:
    return "[" + ", ".join(_format_member(item) for item in items) + "]"


def _format_map(mapping: dict[Any, Any]) -> str:
    pairs = []
    for held, value in mapping.items():
        key = cel_go_values.plain_key(held)
        if isinstance(key, str):
            key_text = _go_quote(key)
        elif isinstance(key, bool):
            key_text = "true" if key else "false"
        elif isinstance(key, int):
            key_text = str(key)
        else:
            raise CelError(f"no formatting function for map key of type {_kind(key)}")
        pairs.append((key_text, _format_member(value)))
    pairs.sort(key=lambda pair: pair[0].encode("utf-8"))
    return "{" + ", ".join(f"{key}:{value}" for key, value in pairs) + "}"


def _format_decimal(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise CelError(f"decimal clause can only be used on integers, was given {_kind(value)}")


def _float_argument(value: Any, clause: str) -> float:
    """Fixed and Scientific: a double, or the strings "NaN", "Infinity", "-Infinity"."""
    if isinstance(value, str) and value in ("NaN", "Infinity", "-Infinity"):
        return float(value.replace("Infinity", "inf"))
    if not isinstance(value, float):
        raise CelError(f"{clause} clause can only be used on doubles, was given {_kind(value)}")
    return value


def _special(value: float) -> str | None:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return None


def _group_thousands(text: str) -> str:
    """en_US decimal grouping of the integer part (x/text's message printer)."""
    sign = "-" if text.startswith("-") else ""
    whole, dot, fraction = text.removeprefix("-").partition(".")
    return sign + f"{int(whole):,}" + dot + fraction


def _format_fixed(value: Any, precision: int | None) -> str:
    number = _float_argument(value, "fixed-point")
    special = _special(number)
    if special is not None:
        return special
    return _group_thousands(f"{number:.{DEFAULT_PRECISION if precision is None else precision}f}")


def _format_scientific(value: Any, precision: int | None) -> str:
    """cel-go prints "%<precision>e" (default 6): a width, not a precision, so six fraction
    digits always, padded with spaces on the left to that many runes (x/text's printer)."""
    number = _float_argument(value, "scientific")
    text = _special(number)
    if text is None:
        mantissa, _, exponent = f"{number:.{DEFAULT_PRECISION}e}".partition("e")
        power = int(exponent)
        superscript = ("-" if power < 0 else "") + f"{abs(power):02d}"
        text = f"{mantissa}\u202f\u00d7\u202f10{superscript.translate(_SUPERSCRIPT)}"
    width = DEFAULT_PRECISION if precision is None else precision
    return text.rjust(width)


def _format_binary(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return format(value, "b")
    raise CelError(f"only integers and bools can be formatted as binary, was given {_kind(value)}")


def _format_hex(value: Any, upper: bool) -> str:
    if isinstance(value, str):
        text = value.encode("utf-8").hex()
    elif isinstance(value, bytes | bytearray):
        text = bytes(value).hex()
    elif isinstance(value, int) and not isinstance(value, bool):
        text = format(value, "x")
    else:
        raise CelError(
            "only integers, byte buffers, and strings can be formatted as hex, "
            f"was given {_kind(value)}"
        )
    return text.upper() if upper else text


def _format_octal(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return format(value, "o")
    raise CelError(f"octal clause can only be used on integers, was given {_kind(value)}")


def _clause(text: str, position: int) -> tuple[int, Callable[[Any], str]]:
    """parseFormattingClause at text[position:] (after the %): the end and the formatter."""
    precision: int | None = None
    if text[position] == ".":
        position += 1
        start = position
        while True:
            if position >= len(text):
                raise CelError(
                    "could not parse formatting clause: error while parsing precision: "
                    "could not find end of precision specifier"
                )
            if not ("0" <= text[position] <= "9"):
                break
            position += 1
        if position == start:
            raise CelError(
                "could not parse formatting clause: error while parsing precision: error while "
                'converting precision to integer: strconv.Atoi: parsing "": invalid syntax'
            )
        precision = int(text[start:position])
    verb = text[position]
    formatters: dict[str, Callable[[Any], str]] = {
        "s": format_string,
        "d": _format_decimal,
        "f": lambda value: _format_fixed(value, precision),
        "e": lambda value: _format_scientific(value, precision),
        "b": _format_binary,
        "x": lambda value: _format_hex(value, upper=False),
        "X": lambda value: _format_hex(value, upper=True),
        "o": _format_octal,
    }
    if verb not in formatters:
        raise CelError(
            f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
        )
    return position + 1, formatters[verb]


def string_format(text: str, arguments: list[Any]) -> str:
    """interpreter.ParseFormatString with ext/strings.go's stringFormatter (locale en_US)."""
    if not isinstance(arguments, list):  # a dyn argument that is not a list (traits.Lister)
        raise CelError("no such overload")
    built, position, argument = [], 0, 0
    while position < len(text):
        if text[position] != "%":
            built.append(text[position])
            position += 1
            continue
        if text[position + 1 : position + 2] == "%":
            built.append("%")
            position += 2
            continue
        if argument >= len(arguments):
            raise CelError(f"index {argument} out of range")
        if position + 1 >= len(text):
            raise CelError("unexpected end of string")
        position, formatter = _clause(text, position + 1)
        try:
            built.append(formatter(arguments[argument]))
        except CelError as exc:
            raise CelError(f"error during formatting: {exc}") from None
        argument += 1
    return "".join(built)


# (name, overload id, parameter types, return type, member, implementation), cel-go's
# declarations at version 2, in ext/strings.go's order.
_S, _I, _LS = _T.STRING, _T.INT, cel.Type.List(_T.STRING)
STRINGS_OVERLOADS: tuple[tuple[str, str, tuple[cel.Type, ...], cel.Type, bool, Any], ...] = (
    ("charAt", "string_char_at_int", (_S, _I), _S, True, char_at),
    ("indexOf", "string_index_of_string", (_S, _S), _I, True, index_of),
    ("indexOf", "string_index_of_string_int", (_S, _S, _I), _I, True, index_of),
    ("lastIndexOf", "string_last_index_of_string", (_S, _S), _I, True, last_index_of),
    ("lastIndexOf", "string_last_index_of_string_int", (_S, _S, _I), _I, True, last_index_of),
    ("lowerAscii", "string_lower_ascii", (_S,), _S, True, lambda s: _ascii(s, str.lower)),
    ("replace", "string_replace_string_string", (_S, _S, _S), _S, True, replace),
    ("replace", "string_replace_string_string_int", (_S, _S, _S, _I), _S, True, replace),
    ("split", "string_split_string", (_S, _S), _LS, True, split),
    ("split", "string_split_string_int", (_S, _S, _I), _LS, True, split),
    ("substring", "string_substring_int", (_S, _I), _S, True, substring),
    ("substring", "string_substring_int_int", (_S, _I, _I), _S, True, substring),
    ("trim", "string_trim", (_S,), _S, True, trim),
    ("upperAscii", "string_upper_ascii", (_S,), _S, True, lambda s: _ascii(s, str.upper)),
    (
        "format",
        "string_format",
        (_S, cel.Type.List(_T.DYN)),
        _S,
        True,
        string_format,
    ),
    ("strings.quote", "strings_quote", (_S,), _S, False, quote),
    ("join", "list_join", (_LS,), _S, True, join),
    ("join", "list_join_string", (_LS, _S), _S, True, join),
)
