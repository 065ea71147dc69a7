"""How a setting is read and checked, for every table of ``config.toml`` and every environment
override: strict tables (a typo is an error, not a setting left at its default), typed values,
seconds, counts, flags, host names and listen addresses, node names, URLs, TOML strings."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload
from urllib.parse import urlsplit

from hearthnet.errors import BadRequest

__all__ = [
    "LOG_LEVELS",
    "NAME_MAX",
    "api_key",
    "array_of_tables",
    "check_host",
    "check_log_level",
    "check_name",
    "check_unique_models",
    "check_url",
    "configured_or_new",
    "described_server",
    "env_float",
    "env_int",
    "flag",
    "get",
    "host_problem",
    "integer",
    "parse_listen",
    "positive_float",
    "seconds",
    "shown_name",
    "switched",
    "table",
    "toml_string",
    "with_entry",
]

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

S = TypeVar("S", bound="DataclassInstance")

NAME_MAX = 64
"""A node's name is 1..64 printable characters: every peer's ``status`` shows it."""
LOG_LEVELS = ("debug", "info", "warning", "error")
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


# -- tables and values of config.toml ---------------------------------------------------------
def table(data: Any, name: str, known: frozenset[str]) -> Mapping[str, Any]:
    """A table of config.toml with only the ``known`` keys (a typo is an error, not a setting
    silently left at its default)."""
    if not isinstance(data, dict):
        raise BadRequest(f"[{name}] in config.toml must be a table")
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        where = f" in [{name}]" if name else ""
        raise BadRequest(
            f"unknown config key(s){where}: {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    return data


def array_of_tables(
    data: Mapping[str, Any],
    key: str,
    where: str,
    known: frozenset[str],
    required: tuple[str, ...],
    most: int | None = None,
) -> list[tuple[str, Mapping[str, Any]]]:
    """``[[where.key]]`` of config.toml: at most ``most`` tables, each strict (``known`` keys) and
    holding every ``required`` key; each returned with the name its errors go by
    (``[[where.key]] #i in config.toml``)."""
    name = f"{where}.{key}"
    raw_tables = get(data, key, list, [], where)
    if most is not None and len(raw_tables) > most:
        raise BadRequest(f"[[{name}]] in config.toml has {len(raw_tables)} tables; at most {most}")
    out = []
    for i, raw in enumerate(raw_tables, start=1):
        t = table(raw, name, known)
        named = f"[[{name}]] #{i} in config.toml"
        for needed in required:
            if needed not in t:
                raise BadRequest(f"{named} needs {needed}")
        out.append((named, t))
    return out


def get(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str) -> Any:
    """``data[key]``, or ``default`` if absent; another TOML type than ``kind`` is ``bad_request``
    (``bool`` is not an ``int``)."""
    if key not in data:
        return default
    value = data[key]
    wanted = kind if isinstance(kind, tuple) else (kind,)
    if (isinstance(value, bool) and bool not in wanted) or not isinstance(value, wanted):
        names = " or ".join("true/false" if k is bool else k.__name__ for k in wanted)
        raise BadRequest(f"{where}.{key} in config.toml must be {names}, got {value!r}")
    return value


def seconds(data: Mapping[str, Any], key: str, default: float, where: str, name: str | None = None) -> float:
    """``data[key]`` as a positive number of seconds (``default`` if absent); errors name ``name``."""
    return positive_float(get(data, key, (int, float), default, where), name or key)


@overload
def integer(data: Mapping[str, Any], key: str, default: int, low: int, where: str) -> int: ...
@overload
def integer(data: Mapping[str, Any], key: str, default: None, low: int, where: str) -> int | None: ...
def integer(data: Mapping[str, Any], key: str, default: int | None, low: int, where: str) -> int | None:
    """``data[key]`` as an integer of at least ``low`` (``default`` if absent)."""
    value: int | None = get(data, key, int, default, where)
    if value is not None and value < low:
        raise BadRequest(f"{where}.{key} must be at least {low}, got {value}")
    return value


# -- values from the environment --------------------------------------------------------------
def flag(text: str, name: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise BadRequest(f"{name} must be true or false, got {text!r}")


def described_server(
    env: Mapping[str, str], prefix: str, names: tuple[str, ...], what: str
) -> tuple[str, str] | None:
    """``(base_url, model)`` of the one server that the variables ``names`` describe (``None``
    when none is set); ``bad_request`` if one is set without ``{prefix}_BASE_URL`` and ``{prefix}_MODEL``."""
    given = [name for name in names if name in env]
    if not given:
        return None
    base_url, model = env.get(f"{prefix}_BASE_URL"), env.get(f"{prefix}_MODEL")
    if not base_url or not model:
        raise BadRequest(f"{given[0]} describes {what}: set {prefix}_BASE_URL and {prefix}_MODEL too")
    return base_url, model


def api_key(variable: str | None, environ: Mapping[str, str], what: str) -> str | None:
    """The key in the environment variable ``variable`` (``None`` when no variable is named);
    ``bad_request`` naming ``what`` (the model) when that variable is not set."""
    if variable is None:
        return None
    key = environ.get(variable)
    if not key:
        raise BadRequest(f"{what}: the API key variable {variable} is not set")
    return key


def check_unique_models(names: list[str], what: str) -> None:
    """``bad_request`` when two of ``what`` (e.g. ``llm models``) share a model name."""
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BadRequest(f"two {what} share the model name {', '.join(dupes)}: give each its own model name")


def switched(section: S, env: Mapping[str, str], variable: str) -> S:
    """``section`` (a frozen settings dataclass with an ``enabled`` field) turned on or off by
    the environment ``variable`` if it is set (``HEARTHNET_LLM=off``)."""
    if variable not in env:
        return section
    return replace(section, enabled=flag(env[variable], variable))


class _OfModel(Protocol):
    @property
    def model(self) -> str: ...


M = TypeVar("M", bound=_OfModel)


def configured_or_new(entries: Iterable[M], model: str, new: Callable[[], M]) -> M:
    """The entry of ``entries`` for ``model`` (an environment override changes it), or ``new()``."""
    return next((e for e in entries if e.model == model), None) or new()


def with_entry(entries: tuple[M, ...], entry: M) -> tuple[M, ...]:
    """``entries`` with ``entry`` in place of the one of its model, or added at the end."""
    return (*(e for e in entries if e.model != entry.model), entry)


def positive_float(value: Any, name: str) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"{name} must be a number, got {value!r}") from exc
    if not 0 < f < 1e9:  # NaN and infinity too: a deadline of inf seconds overflows later
        raise BadRequest(f"{name} must be a positive number of seconds, got {value!r}")
    return f


def env_int(env: Mapping[str, str], name: str, default: int, low: int) -> int:
    text = env.get(name)
    if text is None:
        return default
    text = text.strip()
    if not (text.isascii() and text.isdigit()) or int(text) < low:
        raise BadRequest(f"{name} must be a whole number of at least {low}, got {text!r:.40}")
    return int(text)


def env_float(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"{name} must be a number, got {text!r}") from None
    if value != value:  # NaN
        raise BadRequest(f"{name} must be a number, got {text!r}")
    return value


# -- hosts, names, URLs ----------------------------------------------------------------------
def host_problem(host: str) -> str | None:
    """Why ``host`` is neither an IP address nor a well-formed host name, or ``None``."""
    if not host:
        return "the host is empty"
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    if ":" in host:
        return f"{host!r} is not a valid IPv6 address"
    if all(part.isdigit() for part in host.split(".")):
        return f"{host!r} is not a valid IPv4 address"
    name = host[:-1] if host.endswith(".") else host
    labels = name.split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return f"{host!r} is not a valid host name (letters, digits and '-' in dot-separated labels)"
    if labels[-1].isdigit():
        return f"{host!r} is not a valid host name (its last label is a number)"
    return None


def parse_listen(text: str, setting: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets) as ``(host, port)``; errors name ``setting``."""
    host, sep, port = text.rpartition(":")
    shape = "HOST:PORT (an IP address or host name, and a port 0-65535; port 0 takes any free port)"
    if not sep or not port.isdigit() or int(port) > 65535:
        raise BadRequest(f"{setting} must be {shape}, got {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    problem = host_problem(host)
    if problem is not None:
        raise BadRequest(f"{setting} must be {shape}, got {text!r}: {problem}")
    return host, int(port)


def check_host(host: str, setting: str) -> str:
    """``host`` if it is an IP address or a well-formed host name; errors name ``setting``."""
    problem = host_problem(host)
    if problem is not None:
        raise BadRequest(f"{setting} must be an IP address or host name: {problem}")
    return host


def shown_name(name: str) -> str:
    """A peer's name as ``status`` shows it: what its own config allows (64 printable characters),
    whatever an older or hostile peer announces; other characters become U+FFFD."""
    return "".join(ch if ch.isprintable() else "\ufffd" for ch in name[:NAME_MAX])


def check_name(name: str, setting: str) -> str:
    """A node name: 1..64 printable characters (no control or format characters)."""
    if not name.strip():
        raise BadRequest(f"{setting} must not be empty: give 1-{NAME_MAX} printable characters")
    if len(name) > NAME_MAX:
        raise BadRequest(f"{setting} is {len(name)} characters long; the limit is {NAME_MAX}")
    if not name.isprintable():
        bad = next(ch for ch in name if not ch.isprintable())
        raise BadRequest(
            f"{setting} must be printable characters only; it holds U+{ord(bad):04X} "
            "(a control or format character)"
        )
    return name


def check_log_level(level: str, name: str) -> str:
    if level.lower() not in LOG_LEVELS:
        raise BadRequest(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return level.lower()


def check_url(url: str | None, name: str) -> str | None:
    """``None``, or an http(s) URL with a host and a valid port (checked here, not at first use)."""
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number below 65536 raises here
    except ValueError as exc:
        raise BadRequest(f"{name} is not a valid URL: {url!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"{name} must be an http(s) URL with a host, got {url!r}")
    return url


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: backslash, quote and every control character escaped
    (a newline could otherwise start a table of its own), everything else as it is (an emoji
    stays one character; JSON's surrogate-pair escapes are not valid TOML)."""
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch < " " or ch == "\x7f":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'
