"""Tools a model can call, made from this kernel's functions.

    from cellbox import tool

    @tool
    def mean(xs: list[float]) -> float:
        \"\"\"The mean of some numbers.\"\"\"
        return sum(xs) / len(xs)

A tool's input schema (JSON Schema) comes from the function's signature: its type hints
(int, float, str, bool, None, list, tuple, dict, Optional, Union, Literal, an Enum, a
dataclass, a TypedDict, a pydantic model) and defaults. Its description is the docstring's
summary and prose; the parameters' come from a Google ("Args:") or NumPy ("Parameters" and a
line of dashes) section. @tool(save=True) proposes the tool for the API key's library, for
later sessions: its source must then stand alone (it may import modules, but use no other
variable or function of this session). Code in the session never saves it: the API's caller
does (POST /v1/sessions/{id}/tools/{name}/save, or the web page's Tools panel).

    tool(fn, name=None, description=None, save=False)   register fn; returns fn
    tools()                                             the tools, as the model sees them
    remove_tool(name)                                   drop one
"""
import ast
import base64
import dataclasses
import dis
import enum
import inspect
import json
import linecache
import re
import sys
import textwrap
import types
import typing

__all__ = ["tool", "tools", "remove_tool"]

MAX_TOOLS = 64
MAX_DESCRIPTION = 1024  # characters
MAX_SCHEMA = 64 << 10  # bytes of JSON
MAX_SOURCE = 256 << 10  # bytes of UTF-8
MAX_REPORT = 4 << 20  # bytes of all the tools' JSON together, as the runner sends it
MAX_TEXT = 64 << 10  # characters of a result's repr
MAX_VALUE = 1 << 20  # bytes of a result's JSON; past it, its repr
RESULT_MIME = "application/vnd.cellbox.tool-result+json"

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
_RESERVED = ("python", "shell", "javascript", "typescript", "r", "bash")  # the built-in tools (guestproto.BuiltinTools)
_DEPTH = 32  # nesting of types, and of values in a result

_registry = {}  # name -> _Tool, in the order they were first registered
_version = 0  # counts the registry's changes; the runner reports when it moves
_loads = [0]  # sources _load ran, for their file names


class _Tool:
    __slots__ = ("fn", "name", "description", "schema", "source", "save", "sig", "hints", "size")

    def report(self):
        return {"name": self.name, "description": self.description, "input_schema": self.schema,
                "source": self.source, "save": self.save}


def tool(fn=None, *, name=None, description=None, save=False):
    """Registers fn as a tool the model can call, and returns fn unchanged.

    @tool, @tool(name=..., description=..., save=...) or tool(fn, ...). name is fn's own by
    default (letters, digits, _ and -, at most 64); description is the docstring's prose by
    default. save=True proposes the tool for the API key's library (its source must stand
    alone), which the API's caller may then save it to. A tool of the same name is replaced.
    """
    if fn is None:
        return lambda f: tool(f, name=name, description=description, save=save)
    _register(fn, name, description, bool(save))
    return fn


def tools():
    """The registered tools: name, description, input_schema, source and save of each."""
    return [json.loads(json.dumps(t.report())) for t in _registry.values()]


def remove_tool(name):
    """Drops the tool called name."""
    global _version
    if name not in _registry:
        raise KeyError("there is no tool named %r; %s" % (name, _names()))
    del _registry[name]
    _version += 1


def _names():
    if not _registry:
        return "there are no tools"
    return "the tools are: " + ", ".join(_registry)


def _register(fn, name, description, save):
    global _version
    if not callable(fn):
        raise TypeError("tool takes a function, not %s (to name the tool: @tool(name=...))" % type(fn).__name__)
    if name is None:
        name = getattr(fn, "__name__", "")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError("%r can't be a tool's name: a name is 1 to 64 letters, digits, _ or - "
                         "(pass one with @tool(name=...))" % (name,))
    if name.lower() in _RESERVED:
        raise ValueError("%r can't be a tool's name: %s are built-in tools" % (name, ", ".join(_RESERVED)))
    if description is not None and not isinstance(description, str):
        raise TypeError("a tool's description is a str, not %s" % type(description).__name__)
    if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError("%s is async; a tool is a plain function (it may call asyncio.run)" % name)
    if name not in _registry and len(_registry) >= MAX_TOOLS:
        raise ValueError("this kernel has %d tools, the most it keeps: remove one (cellbox.remove_tool) first" % MAX_TOOLS)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        raise TypeError("the signature of %s can't be read: %s" % (name, e)) from None
    doc = _parse_doc(getattr(fn, "__doc__", None))
    schema, hints = _signature_schema(fn, name, sig, doc[1])
    size = len(_compact(schema))
    if size > MAX_SCHEMA:
        raise ValueError("the input schema of %s is %d KiB of JSON, more than the %d KiB a tool may have"
                         % (name, (size + 1023) >> 10, MAX_SCHEMA >> 10))
    desc = doc[0] if description is None else description.strip()
    if len(desc) > MAX_DESCRIPTION:
        desc = desc[:MAX_DESCRIPTION - 3] + "..."
    source = _source(fn)
    if save:
        source = _standalone(fn, source, name, description)
    if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE:
        raise ValueError("the source of %s is more than the %d KiB a tool may have" % (name, MAX_SOURCE >> 10))
    t = _Tool()
    t.fn, t.name, t.description, t.schema, t.source, t.save = fn, name, desc, schema, source, save
    t.sig, t.hints = sig, hints
    t.size = len(_compact(t.report())) + 1
    total = t.size + sum(getattr(o, "size", 0) for n, o in _registry.items() if n != name)
    if total > MAX_REPORT:
        raise ValueError("with %s, this kernel's tools would be %d KiB together (names, descriptions, schemas and "
                         "sources as JSON), more than the %d KiB it keeps: remove one (cellbox.remove_tool) or "
                         "make this one smaller" % (name, (total + 1023) >> 10, MAX_REPORT >> 10))
    old = _registry.get(name)
    _registry[name] = t
    if old is None or _compact(old.report()) != _compact(t.report()):
        _version += 1  # the same definition run again changes nothing the model sees


def _compact(v):
    # As the runner sends it: the sizes measured here are the sizes on the wire.
    return json.dumps(v, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


# --- Schemas ---


class _Unexpressible(Exception):
    pass


# TypedDict's marks of a key (Required[T], NotRequired[T]): T.
_MARKS = tuple(getattr(typing, n) for n in ("Required", "NotRequired", "ReadOnly") if hasattr(typing, n))

_SIMPLE = {bool: {"type": "boolean"}, int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"}}


def _signature_schema(fn, name, sig, pdocs):
    glob = _globals(fn)
    props, required, hints, defs = {}, [], {}, {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError("parameter %s%s of %s: a tool takes named arguments only, not *args or **kwargs"
                            % ("*" if p.kind == p.VAR_POSITIONAL else "**", p.name, name))
        ann = p.annotation
        try:
            hint = _resolve(ann, glob)
            s = dict(_schema(hint, glob, (), defs))
        except _Unexpressible as e:
            raise TypeError("parameter %r of %s: the annotation %s can't be expressed in JSON Schema (%s); a tool's "
                            "parameters may be int, float, str, bool, None, list, tuple, dict, Optional, Union, "
                            "Literal, an Enum, a dataclass, a TypedDict or a pydantic model"
                            % (p.name, name, _tname(ann), e)) from None
        if p.default is p.empty:
            required.append(p.name)
        else:
            if p.default is None and not _admits_null(s):
                s = {"anyOf": [s, {"type": "null"}]}  # x: T = None means Optional[T]
            d = _json_default(p.default)
            if d is not _NO:
                s["default"] = d
        if p.name in pdocs:
            s["description"] = pdocs[p.name]
        props[p.name] = s
        hints[p.name] = hint
    out = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if defs:
        out["$defs"] = defs
    return out, hints


def _globals(fn):
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    return getattr(fn, "__globals__", None) or {}


def _admits_null(s):
    return not s or s.get("type") == "null" or any(_admits_null(a) for a in s.get("anyOf", ())) or \
        (None in s.get("enum", ()) and "type" not in s)


def _resolve(ann, glob):
    if isinstance(ann, str):
        ann = typing.ForwardRef(ann)
    if isinstance(ann, typing.ForwardRef):
        try:
            return eval(ann.__forward_arg__, dict(glob))
        except Exception as e:
            raise _Unexpressible("%s: %s" % (type(e).__name__, e)) from None
    return ann


def _tname(tp):
    if isinstance(tp, str):
        return repr(tp)
    if isinstance(tp, type) and not typing.get_args(tp):
        return tp.__qualname__
    return repr(tp).replace("typing.", "")


def _jtype(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    return None


def _enum_schema(values, what):
    out = []
    for v in values:
        if isinstance(v, enum.Enum):
            v = v.value
        if _jtype(v) is None or (isinstance(v, float) and v != v):
            raise _Unexpressible("%s %r is not a JSON string, number, boolean or null" % (what, v))
        out.append(v)
    s = {"enum": out}
    kinds = {_jtype(v) for v in out}
    if len(kinds) == 1:
        s = {"type": kinds.pop(), "enum": out}
    return s


def _is_typeddict(tp):
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _pydantic(tp):
    if not isinstance(tp, type):
        return None
    for base in tp.__mro__:
        if base.__name__ == "BaseModel" and base.__module__.startswith("pydantic"):
            return base
    return None


def _schema(tp, glob, stack, defs):
    if len(stack) > _DEPTH:
        raise _Unexpressible("it nests more than %d types deep" % _DEPTH)
    if tp is inspect.Parameter.empty or tp is typing.Any or tp is object:
        return {}
    tp = _resolve(tp, glob)
    if tp is None or tp is type(None):
        return {"type": "null"}
    if tp in _SIMPLE:
        return dict(_SIMPLE[tp])
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is not None and origin in _MARKS:
        return _schema(args[0], glob, stack, defs)
    if origin is typing.Annotated:
        s = dict(_schema(args[0], glob, stack, defs))
        notes = [m for m in args[1:] if isinstance(m, str)]
        if notes:
            s["description"] = " ".join(notes)
        return s
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        return {"anyOf": [_schema(a, glob, stack, defs) for a in args]}
    if origin is typing.Literal:
        return _enum_schema(args, "the value")
    if tp in (list, set, frozenset) or origin in (list, set, frozenset):
        s = {"type": "array"}
        if args:
            s["items"] = _schema(args[0], glob, stack, defs)
        if set in (tp, origin) or frozenset in (tp, origin):
            s["uniqueItems"] = True
        return s
    if tp is tuple or origin is tuple:
        s = {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            s["items"] = _schema(args[0], glob, stack, defs)
        elif args == ((),) or (not args and tp not in (tuple, typing.Tuple)):
            s["maxItems"] = 0  # tuple[()]
        elif args:
            s["prefixItems"] = [_schema(a, glob, stack, defs) for a in args]
            s["minItems"] = s["maxItems"] = len(args)
            s["items"] = False
        return s
    if tp is dict or origin is dict:
        s = {"type": "object"}
        if args:
            if _resolve(args[0], glob) not in (str, typing.Any):
                raise _Unexpressible("a JSON object's keys are strings, not %s" % _tname(args[0]))
            s["additionalProperties"] = _schema(args[1], glob, stack, defs)
        return s
    if not isinstance(tp, type):
        raise _Unexpressible("cellbox knows no JSON for %s" % _tname(tp))
    if tp in stack:
        raise _Unexpressible("%s refers to itself" % tp.__qualname__)
    stack = stack + (tp,)
    if issubclass(tp, enum.Enum):
        return _enum_schema(list(tp), "the member value")
    if dataclasses.is_dataclass(tp):
        hints = _class_hints(tp)
        props, required = {}, []
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            s = dict(_schema(hints.get(f.name, f.type), glob, stack, defs))
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            elif f.default is not dataclasses.MISSING:
                d = _json_default(f.default)
                if d is not _NO:
                    s["default"] = d
            props[f.name] = s
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if _is_typeddict(tp):
        hints = _class_hints(tp)
        props = {k: _schema(v, glob, stack, defs) for k, v in hints.items()}
        required = [k for k in hints if k in tp.__required_keys__]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
    if _pydantic(tp) is not None:
        return _pydantic_schema(tp, defs)
    raise _Unexpressible("cellbox knows no JSON for the class %s" % tp.__qualname__)


def _class_hints(tp):
    try:
        return typing.get_type_hints(tp, include_extras=True)
    except Exception as e:
        raise _Unexpressible("the annotations of %s can't be resolved: %s: %s" % (tp.__qualname__, type(e).__name__, e)) from None


def _pydantic_schema(tp, defs):
    # Its definitions go to the top schema's $defs, where its references point.
    try:
        if hasattr(tp, "model_json_schema"):  # pydantic 2
            s = tp.model_json_schema(ref_template="#/$defs/{model}")
        else:  # pydantic 1
            s = tp.schema(ref_template="#/$defs/{model}")
    except Exception as e:
        raise _Unexpressible("pydantic gives no JSON Schema for it: %s: %s" % (type(e).__name__, e)) from None
    s = json.loads(json.dumps(s))
    for key in ("$defs", "definitions"):
        for k, v in (s.pop(key, None) or {}).items():
            if k in defs and defs[k] != v:
                raise _Unexpressible("two different models are called %s" % k)
            defs[k] = v
    return s


class _NoValue:
    pass


_NO = _NoValue()


def _json_default(v):
    """v as JSON, or _NO."""
    try:
        j = _to_json(v, 0)
        _compact(j)
        return j
    except (_NotJSON, ValueError, TypeError, RecursionError):
        return _NO


# --- Docstrings ---

_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "other parameters",
             "returns", "return", "yields", "yield", "raises", "raise", "examples", "example", "notes", "note",
             "attributes", "see also", "references", "warnings", "warning", "warns", "todo", "methods", "receives"}
_PARAM_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "other parameters"}
_DASHES = re.compile(r"\s*-{3,}\s*\Z")
_GOOGLE_ENTRY = re.compile(r"\*{0,2}([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*\*{0,2}[A-Za-z_][A-Za-z0-9_]*)*)\s*(?:\([^)]*\))?\s*:(.*)\Z")
_NUMPY_ENTRY = re.compile(r"\*{0,2}([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*\*{0,2}[A-Za-z_][A-Za-z0-9_]*)*)\s*(?::.*)?\Z")


def _indent(line):
    return len(line) - len(line.lstrip())


def _parse_doc(doc):
    """(description, {parameter: description}) of a docstring, both plain text."""
    if not isinstance(doc, str) or not doc.strip():
        return "", {}
    lines = [l.rstrip() for l in inspect.cleandoc(doc).splitlines()]
    # Where sections start: (line, kind, name); kind "google" or "numpy".
    heads = []
    for i, l in enumerate(lines):
        if not l or _indent(l):
            continue
        title = l.strip().lower()
        if title.endswith(":") and title[:-1].strip() in _SECTIONS:
            heads.append((i, "google", title[:-1].strip()))
        elif i + 1 < len(lines) and _DASHES.match(lines[i + 1]) and title in _SECTIONS:
            heads.append((i, "numpy", title))
    end = heads[0][0] if heads else len(lines)
    description = "\n".join(lines[:end]).strip()
    params = {}
    for n, (i, kind, title) in enumerate(heads):
        stop = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        if title not in _PARAM_SECTIONS:
            continue
        body = lines[i + (2 if kind == "numpy" else 1):stop]
        _entries(body, _GOOGLE_ENTRY if kind == "google" else _NUMPY_ENTRY, kind == "google", params)
    return description, params


def _entries(body, entry, inline, params):
    base = min((_indent(l) for l in body if l.strip()), default=0)
    names, text = None, []

    def flush():
        if names:
            d = " ".join(t for t in text if t).strip()
            for nm in names:
                if d:
                    params.setdefault(nm, d)

    for l in body:
        if not l.strip():
            continue
        m = entry.match(l.strip()) if _indent(l) == base else None
        if m:
            flush()
            names = [x.strip().lstrip("*") for x in m.group(1).split(",")]
            text = [m.group(2).strip()] if inline else []
        elif names and _indent(l) > base:
            text.append(l.strip())
        else:
            flush()
            names, text = None, []
    flush()


# --- Sources ---


def _source(fn):
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return ""


def _global_names(code):
    names, stored = set(), set()
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"):
            names.add(ins.argval)
        elif ins.opname == "STORE_NAME":
            stored.add(ins.argval)
    names -= stored  # a class body's own names
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _global_names(c)
    return names


def _import_line(name, v):
    """The import that binds name to v where the saved tool runs, or None."""
    if isinstance(v, types.ModuleType):
        mod = getattr(v, "__name__", None)
        if not isinstance(mod, str) or mod == "__main__" or sys.modules.get(mod) is not v:
            return None
        return "import %s" % mod if mod == name else "import %s as %s" % (mod, name)
    mod = getattr(v, "__module__", None)
    if not isinstance(mod, str) or mod == "__main__" or sys.modules.get(mod) is None:
        return None
    m = sys.modules[mod]
    for attr in (name, getattr(v, "__name__", None)):
        if isinstance(attr, str) and attr.isidentifier() and getattr(m, attr, None) is v:
            return "from %s import %s" % (mod, attr) if attr == name else "from %s import %s as %s" % (mod, attr, name)
    return None


def _decorated(node, glob):
    # Whether a decorator in the source is this module's tool (so running it registers).
    me = sys.modules.get(__name__)
    for d in node.decorator_list:
        f = d.func if isinstance(d, ast.Call) else d
        if isinstance(f, ast.Name) and glob.get(f.id) is tool:
            return True
        if isinstance(f, ast.Attribute) and f.attr == "tool" and isinstance(f.value, ast.Name) and glob.get(f.value.id) is me:
            return True
    return False


def _standalone(fn, source, name, description):
    """fn's source with the imports it needs, refused when it needs more of the session."""
    if not inspect.isfunction(fn) or fn.__name__ == "<lambda>":
        raise TypeError("only a function defined with def can be saved as a tool")
    if fn.__code__.co_freevars:
        raise ValueError("%s can't be saved: it uses %s of the function it is defined in; define a saved tool at "
                         "the top level of a cell" % (name, ", ".join(fn.__code__.co_freevars)))
    if not source:
        raise ValueError("%s can't be saved: its source is not available (define it in a cell)" % name)
    try:
        node = ast.parse(source).body[0]
    except (SyntaxError, IndexError):
        node = None
    if not isinstance(node, ast.FunctionDef) or node.name != fn.__name__:
        raise ValueError("%s can't be saved: its source is not available (define it in a cell)" % name)
    glob = fn.__globals__
    names = set(_global_names(fn.__code__))
    a = node.args
    exprs = list(node.decorator_list) + list(a.defaults) + [d for d in a.kw_defaults if d is not None]
    exprs += [x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs if x.annotation is not None]
    if node.returns is not None:
        exprs.append(node.returns)
    for e in exprs:
        names |= {n.id for n in ast.walk(e) if isinstance(n, ast.Name)}
    registers = _decorated(node, glob)
    if not registers:
        names.add("tool")
    builtins = glob.get("__builtins__", __builtins__)
    builtins = builtins if isinstance(builtins, dict) else vars(builtins)
    imports, bad = [], []
    for n in sorted(names):
        if n == fn.__name__:
            continue  # itself: bound where the saved source runs
        if n == "tool" and not registers:
            imports.append("from %s import tool" % __name__)
            continue
        if n not in glob:
            if n not in builtins:
                bad.append(n)
            continue
        line = _import_line(n, glob[n])
        if line is None:
            bad.append(n)
        else:
            imports.append(line)
    if bad:
        raise ValueError("%s can't be saved: a saved tool's source must stand alone, and it uses %s of this "
                         "session; import or define what it needs inside the function, or pass it as a parameter"
                         % (name, ", ".join(bad)))
    out = "\n".join(sorted(set(imports))) + "\n\n\n" + source.rstrip("\n") + "\n"
    if not registers:
        out += "\n\ntool(%s, name=%r, description=%r, save=True)\n" % (fn.__name__, name, description)
    return out


# --- Calls ---


class _BadArgument(Exception):
    pass


def _call(name, args_b64):
    """Calls tool name with the arguments (a JSON object, base64) and publishes its return
    value as one display_data output of RESULT_MIME. The server runs it."""
    __tracebackhide__ = True
    t = _registry.get(name)
    if t is None:
        raise LookupError("there is no tool named %r; %s" % (name, _names()))
    try:
        raw = base64.b64decode(args_b64, validate=True)
        args = json.loads(raw) if raw.strip() else {}
    except ValueError as e:
        raise ValueError("the arguments of %s are not base64 of JSON: %s" % (name, e)) from None
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise TypeError("the arguments of %s must be a JSON object, not %s" % (name, type(args).__name__))
    params = t.sig.parameters
    unknown = [k for k in args if k not in params]
    if unknown:
        raise TypeError("%s has no parameter %s; its parameters are: %s"
                        % (name, ", ".join(map(repr, unknown)), ", ".join(params) or "none"))
    pos, kw, missing = [], {}, []
    try:
        for p in params.values():
            if p.name in args and args[p.name] is None and p.default is None:
                v = None  # x: T = None
            elif p.name in args:
                v = _convert(args[p.name], t.hints[p.name], p.name, 0, _globals(t.fn))
            elif p.default is not p.empty:
                v = p.default
            else:
                missing.append(p.name)
                continue
            if p.kind == p.POSITIONAL_ONLY:
                pos.append(v)
            elif p.name in args:
                kw[p.name] = v
    except _BadArgument as e:
        raise TypeError("bad argument for %s: %s" % (name, e)) from None
    if missing:
        raise TypeError("%s is missing the argument %s" % (name, ", ".join(map(repr, missing))))
    value = t.fn(*pos, **kw)
    _publish({RESULT_MIME: _result(value)})


def _publish(bundle):
    # The kernel's display publisher: one display_data output.
    from IPython.core.getipython import get_ipython

    get_ipython().display_pub.publish(data=bundle)


def _fail(where, v, want):
    r = repr(v)
    if len(r) > 80:
        r = r[:77] + "..."
    raise _BadArgument("%s: want %s, got %s" % (where, want, r))


def _convert(v, tp, where, depth, glob):
    """The JSON value v as an instance of annotation tp, or _BadArgument."""
    if depth > _DEPTH or tp is inspect.Parameter.empty or tp is typing.Any or tp is object:
        return v
    if isinstance(tp, (str, typing.ForwardRef)):
        try:
            tp = _resolve(tp, glob)
        except _Unexpressible:
            return v
    if tp is None or tp is type(None):
        if v is not None:
            _fail(where, v, "null")
        return None
    if tp is bool:
        if not isinstance(v, bool):
            _fail(where, v, "a boolean")
        return v
    if tp is int:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if not isinstance(v, int) or isinstance(v, bool):
            _fail(where, v, "an integer")
        return v
    if tp is float:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            _fail(where, v, "a number")
        return float(v)
    if tp is str:
        if not isinstance(v, str):
            _fail(where, v, "a string")
        return v
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated or (origin is not None and origin in _MARKS):
        return _convert(v, args[0], where, depth, glob)
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        for a in args:
            try:
                return _convert(v, a, where, depth + 1, glob)
            except _BadArgument:
                pass
        _fail(where, v, "one of " + ", ".join(_tname(a) for a in args))
    if origin is typing.Literal:
        for a in args:
            av = a.value if isinstance(a, enum.Enum) else a
            if av == v and type(av) is type(v):
                return a
        _fail(where, v, "one of " + ", ".join(repr(a.value if isinstance(a, enum.Enum) else a) for a in args))
    if tp in (list, set, frozenset, tuple) or origin in (list, set, frozenset, tuple):
        if not isinstance(v, list):
            _fail(where, v, "an array")
        kind = origin or tp
        if kind is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if args == ((),):
                args = ()
            if len(v) != len(args):
                _fail(where, v, "an array of %d" % len(args))
            return tuple(_convert(x, a, "%s[%d]" % (where, i), depth + 1, glob) for i, (x, a) in enumerate(zip(v, args)))
        item = args[0] if args else typing.Any
        items = [_convert(x, item, "%s[%d]" % (where, i), depth + 1, glob) for i, x in enumerate(v)]
        try:
            return kind(items)
        except TypeError as e:  # a set of unhashable items
            raise _BadArgument("%s: %s" % (where, e)) from None
    if tp is dict or origin is dict:
        if not isinstance(v, dict):
            _fail(where, v, "an object")
        item = args[1] if args else typing.Any
        return {k: _convert(x, item, "%s.%s" % (where, k), depth + 1, glob) for k, x in v.items()}
    if not isinstance(tp, type):
        return v
    if issubclass(tp, enum.Enum):
        for m in tp:
            if m.value == v and type(m.value) is type(v):
                return m
        _fail(where, v, "one of " + ", ".join(repr(m.value) for m in tp))
    if dataclasses.is_dataclass(tp) or _is_typeddict(tp):
        if not isinstance(v, dict):
            _fail(where, v, "an object")
        try:
            hints = typing.get_type_hints(tp, include_extras=True)
        except Exception:
            hints = {}
        fields = {f.name for f in dataclasses.fields(tp) if f.init} if dataclasses.is_dataclass(tp) else set(hints)
        extra = [k for k in v if k not in fields]
        if extra:
            raise _BadArgument("%s: %s has no field %s" % (where, tp.__qualname__, ", ".join(map(repr, extra))))
        kw = {k: _convert(x, hints.get(k, typing.Any), "%s.%s" % (where, k), depth + 1, glob) for k, x in v.items()}
        if _is_typeddict(tp):
            return kw
        try:
            return tp(**kw)
        except Exception as e:
            raise _BadArgument("%s: %s: %s" % (where, type(e).__name__, e)) from None
    if _pydantic(tp) is not None:
        try:
            if hasattr(tp, "model_validate"):
                return tp.model_validate(v)
            return tp.parse_obj(v)
        except Exception as e:
            raise _BadArgument("%s: %s" % (where, e)) from None
    if not isinstance(v, tp):
        _fail(where, v, tp.__qualname__)
    return v


# --- Results ---


class _NotJSON(Exception):
    pass


def _result(v):
    """The result output's value: {"value": JSON} or {"text": repr, "type": name}."""
    try:
        j = _to_json(v, 0)
        if len(_compact(j)) <= MAX_VALUE:
            return {"value": j}
    except (_NotJSON, ValueError, TypeError, RecursionError):
        pass
    try:
        text = repr(v)
    except Exception as e:
        text = "<%s object; its repr failed: %s: %s>" % (type(v).__qualname__, type(e).__name__, e)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT - 3] + "..."
    return {"text": text, "type": type(v).__qualname__}


def _to_json(v, depth):
    if depth > _DEPTH * 4:
        raise _NotJSON()
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise _NotJSON()
        return float(v)
    if isinstance(v, enum.Enum):
        return _to_json(v.value, depth + 1)
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise _NotJSON()
            out[k] = _to_json(x, depth + 1)
        return out
    if isinstance(v, (list, tuple)):
        return [_to_json(x, depth + 1) for x in v]
    if isinstance(v, (set, frozenset)):
        try:
            v = sorted(v)
        except TypeError:
            v = list(v)
        return [_to_json(x, depth + 1) for x in v]
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _to_json(getattr(v, f.name), depth + 1) for f in dataclasses.fields(v)}
    if _pydantic(type(v)) is not None:
        if hasattr(v, "model_dump"):
            return _to_json(v.model_dump(mode="json"), depth + 1)
        return _to_json(json.loads(v.json()), depth + 1)
    mod = type(v).__module__ or ""
    if mod == "numpy" or mod.startswith("numpy."):
        if hasattr(v, "tolist"):  # arrays and scalars
            return _to_json(v.tolist(), depth + 1)
    if mod.startswith("pandas."):
        return _pandas_json(v, depth)
    raise _NotJSON()


def _pandas_json(v, depth):
    # pandas' own JSON: dates in ISO 8601, a missing value (NaN, NaT, None) as null.
    name = type(v).__name__
    if name in ("DataFrame", "Series"):
        idx = v.index
        plain = type(idx).__name__ == "RangeIndex" and idx.start == 0 and idx.step == 1
        if name == "DataFrame":
            orient = "records" if plain else "split"
        else:
            orient = "values" if plain else "split"
        j = json.loads(v.to_json(orient=orient, date_format="iso"))
        if isinstance(j, dict):
            j.pop("name", None)
        return j
    if hasattr(v, "isoformat") and hasattr(v, "to_pydatetime"):  # Timestamp
        return v.isoformat()
    if hasattr(v, "tolist"):  # an Index, an array
        return _to_json(v.tolist(), depth + 1)
    raise _NotJSON()


# --- Saved tools ---


def _load(source_b64):
    """Runs a saved tool's source in the kernel's default namespace, which registers it.
    The server runs it."""
    __tracebackhide__ = True
    src = base64.b64decode(source_b64, validate=True).decode("utf-8")
    _loads[0] += 1
    filename = "<cellbox-saved-tool-%d>" % _loads[0]
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)  # for inspect.getsource
    code = compile(src, filename, "exec")
    try:
        from IPython.core.getipython import get_ipython

        ns = get_ipython().user_ns
    except Exception:
        ns = sys.modules["__main__"].__dict__
    exec(code, ns)


def _report():
    """The registry as the runner reports it."""
    return [t.report() for t in _registry.values()]
