"""JSON number automata: one spelling per value, exact decimal bounds, multipleOf by a modulo DFA.

Each numeric value is accepted only as `json.dumps` spells the Python int or float holding it,
in plain decimal notation (no exponent): integer digits without leading zeros ("0", "-5"),
any fraction without trailing zeros ("1.5", never "1.50"). An integral value is plain digits
("81", so `json.loads` gives an int, as SGLang/XGrammar/llguidance emit); inside
`integral_floats(True)` its float spelling with one zero fraction ("81.0", the integer 81 as
JSON Schema says) is accepted too. Zero is never negative ("-0",
"-0.0" are rejected) and a fraction has at most MAX_FRACTION_DIGITS digits (every plain float
repr fits), so a bounded range is a finite language and a model cannot loop on digits that
do not change the value. Free-form values use the same numbers, so complements (`not`) agree.
Bounds and multiples are decided exactly on the digits over a broader internal language
(BROAD_NONNEG_RE) and then cut down to those spellings.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from decimal import Decimal, InvalidOperation

import interegular

from sgl_runtime.constrained.automata import Dfa, charset, from_interegular, literal, minimize
from sgl_runtime.constrained.automata_ops import concat, difference, intersect, union
from sgl_runtime.constrained.errors import ConstraintError

MAX_MODULUS_STATES = 20_000
MAX_BOUND_DIGITS = 400
MAX_FRACTION_DIGITS = 20  # repr(float) in plain notation: <= 17 significant digits, >= 1e-4
_FRACTION_RE = r"\.(0|[0-9]{0,%d}[1-9])" % (MAX_FRACTION_DIGITS - 1)
_NONZERO_RE = r"(0\.[0-9]{0,%d}[1-9]|[1-9][0-9]*(%s)?)" % (MAX_FRACTION_DIGITS - 1, _FRACTION_RE)
NUMBER_RE = r"(0|[1-9][0-9]*)(%s)?|-%s" % (_FRACTION_RE, _NONZERO_RE)  # one spelling per value
BROAD_NONNEG_RE = r"(0|[1-9][0-9]*)(\.[0-9]+)?"  # any digits; only inside bound computations
ZERO_RE = r"0(\.0+)?"
_FRACTION_DIGITS_RE = r"\.[0-9]{0,%d}[1-9]" % (MAX_FRACTION_DIGITS - 1)
NUMBER_DIGITS_RE = r"(0|[1-9][0-9]*)(%s)?|-(0%s|[1-9][0-9]*(%s)?)" % (  # integral values as digits only
    _FRACTION_DIGITS_RE,
    _FRACTION_DIGITS_RE,
    _FRACTION_DIGITS_RE,
)
_INTEGRAL_FLOATS: contextvars.ContextVar = contextvars.ContextVar("json_schema_integral_floats", default=False)


@contextlib.contextmanager
def integral_floats(allowed: bool):
    """Within this context, integral values may also be spelled with one zero fraction ("1.0")."""
    token = _INTEGRAL_FLOATS.set(bool(allowed))
    try:
        yield
    finally:
        _INTEGRAL_FLOATS.reset(token)


def integral_floats_allowed() -> bool:
    """Whether integral values may be spelled "1.0" here (see `integral_floats`)."""
    return _INTEGRAL_FLOATS.get()


@functools.lru_cache(maxsize=512)
def rx(pattern: str) -> Dfa:
    """A Dfa for a trusted internal regex (interegular syntax)."""
    return from_interegular(interegular.parse_pattern(pattern).to_fsm())


def number_universe() -> Dfa:
    """The spellings of every number; also the numbers of free-form values, so `not` stays sound."""
    return rx(NUMBER_RE) if _INTEGRAL_FLOATS.get() else rx(NUMBER_DIGITS_RE)


def _all_spellings() -> Dfa:
    """Both spellings of integral values: what the cached bound automata are cut down to."""
    return rx(NUMBER_RE)


def integer_universe() -> Dfa:
    """Integer values: plain digits (or also the integral float spelling with one ".0")."""
    return rx(r"0(\.0)?|-?[1-9][0-9]*(\.0)?") if _INTEGRAL_FLOATS.get() else rx(r"0|-?[1-9][0-9]*")


def to_decimal(value, keyword: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConstraintError(f"{keyword}: expected a number, got {value!r}")
    try:
        dec = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    except InvalidOperation:
        raise ConstraintError(f"{keyword}: {value!r} is not a finite number") from None
    if not dec.is_finite():
        raise ConstraintError(f"{keyword}: {value!r} is not a finite number")
    return dec


def _split(mag: Decimal) -> tuple[str, str]:
    """Integer digits and fraction digits (trailing zeros stripped) of a nonnegative decimal."""
    text = format(mag, "f")
    whole, _, frac = text.partition(".")
    whole = whole.lstrip("0") or "0"
    if len(whole) + len(frac) > MAX_BOUND_DIGITS:
        raise ConstraintError(f"numeric bound {text} has too many digits")
    return whole, frac.rstrip("0")


def _bigger_digit(d: str) -> str:
    return "[%s-9]" % (int(d) + 1) if d != "9" else ""


@functools.lru_cache(maxsize=256)
def _mag_gt(mag: Decimal) -> Dfa:
    whole, frac = _split(mag)
    n = len(whole)
    alts = ["[1-9][0-9]{%d,}" % n]
    for i, d in enumerate(whole):
        if d != "9":
            alts.append(whole[:i] + _bigger_digit(d) + "[0-9]{%d}" % (n - i - 1))
    int_gt = "(" + "|".join(alts) + r")(\.[0-9]+)?"
    frac_alts = [frac + "[0-9]*[1-9][0-9]*"]
    for i, d in enumerate(frac):
        if d != "9":
            frac_alts.append(frac[:i] + _bigger_digit(d) + "[0-9]*")
    same_int = whole + r"\.(" + "|".join(frac_alts) + ")"
    return rx(int_gt + "|" + same_int)


@functools.lru_cache(maxsize=256)
def _mag_eq(mag: Decimal) -> Dfa:
    whole, frac = _split(mag)
    return rx(whole + (r"(\.0+)?" if not frac else r"\." + frac + "0*"))


def _mag_ge(mag: Decimal) -> Dfa:
    return union(_mag_gt(mag), _mag_eq(mag))


def _neg(dfa: Dfa) -> Dfa:
    return concat(literal("-"), dfa)


@functools.lru_cache(maxsize=256)
def greater_than(c: Decimal, inclusive: bool) -> Dfa:
    """Canonical numbers x with x > c (x >= c when inclusive)."""
    return intersect(_all_spellings(), _broad_greater_than(c, inclusive))


def _broad_greater_than(c: Decimal, inclusive: bool) -> Dfa:
    nonneg = rx(BROAD_NONNEG_RE)
    if c > 0:
        return _mag_ge(c) if inclusive else _mag_gt(c)
    if c == 0:
        return union(nonneg, _neg(rx(ZERO_RE))) if inclusive else _mag_gt(c)
    mag = -c
    neg_side = difference(nonneg, _mag_gt(mag)) if inclusive else difference(nonneg, _mag_ge(mag))
    return union(nonneg, _neg(neg_side))


def less_than(c: Decimal, inclusive: bool) -> Dfa:
    """Canonical numbers x with x < c (x <= c when inclusive)."""
    return difference(_all_spellings(), greater_than(c, not inclusive))


@functools.lru_cache(maxsize=256)
def multiple_of(k: Decimal) -> Dfa:
    """Canonical numbers x with x / k an integer (k > 0), by tracking digits modulo K."""
    if k <= 0:
        raise ConstraintError("multipleOf: must be greater than 0")
    sign, digits, exponent = k.normalize().as_tuple()
    scale = max(0, -exponent)
    modulus = int(k * (Decimal(10) ** scale))
    if modulus * (scale + 2) > MAX_MODULUS_STATES:
        raise ConstraintError(f"multipleOf: {k} needs too many states (modulus {modulus})")
    return intersect(_all_spellings(), _modulo_dfa(modulus, scale))


def _modulo_dfa(modulus: int, scale: int) -> Dfa:
    """Numbers x with x * 10**scale an integer divisible by `modulus` (digits tracked mod K)."""
    digit = [charset(str(d)) for d in range(10)]
    edges: list[list] = []

    def new() -> int:
        edges.append([])
        return len(edges) - 1

    start, minus, zero = new(), new(), new()
    ip = [new() for _ in range(modulus)]
    dot = [new() for _ in range(modulus)]
    frac = [[new() for _ in range(modulus)] for _ in range(scale + 1)]
    edges[start].append((charset("-"), minus))
    for src in (start, minus):
        edges[src].append((digit[0], zero))
        edges[src] += [(digit[d], ip[d % modulus]) for d in range(1, 10)]
    edges[zero].append((charset("."), dot[0]))
    finals = {zero}
    for r in range(modulus):
        edges[ip[r]] += [(digit[d], ip[(r * 10 + d) % modulus]) for d in range(10)]
        edges[ip[r]].append((charset("."), dot[r]))
        if scale == 0:
            edges[dot[r]].append((digit[0], frac[0][r]))
        else:
            edges[dot[r]] += [(digit[d], frac[1][(r * 10 + d) % modulus]) for d in range(10)]
        for j in range(1, scale):
            edges[frac[j][r]] += [(digit[d], frac[j + 1][(r * 10 + d) % modulus]) for d in range(10)]
        edges[frac[scale][r]].append((digit[0], frac[scale][r]))
        if (r * 10**scale) % modulus == 0:
            finals.add(ip[r])
        for j in range(scale + 1):
            if (r * 10 ** (scale - j)) % modulus == 0 and (j > 0 or scale == 0):
                finals.add(frac[j][r])
    return minimize(Dfa(tuple(tuple(e) for e in edges), frozenset(finals)))


def number_dfa(integer: bool, schema: dict) -> Dfa:
    """Numbers (or integers) satisfying the numeric keywords of `schema`."""
    parts = [integer_universe() if integer else number_universe()]
    if "minimum" in schema:
        parts.append(greater_than(to_decimal(schema["minimum"], "minimum"), True))
    if "exclusiveMinimum" in schema:
        parts.append(greater_than(to_decimal(schema["exclusiveMinimum"], "exclusiveMinimum"), False))
    if "maximum" in schema:
        parts.append(less_than(to_decimal(schema["maximum"], "maximum"), True))
    if "exclusiveMaximum" in schema:
        parts.append(less_than(to_decimal(schema["exclusiveMaximum"], "exclusiveMaximum"), False))
    if "multipleOf" in schema:
        parts.append(multiple_of(to_decimal(schema["multipleOf"], "multipleOf")))
    return intersect(*parts)


def number_literal_dfa(value) -> Dfa:
    """The spellings of the numeric value `value`: "1" (and "1.0" with integral floats) for one, "1.5" for 1.5."""
    dec = to_decimal(value, "const/enum")
    whole, frac = _split(abs(dec))
    sign = "-" if dec < 0 else ""
    if frac:
        return literal(f"{sign}{whole}.{frac}")
    if not _INTEGRAL_FLOATS.get():
        return literal(sign + whole)
    return union(literal(sign + whole), literal(f"{sign}{whole}.0"))
