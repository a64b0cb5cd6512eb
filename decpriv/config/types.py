"""What each plugin key accepts, declared once in the plugin's signature.

A plugin states the type and the allowed values of a key in its annotation::

    def __init__(self, lr: Annotated[float, Range(gt=0, what="the learning rate", eg=0.1)] = 0.1,
                 dtype: Literal["float32", "float64"] = "float32"): ...

That one declaration is the check (:mod:`decpriv.config.validation` refuses a bad value before anything is
built; :func:`checked` refuses it when the plugin is called from Python), the refusal sentence
(key, value, why, fix: :func:`refusal`) and the key's documentation (``decpriv list GROUP``:
:func:`describe`). Checks that relate two keys, or a key to the data or the graph, stay in the plugin.
"""

import functools
import inspect
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from omegaconf import DictConfig, ListConfig

from decpriv.errors import ConfigError, bad_value


def _number(x: float) -> str:
    return f"{x:.0e}" if isinstance(x, int) and abs(x) >= 10**6 else f"{x:g}"


@dataclass(frozen=True)
class Range:
    """Bounds on a number (``gt``/``ge`` below, ``lt``/``le`` above). ``what`` names the quantity in the
    refusal ("the learning rate must be positive"); ``eg`` is a good value offered in its fix."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None
    what: str = "the value"
    eg: Any = None

    def __repr__(self) -> str:
        return f"Range({self.bounds()})"

    def admits(self, value: float) -> bool:
        return (
            (self.gt is None or value > self.gt)
            and (self.ge is None or value >= self.ge)
            and (self.lt is None or value < self.lt)
            and (self.le is None or value <= self.le)
        )

    def bounds(self) -> str:
        """``> 0``, ``>= 1``, ``in (0, 1]``: the allowed values, as ``decpriv list`` shows them."""
        low = ("(", self.gt) if self.gt is not None else ("[", self.ge) if self.ge is not None else None
        high = (")", self.lt) if self.lt is not None else ("]", self.le) if self.le is not None else None
        if low and high:
            return f"in {low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
        if low:
            return f"{'>' if low[0] == '(' else '>='} {_number(low[1])}"
        if high:
            return f"{'<' if high[0] == ')' else '<='} {_number(high[1])}"
        return "any number"

    def why(self) -> str:
        bounds = self.bounds()
        op, _, number = bounds.partition(" ")
        words = {"> 0": "must be positive", ">= 0": "is non-negative"}.get(bounds) or {
            "in": f"lies {bounds}",
            ">": f"must exceed {number}",
            ">=": f"must be at least {number}",
            "<": f"must be below {number}",
            "<=": f"must be at most {number}",
        }.get(op, "may be any number")
        return f"{self.what} {words}"

    def fix(self, key: str) -> str:
        if self.eg is not None:
            return f"use e.g. {key}={self.eg}"
        bounds = self.bounds()
        return f"use {key} {bounds}" if bounds.startswith("in ") else f"set {key} {bounds}"


def _branches(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _unwrap(annotation: Any) -> tuple[Any, tuple[Any, ...]]:
    """(the bare type, its declared constraints) of one branch of a union."""
    if typing.get_origin(annotation) is Annotated:
        base, *extra = typing.get_args(annotation)
        return base, tuple(m for m in extra if isinstance(m, Range))
    return annotation, ()


def accepts(annotation: Any, value: Any) -> bool:
    """Whether ``value`` has the declared type (constraints aside); undeclared types accept anything."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(accepts(a, value) for a in typing.get_args(annotation))
    if origin is Annotated:
        return accepts(typing.get_args(annotation)[0], value)
    if origin is Literal:  # 1 == True == 1.0: the choice must match in type too
        return any(value == a and type(value) is type(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin in (tuple, list) or annotation in (tuple, list):
        return isinstance(value, list | tuple | ListConfig)
    if origin is dict or annotation is dict:
        return isinstance(value, dict | DictConfig)
    return True


def describe(annotation: Any) -> str:
    """The declaration in a user's words: ``float > 0``, ``int in [8, 48] | null``, ``'sum' | 'mean'``."""
    parts = []
    for branch in _branches(annotation):
        base, constraints = _unwrap(branch)
        if typing.get_origin(base) is Literal:
            parts.append(" | ".join(repr(a) for a in typing.get_args(base)))
            continue
        named = getattr(base, "__name__", None) if not typing.get_args(base) else None
        text = "null" if base is type(None) else named or str(base)
        text = text.replace("typing.", "").replace("NoneType", "null")
        parts.append(" ".join([text, *(c.bounds() for c in constraints)]))
    return " | ".join(parts)


def refusal(key: str, annotation: Any, value: Any, strict: bool = True) -> ConfigError | None:
    """The one sentence refusing ``value`` for the dotted ``key`` declared as ``annotation``; None if it
    fits. A declared constraint gives its own why and fix; a value outside a ``Literal`` lists the
    choices; a value of the wrong type names the type (only when ``strict``: Python callers may pass
    numpy numbers and the like, which a config never holds)."""
    nullable = any(b is type(None) for b in _branches(annotation))
    broken = None
    for branch in _branches(annotation):
        base, constraints = _unwrap(branch)
        if not accepts(base, value):
            continue
        broken = next((c for c in constraints if not c.admits(value)), None)
        if broken is None:
            return None
    if broken is not None:
        return bad_value(key, value, broken.why(), broken.fix(key) + (" or null" if nullable else ""))
    choices = [a for b in _branches(annotation) for a in typing.get_args(_unwrap(b)[0]) if _is_literal(b)]
    if choices and strict and _numbers(annotation):
        return _outside_mixed(key, annotation, value, choices)
    if choices and (strict or any(type(value) is type(c) for c in choices)):
        switch = ["true", "false"] if any(_unwrap(b)[0] is bool for b in _branches(annotation)) else []
        named = ", ".join([*switch, *map(str, choices)])
        return bad_value(key, value, "not one of its choices", f"use one of {named}")
    if not strict:
        return None
    return bad_value(key, value, f"expected {describe(annotation)}", "give a value of that type")


def _numbers(annotation: Any) -> list[tuple[Any, tuple[Any, ...]]]:
    """The number branches (``int``, ``float``, with their constraints) of a declaration."""
    unwrapped = [_unwrap(b) for b in _branches(annotation)]
    return [(base, c) for base, c in unwrapped if base in (int, float)]


def _outside_mixed(key: str, annotation: Any, value: Any, choices: list[Any]) -> ConfigError:
    """A value fitting no branch of a number-or-choice declaration (``int >= 1 | 'auto' | null``): the
    whole declaration, the number's example beside the choices, and a quoted number read as the number."""
    base, constraints = _numbers(annotation)[0]
    what = next((c.what for c in constraints if c.what != "the value"), None)
    said = f"{what} is {describe(annotation)}" if what else f"expected {describe(annotation)}"
    if isinstance(value, str):
        try:
            number = base(value.strip())
        except ValueError:
            number = None
        if number is not None and refusal(key, annotation, number) is None:
            return bad_value(
                key, value, f"{said}, and quotes make it text", f"write it unquoted: {key}={number}"
            )
    eg = next((c.eg for c in constraints if c.eg is not None), None)
    nullable = any(b is type(None) for b in _branches(annotation))
    options = [*([f"{key}={eg}"] if eg is not None else []), *(f"{key}={c}" for c in choices)]
    options += [f"{key}=null"] if nullable else []
    listed = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
    return bad_value(key, value, said, f"use e.g. {listed}")


def _is_literal(branch: Any) -> bool:
    return typing.get_origin(_unwrap(branch)[0]) is Literal


@functools.cache
def declared(function: Callable) -> dict[str, Any]:
    """The annotations of ``function`` (a plugin's ``_target_``: a function, or a class's __init__),
    with their Annotated constraints kept."""
    return typing.get_type_hints(function, include_extras=True)


def checked(group: str) -> Callable:
    """Refuse a call whose arguments break their declared constraints, naming them ``group.key``: the
    same declaration that validation reads from a config guards a plugin built from Python.
    Decorates a plugin function or class (its ``__init__``)."""

    def decorate(target: Any) -> Any:
        function = target.__init__ if inspect.isclass(target) else target
        signature = inspect.signature(function)

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            hints = declared(function)
            bound = signature.bind(*args, **kwargs)
            for key, value in bound.arguments.items():
                if key in hints:
                    error = refusal(f"{group}.{key}", hints[key], value, strict=False)
                    if error is not None:
                        raise error
            return function(*args, **kwargs)

        if inspect.isclass(target):
            target.__init__ = call
            return target
        return call

    return decorate
