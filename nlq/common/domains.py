"""The domain of every config field, declared on the field's own line and checked in one place.

    n_layer: Annotated[int, At(1)] = 12  # transformer blocks

A config dataclass calls check(self) first thing in __post_init__, so a value outside its domain is refused
however the config is made: config file, command line, a checkpoint's recorded model_args. Each domain
also names values just outside it (outside()), from which the tests try every field. bool fields need no
domain: their type is their domain. Constraints between fields stay in the class's __post_init__.
"""

import argparse
import dataclasses
import math
import operator
import re
import types
import typing


class Domain:
    def problem(self, value) -> str | None:
        """None if value is inside, else what it must be."""
        raise NotImplementedError

    def outside(self) -> list:
        """Values just outside the domain (of the field's type where possible)."""
        raise NotImplementedError

    def describe(self) -> str:
        """The domain in a few words, for --help."""
        raise NotImplementedError


OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


class At(Domain):
    """A finite number: >= lo, <= hi, > above, < below (each None: no bound)."""

    def __init__(self, lo=None, hi=None, above=None, below=None):
        self.bounds = [(">=", lo), ("<=", hi), (">", above), ("<", below)]

    def problem(self, value):
        if not math.isfinite(value):
            return "must be a finite number"
        for op, bound in self.bounds:
            if bound is not None and not OPS[op](value, bound):
                return f"must be {op} {bound}"
        return None

    def outside(self):
        """nan, inf, and for each bound the bound itself or its nearest neighbours beyond it."""
        beyond = {
            ">=": lambda b: [b - 1, math.nextafter(b, -math.inf)],
            "<=": lambda b: [b + 1, math.nextafter(b, math.inf)],
            ">": lambda b: [b, b - 1],
            "<": lambda b: [b, b + 1],
        }
        return [math.nan, math.inf] + [v for op, b in self.bounds if b is not None for v in beyond[op](b)]

    def describe(self):
        return ", ".join(f"{op} {b}" for op, b in self.bounds if b is not None)


class OneOf(Domain):
    def __init__(self, *values):
        self.values = values

    def problem(self, value):
        return None if value in self.values else f"must be one of {', '.join(map(str, self.values))}"

    def outside(self):
        return ["nonsense", ""]

    def describe(self):
        return " | ".join(map(str, self.values))


class Text(Domain):
    """A non-empty string without line breaks (a path, a name); pattern: a regex it must match whole."""

    def __init__(self, pattern: str | None = None, hint: str = "a non-empty name or path on one line"):
        self.pattern, self.hint = pattern, hint

    def problem(self, value):
        if not value or "\n" in value or (self.pattern and not re.fullmatch(self.pattern, value)):
            return f"must be {self.hint}"
        return None

    def outside(self):
        return ["", "two\nlines"]

    def describe(self):
        return self.hint


class AnyText(Domain):
    """Any string (a prompt)."""

    def problem(self, value):
        return None

    def outside(self):
        return []

    def describe(self):
        return "any text"


class Each(Domain):
    """A tuple whose items are all in a domain; nonempty=True: at least one item."""

    def __init__(self, item: Domain, nonempty: bool = False):
        self.item, self.nonempty = item, nonempty

    def problem(self, value):
        if self.nonempty and not value:
            return "must name at least one item"
        for v in value:
            p = self.item.problem(v)
            if p:
                return f"holds {v!r}, which {p.replace('must be', 'is not')}"
        return None

    def outside(self):
        return [(v,) for v in self.item.outside()] + ([()] if self.nonempty else [])

    def describe(self):
        return ("one or more of: " if self.nonempty else "each: ") + self.item.describe()


DEVICE = Text(r"auto|cpu|mps|cuda(:\d+)?", "auto, cpu, cuda, cuda:N or mps")
DTYPE = OneOf("auto", "float32", "bfloat16", "float16")


def domain_of(cls, name: str) -> Domain | None:
    hint = typing.get_type_hints(cls, include_extras=True)[name]
    found = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Domain)]
    return found[0] if found else None


def base_type(cls, name: str):
    """The field's type without its domain and without None: int, float, str, bool or tuple."""
    tp = typing.get_type_hints(cls)[name]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    return typing.get_origin(tp) or tp


def check(config) -> None:
    """Every field of a config dataclass is of its type and inside its domain; else ValueError, one line.
    A list given for a tuple field (JSON has no tuples) becomes the tuple."""
    cls = type(config)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value = getattr(config, f.name)
        if value is None and type(None) in typing.get_args(hints[f.name]):
            continue
        tp = base_type(cls, f.name)
        if tp is tuple and isinstance(value, list):
            value = tuple(value)
            setattr(config, f.name, value)
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            setattr(config, f.name, value)
        if not isinstance(value, tp) or (tp is not bool and isinstance(value, bool)):
            raise ValueError(f"{f.name}={value!r} is invalid: it must be of type {tp.__name__}")
        domain = domain_of(cls, f.name)
        if domain is None and tp is float:  # a float without bounds is still a finite number
            domain = At()
        try:
            problem = domain.problem(value) if domain else None
        except TypeError:  # an item of the wrong type inside a tuple
            problem = "must hold items of the field's type"
        if problem:
            raise ValueError(f"{f.name}={value!r} is invalid: it {problem}")


class Number:
    """A script's float option, as an argparse type: a number inside its domain (a finite one at least, as a
    config field's), else argparse's one-line error saying what it must be, before the script does anything."""

    def __init__(self, domain: At | None = None):
        self.domain = domain or At()
        self.__name__ = "number"  # argparse names the type by it

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        problem = self.domain.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{text} is invalid: it {problem}")
        return value
