"""Config files (Python assignments) and --key=value overrides, checked against dataclass fields.

    python train.py config/owt_nlq.py --batch_size=8 --query_mode=identity

Arguments apply left to right. Every key must be a field of one of the given dataclasses (a typo is an
error that suggests the nearest keys) and every value must fit the field's type.
"""

import ast
import dataclasses
import difflib
import types
import typing


class ConfigError(Exception):
    """A config problem, explained in one line."""


def _coerce(key, value, tp, where):
    def fail():
        raise ConfigError(f"{key}={value!r} ({where}) is not of type {getattr(tp, '__name__', tp)}")

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


def parse(argv, *schemas):
    """One instance of each dataclass in schemas, from defaults, config files and overrides."""
    spec = {}
    for cls in schemas:
        hints = typing.get_type_hints(cls)
        spec.update({f.name: (cls, hints[f.name]) for f in dataclasses.fields(cls)})

    names = " and ".join(cls.__name__ for cls in schemas)

    def check_key(key, where):
        if key not in spec:
            near = difflib.get_close_matches(key, spec, n=3, cutoff=0.6)
            hint = f": did you mean {' or '.join(near)}?" if near else f": the keys are the fields of {names}"
            raise ConfigError(f"unknown config key {key!r} ({where}){hint}")

    values = {}
    for arg in argv:
        if arg.startswith("--"):
            key, eq, raw = arg[2:].partition("=")
            if not eq:
                raise ConfigError(f"{arg}: overrides are written --key=value")
            check_key(key, "command line")
            tp = spec[key][1]
            if tp is str or tp == str | None and raw != "None":
                value = raw  # strings need no quotes on the command line
            else:
                try:
                    value = ast.literal_eval(raw)
                except (ValueError, SyntaxError):
                    value = raw
            values[key] = _coerce(key, value, tp, "command line")
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
