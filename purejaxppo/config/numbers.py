"""Numbers as users spell them on the command line, parsed strictly: ASCII only.

Python's ``int``/``float`` also accept other scripts' digits (``int("٤") == 4``, full-width
``"４"``), so a pasted or auto-corrected character would silently become a number. These
accept what Python's literals do (``1_000_000``, ``2.5e-4``, ``inf``, ``nan``) and nothing
else; a whole-number field given ``5e5`` or ``1.0`` is refused with the spelling to use.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation


def parse_int(text: str) -> int:
    """A whole number (``ValueError`` naming the spelling to use otherwise)."""
    s = text.strip()
    if s.isascii():
        try:
            return int(s, 10)
        except ValueError:
            pass
    hint = ""
    try:
        d = Decimal(s.replace("_", "")) if s.isascii() else None
        if d is not None and d.is_finite() and d == d.to_integral_value():
            hint = f"; write it as {int(d)}"
    except InvalidOperation:
        pass
    raise ValueError(f"expected a whole number written in ASCII digits like 128, got {text!r}{hint}")


def parse_float(text: str) -> float:
    """A number (``1e-3``, ``0.5``, ``inf``, ``nan``); ``ValueError`` otherwise."""
    s = text.strip()
    if s.isascii():
        try:
            return float(s)
        except ValueError:
            pass
    raise ValueError(f"expected a number written in ASCII like 2.5e-4, got {text!r}")
