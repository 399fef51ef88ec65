"""String `format` values as decoded-content DFAs (each a conservative subset of the RFC syntax).

Every accepted string is valid for its format (a subset: e.g. upper-case `T`/`Z` only in
date-times, no leap seconds, `http(s)`-style URIs with an authority); unknown formats are
annotations and constrain nothing, as JSON Schema 2020-12 specifies.
"""

from __future__ import annotations

import functools

from sgl_runtime.constrained.automata import Dfa
from sgl_runtime.constrained.json_schema.numbers import rx

_LEAP_YEAR = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)"
_DATE = (
    "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)"
    "|02-(0[1-9]|1[0-9]|2[0-8]))|" + _LEAP_YEAR + "-02-29)"
)
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_HEX = "[0-9a-fA-F]"
_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = _LABEL + "(\\." + _LABEL + "){0,2}"
_SHORT_LABEL = "[A-Za-z0-9]([A-Za-z0-9-]{0,22}[A-Za-z0-9])?"  # inside emails and URIs: fewer states
_DOMAIN = _SHORT_LABEL + "(\\." + _SHORT_LABEL + "){1,2}"
_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = _OCTET + "(\\." + _OCTET + "){3}"
_H = _HEX + "{1,4}"
_IPV6 = "|".join(
    [
        f"({_H}:){{7}}{_H}",
        f"({_H}:){{1,7}}:",
        f"({_H}:){{1,6}}:{_H}",
        f"({_H}:){{1,5}}(:{_H}){{1,2}}",
        f"({_H}:){{1,4}}(:{_H}){{1,3}}",
        f"({_H}:){{1,3}}(:{_H}){{1,4}}",
        f"({_H}:){{1,2}}(:{_H}){{1,5}}",
        f"{_H}:(:{_H}){{1,6}}",
        f":((:{_H}){{1,7}}|:)",
    ]
)
_LOCAL = "[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*"
_EMAIL = _LOCAL + "@" + _DOMAIN
_SEGMENT = "[A-Za-z0-9._~-]*"
_URI = (
    "[a-z][a-z0-9+.-]{0,15}://(" + _SHORT_LABEL + "(\\." + _SHORT_LABEL + "){0,2}|" + _IPV4 + ")(:[0-9]{1,5})?"
    "(/" + _SEGMENT + ")*(\\?[A-Za-z0-9._~=&-]*)?(#[A-Za-z0-9._~-]*)?"
)

FORMAT_REGEXES = {
    "date": _DATE,
    "time": _TIME,
    "date-time": _DATE + "T" + _TIME,
    "uuid": f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}",
    "email": _EMAIL,
    "hostname": _HOSTNAME,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uri": _URI,
}


@functools.lru_cache(maxsize=None)
def format_content(name: str) -> Dfa | None:
    """The decoded-content DFA for format `name`, or None for an unknown (annotation-only) format."""
    pattern = FORMAT_REGEXES.get(name)
    return None if pattern is None else rx(pattern)
