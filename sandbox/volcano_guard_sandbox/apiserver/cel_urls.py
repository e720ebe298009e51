"""The k8s.url library (k8s.io/apiserver pkg/cel/library/urls.go; in the base environment since
1.0) in Python: `url()`, `isURL()`, and a URL's getScheme, getHost, getHostname, getPort,
getEscapedPath and getQuery, on a transcription of the parts of Go's net/url they call
(`ParseRequestURI` to validate, `Parse` to read, `Hostname`, `Port`, `EscapedPath`, `Query`).

A URL is the protobuf message `kubernetes.URL` (the type name the apiserver gives it) holding
the string it was made from; each accessor parses it again, as cheap as Go's stored fields here.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

_HEX = set(string.hexdigits)
_UNRESERVED = set(string.ascii_letters + string.digits + "-_.~")


class URLError(ValueError):
    """Go's *url.Error: `parse "<url>": <reason>`."""


@dataclass
class ParsedURL:
    scheme: str = ""
    opaque: str = ""
    host: str = ""
    path: str = ""
    raw_path: str = ""
    raw_query: str = ""


def _should_escape(character: str, mode: str) -> bool:
    """net/url shouldEscape for the modes the library uses: path, host, query component."""
    if character in _UNRESERVED:
        return False
    if mode == "host":
        return character not in "!$&'()*+,;=:[]<>\""
    if mode == "path":
        return character not in "$&+,/:;=@"
    return True  # query component: every reserved character


def _unescape(text: str, mode: str) -> str:
    """net/url unescape: %XX sequences checked and decoded ('+' is a space in a query)."""
    data, position = bytearray(), 0
    while position < len(text):
        character = text[position]
        if character == "%":
            escape = text[position : position + 3]
            if len(escape) < 3 or not set(escape[1:]) <= _HEX:
                raise URLError(f"invalid URL escape {escape!r}".replace("'", '"'))
            data.append(int(escape[1:], 16))
            position += 3
            continue
        if mode == "host" and character < "\x80" and _should_escape(character, "host"):
            raise URLError(f"invalid character {character!r} in host name".replace("'", '"'))
        if mode == "query" and character == "+":
            data.extend(b" ")
        else:
            data.extend(character.encode("utf-8"))
        position += 1
    return data.decode("utf-8", errors="replace")


def _escape(text: str, mode: str) -> str:
    out = []
    for byte in text.encode("utf-8"):
        character = chr(byte)
        if byte < 0x80 and not _should_escape(character, mode):
            out.append(character)
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


def _scheme(raw: str) -> tuple[str, str]:
    for index, character in enumerate(raw):
        if character.isascii() and character.isalpha():
            continue
        if character.isascii() and (character.isdigit() or character in "+-."):
            if index == 0:
                return "", raw
            continue
        if character == ":":
            if index == 0:
                raise URLError("missing protocol scheme")
            return raw[:index], raw[index + 1 :]
        return "", raw
    return "", raw


def _valid_optional_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all(c in string.digits for c in port[1:]))


def _host(host: str) -> str:
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise URLError("missing ']' in host")
        if not _valid_optional_port(host[end + 1 :]):
            raise URLError(f'invalid port "{host[end + 1 :]}" after host')
    elif (colon := host.rfind(":")) != -1 and not _valid_optional_port(host[colon:]):
        raise URLError(f'invalid port "{host[colon:]}" after host')
    return _unescape(host, "host")


def _authority(authority: str) -> str:
    at = authority.rfind("@")
    host = _host(authority[at + 1 :])
    if at >= 0:
        allowed = set(string.ascii_letters + string.digits + "-._:~!$&'()*+,;=%@")
        if not set(authority[:at]) <= allowed:
            raise URLError("net/url: invalid userinfo")
    return host


def _parse(raw: str, via_request: bool) -> ParsedURL:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise URLError("net/url: invalid control character in URL")
    if raw == "" and via_request:
        raise URLError("empty url")
    url = ParsedURL()
    if raw == "*":
        url.path = "*"
        return url
    scheme, rest = _scheme(raw)
    url.scheme = scheme.lower()
    if rest.endswith("?") and rest.count("?") == 1:
        rest = rest[:-1]
    else:
        rest, _, url.raw_query = rest.partition("?")
    if not rest.startswith("/"):
        if url.scheme:
            url.opaque = rest
            return url
        if via_request:
            raise URLError("invalid URI for request")
        if ":" in rest.partition("/")[0]:
            raise URLError("first path segment in URL cannot contain colon")
    authority_follows = url.scheme or (not via_request and not rest.startswith("///"))
    if authority_follows and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        url.host = _authority(authority)
        rest = slash + path
    url.path = _unescape(rest, "path")
    url.raw_path = "" if _escape(url.path, "path") == rest else rest
    return url


def parse_request_uri(raw: str) -> ParsedURL:
    try:
        return _parse(raw, via_request=True)
    except URLError as exc:
        raise URLError(f'parse "{raw}": {exc}') from None


def parse(raw: str) -> ParsedURL:
    without_fragment = raw.partition("#")[0]
    try:
        return _parse(without_fragment, via_request=False)
    except URLError as exc:
        raise URLError(f'parse "{raw}": {exc}') from None


def _split_host_port(host_port: str) -> tuple[str, str]:
    host, port = host_port, ""
    colon = host_port.rfind(":")
    if colon != -1 and _valid_optional_port(host_port[colon:]):
        host, port = host_port[:colon], host_port[colon + 1 :]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def _valid_encoded(text: str) -> bool:
    """net/url validEncoded (path mode): only characters a path may hold unescaped."""
    return all(c in "!$&'()*+,;=:@[]%" or not _should_escape(c, "path") for c in text)


def escaped_path(url: ParsedURL) -> str:
    """net/url URL.EscapedPath: the raw path if it is a valid encoding of the path."""
    if url.raw_path and _valid_encoded(url.raw_path):
        try:
            if _unescape(url.raw_path, "path") == url.path:
                return url.raw_path
        except URLError:
            pass
    if url.path == "*":
        return "*"
    return _escape(url.path, "path")


def query(url: ParsedURL) -> dict[str, list[str]]:
    """net/url ParseQuery, errors ignored as URL.Query ignores them."""
    values: dict[str, list[str]] = {}
    for pair in url.raw_query.split("&") if url.raw_query else ():
        if ";" in pair or pair == "":
            continue
        key, _, value = pair.partition("=")
        try:
            key, value = _unescape(key, "query"), _unescape(value, "query")
        except URLError:
            continue
        values.setdefault(key, []).append(value)
    return values


def is_url(text: str) -> bool:
    try:
        parse_request_uri(text)
    except URLError:
        return False
    return True


def validated(text: str) -> str:
    """urls.go stringToUrl: the string, once ParseRequestURI and Parse accept it."""
    try:
        parse_request_uri(text)
        parse(text)
    except URLError as exc:
        raise URLError(f"URL parse error during conversion from string: {exc}") from None
    return text


ACCESSORS: dict[str, Any] = {
    "url_get_scheme": lambda url: url.scheme,
    "url_get_host": lambda url: url.host,
    "url_get_hostname": lambda url: _split_host_port(url.host)[0],
    "url_get_port": lambda url: _split_host_port(url.host)[1],
    "url_get_escaped_path": escaped_path,
    "url_get_query": query,
}


def _url_overloads() -> tuple[tuple[str, str, tuple[Any, ...], Any, bool, Any], ...]:
    """urlLibraryDecls, with urls.go's overload ids; a URL is a kubernetes.URL message."""
    from cel_expr_python import cel

    from volcano_guard_sandbox.apiserver.kubernetes_cel import URL_MESSAGE, URL_TYPE

    url_type = cel.Type(URL_TYPE)
    text = cel.Type.STRING

    def accessor(overload: str) -> Any:
        read = ACCESSORS[overload]
        return lambda url: read(parse(url.value))

    getters = (
        ("getScheme", "url_get_scheme", text),
        ("getHost", "url_get_host", text),
        ("getHostname", "url_get_hostname", text),
        ("getPort", "url_get_port", text),
        ("getEscapedPath", "url_get_escaped_path", text),
        ("getQuery", "url_get_query", cel.Type.Map(text, cel.Type.List(text))),
    )
    return (
        (
            "url",
            "string_to_url",
            (text,),
            url_type,
            False,
            lambda s: URL_MESSAGE(value=validated(s)),
        ),
        *(
            (name, overload, (url_type,), result, True, accessor(overload))
            for name, overload, result in getters
        ),
        ("isURL", "is_url_string", (text,), cel.Type.BOOL, False, is_url),
    )


URL_OVERLOADS = _url_overloads()
