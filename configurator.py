"""Config files (Python assignments) and --key=value overrides, checked against dataclass fields.

    python train.py config/owt_nlq.py --batch_size=8 --query_mode=identity
    python train.py --help

Arguments apply left to right. Every key must be a field of one of the given dataclasses (a typo is an
error that suggests the nearest keys) and every value must fit the field's type. A bare --flag sets a
bool field to True. Tuple fields take a comma list (--tasks=lambada,wikitext) or Python syntax. --help
lists every field with its type, its domain (nlq/common/domains.py), its default and the comment written beside it in
the dataclass, so the help cannot drift from the code.
"""

import ast
import dataclasses
import difflib
import inspect
import io
import math
import re
import sys
import tokenize
import types
import typing

from nlq.common.domains import domain_of
from nlq.common.errors import ConfigError


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(key, value, tp, where):
    def fail():
        raise ConfigError(f"{key}={value!r} ({where}) is not of type {_type_name(tp)}")

    args = typing.get_args(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _coerce(key, value, next(a for a in args if a is not type(None)), where)
    if typing.get_origin(tp) is tuple:
        if not isinstance(value, (tuple, list)):
            fail()
        return tuple(_coerce(key, v, args[0], where) for v in value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, bool) or not isinstance(value, tp):
        fail()
    return value


def _tuple_item_type(tp):
    """The element type of a tuple field (tuple[X, ...] or tuple[X, ...] | None), else None."""
    for t in (tp, *typing.get_args(tp)):
        if typing.get_origin(t) is tuple:
            return typing.get_args(t)[0]
    return None


def _command_line_value(raw: str, tp):
    """A command-line string as a Python value: strings need no quotes, tuples take comma lists."""
    if tp is str or tp == str | None and raw != "None":
        return raw
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = _non_finite(raw)
    item_tp = _tuple_item_type(tp)
    if item_tp is not None and value is not None and not isinstance(value, (tuple, list)):
        value = tuple(_command_line_value(item.strip(), item_tp) for item in raw.split(",") if item.strip())
    return value


def _non_finite(raw: str):
    """nan, inf, -inf (Python's float spellings) as the float, for the field's domain to refuse as not finite
    (literal_eval reads none of them); any other text stays text."""
    try:
        value = float(raw)
    except ValueError:
        return raw
    return raw if math.isfinite(value) else value


def field_docs(cls) -> list[tuple[str, str, str]]:
    """(section, field, comment) for each field of a dataclass, read from its source: the comment at the
    end of the field's line, and the section from the last comment line above it ('' if none)."""
    out, section = [], ""
    names = {f.name for f in dataclasses.fields(cls)}
    source = inspect.getsource(cls)
    lines = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            lines.setdefault(tok.start[0], []).append((tok.start[1], tok.string.lstrip("# ").strip()))
    for number, text in enumerate(source.splitlines(), 1):
        stripped = text.strip()
        if stripped.startswith("#") and number in lines:
            section = lines[number][0][1]
            continue
        m = re.match(r"\s*(\w+)\s*:", text)
        if m and m.group(1) in names:
            comment = next((c for col, c in lines.get(number, []) if col > 0), "")
            out.append((section, m.group(1), comment))
    return out


def help_text(prog: str, doc: str, schemas) -> str:
    """Every field of every schema: name, type, default and its comment, grouped by section."""
    parts = [doc.strip(), "", f"usage: python {prog} [CONFIG_FILE.py ...] [--key=value ...]", ""]
    for cls in schemas:
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        current = None
        for section, name, comment in field_docs(cls):
            heading = f"{cls.__name__}: {section}" if section else cls.__name__
            if heading != current:
                parts += ["", heading]
                current = heading
            domain = domain_of(cls, name)
            kind = _type_name(hints[name]) + (f"; {domain.describe()}" if domain else "")
            parts.append(f"  --{name}={defaults[name]!r}  ({kind})" + (f"  {comment}" if comment else ""))
    return "\n".join(parts) + "\n"


def parse(argv, *schemas, doc: str = "", prog: str = ""):
    """One instance of each dataclass in schemas, from defaults, config files and overrides. -h / --help
    prints every field and exits 0."""
    if any(a in ("-h", "--help") for a in argv):
        print(help_text(prog or sys.argv[0], doc, schemas), end="")
        sys.exit(0)
    spec = {}
    for cls in schemas:
        hints = typing.get_type_hints(cls)
        spec.update({f.name: (cls, hints[f.name]) for f in dataclasses.fields(cls)})

    names = " and ".join(cls.__name__ for cls in schemas)

    def check_key(key, where):
        if key not in spec:
            near = difflib.get_close_matches(key, spec, n=3, cutoff=0.6)
            hint = f": did you mean {' or '.join(near)}?" if near else f": the keys are the fields of {names} (--help)"
            raise ConfigError(f"unknown config key {key!r} ({where}){hint}")

    values = {}
    for arg in argv:
        if arg.startswith("--"):
            key, eq, raw = arg[2:].partition("=")
            check_key(key, "command line")
            tp = spec[key][1]
            if not eq:  # a bare --flag sets a bool field, as in argparse's store_true
                if tp is not bool:
                    raise ConfigError(f"{arg}: overrides are written --key=value (--help lists the keys)")
                raw = "True"
            values[key] = _coerce(key, _command_line_value(raw, tp), tp, "command line")
        elif arg.startswith("-"):
            raise ConfigError(f"{arg}: options are written --key=value (--help lists the keys)")
        else:
            namespace = {"__file__": arg}
            try:
                with open(arg) as f:
                    exec(compile(f.read(), arg, "exec"), namespace)
            except FileNotFoundError:
                raise ConfigError(f"config file {arg} not found") from None
            except Exception as e:  # a config file is code: report its error in one line, with the place
                raise ConfigError(f"config file {arg} failed: {type(e).__name__}: {e}") from None
            for key, value in namespace.items():
                if key.startswith("_") or isinstance(value, (types.ModuleType, types.FunctionType, type)):
                    continue
                check_key(key, arg)
                values[key] = _coerce(key, value, spec[key][1], arg)
    out = []
    for cls in schemas:
        try:  # a dataclass may validate itself in __post_init__
            out.append(cls(**{k: v for k, v in values.items() if spec[k][0] is cls}))
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return out
