"""Quarry's code-tool worker: runs `async def run(input, ctx)` tools for the host, one call at a time.

The host (crates/core/src/tools/executor.rs) starts this script with `python3 -I -S` and talks
to it in JSON lines: requests on stdin, replies on the duplicated stdout. A tool's `print` goes
to a per-call buffer, never to the protocol stream.

Containment, in layers: the host runs the worker in a fresh network namespace where the OS
allows it and kills it on timeout; this script sets a memory limit (RLIMIT_DATA) and installs an audit
hook (PEP 578) that refuses sockets, processes, ctypes, file writes, reads outside the Python
installation and changes to its own limits. Every `ctx` operation is a request to the host,
which checks it against the tool's evidence manifest and the caller's authorization.
"""

import ast
import asyncio
import io
import json
import os
import resource
import sys
import traceback
import types

# Modules tools commonly use, loaded before the hook so they need no further file access.
import collections  # noqa: F401
import datetime  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import itertools  # noqa: F401
import math  # noqa: F401
import random  # noqa: F401
import re  # noqa: F401
import statistics  # noqa: F401
import string  # noqa: F401
import textwrap  # noqa: F401
import typing  # noqa: F401
import unicodedata  # noqa: F401

LOCAL_CTX_ATTRIBUTES = {"settings", "log"}
MAX_LOG_CHARS = 16_000


class SandboxViolation(PermissionError):
    """Raised by the audit hook when a tool tries something the sandbox refuses."""


class CtxError(RuntimeError):
    """A ctx operation the host refused or could not perform."""


# ---------------------------------------------------------------- the `quarry` module for tools

_REQUIRED = ...


class Field:
    """A model field's default and constraints: `Field(30, ge=1, description="...")`."""

    def __init__(self, default=_REQUIRED, **constraints):
        self.default = default
        self.constraints = constraints


class BaseModel:
    """Declares a shape (Settings, Inputs, Output). The host validates data against the JSON
    schema derived from it; at run time it only builds plain objects."""

    def __init__(self, **values):
        for name in getattr(type(self), "__annotations__", {}):
            if name in values:
                value = values.pop(name)
            else:
                default = getattr(type(self), name, _REQUIRED)
                if isinstance(default, Field):
                    default = default.default
                if default is _REQUIRED:
                    raise TypeError(f"{type(self).__name__}.{name} is required")
                value = default
            setattr(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no field {sorted(values)[0]!r}")

    def model_dump(self):
        return {name: _plain(getattr(self, name)) for name in type(self).__annotations__}

    dict = model_dump


def _plain(value):
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


quarry_module = types.ModuleType("quarry")
quarry_module.BaseModel = BaseModel
quarry_module.Field = Field
quarry_module.CtxError = CtxError
quarry_module.SandboxViolation = SandboxViolation
sys.modules["quarry"] = quarry_module

# ---------------------------------------------------------------- static analysis (on save)


class ShapeError(Exception):
    def __init__(self, message, node=None, line=None, column=None):
        super().__init__(message)
        self.line = line if line is not None else getattr(node, "lineno", 1)
        self.column = column if column is not None else getattr(node, "col_offset", 0) + 1


SCALARS = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "dict": {"type": "object"},
    "list": {"type": "array"},
    "Any": {},
}
CONSTRAINT_KEYWORDS = {
    "ge": "minimum",
    "le": "maximum",
    "gt": "exclusiveMinimum",
    "lt": "exclusiveMaximum",
    "min_length": "minLength",
    "max_length": "maxLength",
    "min_items": "minItems",
    "max_items": "maxItems",
}


def _annotation_schema(node, models, stack=()):
    if isinstance(node, ast.Constant) and node.value is None:
        return {"type": "null"}
    if isinstance(node, ast.Name):
        if node.id in SCALARS:
            return dict(SCALARS[node.id])
        if node.id in models:
            return _model_schema(models[node.id], models, stack)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        if node.value.id == "typing" and node.attr in SCALARS:
            return dict(SCALARS[node.attr])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return {"anyOf": [_annotation_schema(node.left, models, stack), _annotation_schema(node.right, models, stack)]}
    if isinstance(node, ast.Subscript):
        outer = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "attr", None)
        inner = node.slice
        if outer in ("list", "List"):
            return {"type": "array", "items": _annotation_schema(inner, models, stack)}
        if outer == "Optional":
            return {"anyOf": [_annotation_schema(inner, models, stack), {"type": "null"}]}
        if outer in ("dict", "Dict") and isinstance(inner, ast.Tuple) and len(inner.elts) == 2:
            return {"type": "object", "additionalProperties": _annotation_schema(inner.elts[1], models, stack)}
        if outer == "Literal":
            values = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            try:
                return {"enum": [ast.literal_eval(v) for v in values]}
            except ValueError:
                pass
    raise ShapeError(f"unsupported field type `{ast.unparse(node)}`", node)


def _model_schema(cls, models, stack=()):
    if cls.name in stack:
        raise ShapeError(f"model `{cls.name}` refers to itself; shapes must not be recursive", cls)
    stack = stack + (cls.name,)
    properties, required = {}, []
    for statement in cls.body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # docstring
        if isinstance(statement, ast.Pass):
            continue
        if not isinstance(statement, ast.AnnAssign) or not isinstance(statement.target, ast.Name):
            raise ShapeError(
                f"{cls.name} may only declare fields (`name: type = default`)", statement
            )
        name = statement.target.id
        schema = _annotation_schema(statement.annotation, models, stack)
        value = statement.value
        default, has_default = None, False
        if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Field":
            if value.args:
                first = value.args[0]
                if not (isinstance(first, ast.Constant) and first.value is Ellipsis):
                    default, has_default = _literal(first), True
            for keyword in value.keywords:
                if keyword.arg == "default":
                    default, has_default = _literal(keyword.value), True
                elif keyword.arg == "description":
                    schema["description"] = _literal(keyword.value)
                elif keyword.arg in CONSTRAINT_KEYWORDS:
                    schema[CONSTRAINT_KEYWORDS[keyword.arg]] = _literal(keyword.value)
                else:
                    raise ShapeError(f"Field() does not take `{keyword.arg}`", keyword.value)
        elif value is not None:
            default, has_default = _literal(value), True
        if schema.get("type") == "array":
            for short, long in (("minLength", "minItems"), ("maxLength", "maxItems")):
                if short in schema:
                    schema[long] = schema.pop(short)
        if has_default:
            schema["default"] = default
        else:
            required.append(name)
        properties[name] = schema
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ShapeError("defaults and constraints must be literal values", node) from None


def analyze(source, tool_type, known_operations):
    """`known_operations`: the host's ctx vocabulary (`tools::CTX_OPERATIONS`)."""
    try:
        tree = ast.parse(source, filename="<tool>")
    except SyntaxError as error:
        raise ShapeError(f"syntax error: {error.msg}", line=error.lineno or 1, column=error.offset or 1)
    models = {}
    run = None
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases = [getattr(b, "id", getattr(b, "attr", None)) for b in node.bases]
            if "BaseModel" in bases:
                models[node.name] = node
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "run":
            run = node
        if isinstance(node, ast.FunctionDef) and node.name == "run":
            raise ShapeError("`run` must be `async def run(input, ctx)`", node)
    if run is None:
        raise ShapeError("the tool defines no `async def run(input, ctx)`", line=1, column=1)
    params = [a.arg for a in run.args.posonlyargs + run.args.args]
    if len(params) != 2 or run.args.vararg or run.args.kwonlyargs:
        raise ShapeError("`run` must take exactly two parameters: (input, ctx)", run)
    ctx_name = params[1]

    for name in ("Settings", "Inputs", "Output"):
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name and name not in models:
                raise ShapeError(f"{name} must subclass BaseModel (from quarry import BaseModel)", node)
    if tool_type == "action":
        for name in ("Inputs", "Output"):
            if name not in models:
                raise ShapeError(f"an action tool must declare `class {name}(BaseModel)`", line=1, column=1)
    else:
        for name in ("Inputs", "Output"):
            if name in models:
                raise ShapeError(
                    f"`{name}` is only for action tools; a {tool_type} tool's shapes are fixed",
                    models[name],
                )

    settings_schema = (
        _model_schema(models["Settings"], models)
        if "Settings" in models
        else {"type": "object", "properties": {}, "additionalProperties": False}
    )
    for field, schema in settings_schema["properties"].items():
        if "default" not in schema:
            raise ShapeError(f"Settings.{field} needs a default value", models["Settings"])

    manifest = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in (ctx_name, "ctx") and node.attr not in LOCAL_CTX_ATTRIBUTES:
                if node.attr not in known_operations:
                    raise ShapeError(
                        f"unknown ctx operation `ctx.{node.attr}` (known: "
                        + ", ".join(sorted(known_operations))
                        + ")",
                        node,
                    )
                manifest.add(node.attr)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "setattr"):
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == ctx_name:
                raise ShapeError("use ctx operations by name (`ctx.search(...)`), not getattr", node)
    return {
        "settings_schema": settings_schema,
        "input_schema": _model_schema(models["Inputs"], models) if tool_type == "action" else None,
        "output_schema": _model_schema(models["Output"], models) if tool_type == "action" else None,
        "manifest": sorted(manifest),
    }


# ---------------------------------------------------------------- the sandbox


def _allowed_read_roots():
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    roots.update(p for p in sys.path if p and os.path.isabs(p))
    return tuple(sorted({os.path.realpath(r).rstrip("/") + "/" for r in roots if r}))


REFUSED_PREFIXES = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "os.remove",
    "os.unlink",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.chflags",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.utime",
    "os.putenv",
    "os.unsetenv",
    "os.chdir",
    "os.chroot",
    "shutil.",
    "ctypes.",
    "resource.setrlimit",
    "resource.prlimit",
    "sqlite3.",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "webbrowser.",
    "pty.",
    "signal.pthread_kill",
)
WHAT_IS_REFUSED = {
    "socket.": "network access",
    "subprocess.": "starting a process",
    "os.system": "starting a process",
    "os.exec": "starting a process",
    "os.posix_spawn": "starting a process",
    "os.spawn": "starting a process",
    "os.fork": "starting a process",
    "ctypes.": "ctypes",
    "resource.": "changing the sandbox limits",
    "sqlite3.": "opening a database",
}
REFUSED_IMPORTS = {
    "ctypes",
    "_ctypes",
    "_posixsubprocess",
    "multiprocessing",
    "_multiprocessing",
    "_sqlite3",
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _refuse(what):
    raise SandboxViolation(f"sandbox: {what} is not allowed in a tool")


def install_audit_hook():
    """Installs the hook. Everything it uses is bound here, as C functions and immutable
    values in its closure, so a tool cannot disarm it by patching a module, `builtins` or
    this script's globals (nothing outside can reach the hook object itself)."""
    import posix

    read_roots = _allowed_read_roots()
    refused_prefixes = REFUSED_PREFIXES
    what_is_refused = tuple(WHAT_IS_REFUSED.items())
    refused_imports = frozenset(REFUSED_IMPORTS)
    write_flags = WRITE_FLAGS
    violation = SandboxViolation
    fspath = posix.fspath
    readlink = posix.readlink
    getcwd = posix.getcwd
    is_instance = isinstance
    to_str = str
    as_bytes = bytes
    as_int = int

    def refuse(what):
        raise violation("sandbox: " + what + " is not allowed in a tool")

    def resolve(path):
        """An absolute path with `.`, `..` and symbolic links resolved, by hand."""
        if is_instance(path, as_bytes):
            path = path.decode("utf-8", "surrogateescape")
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        parts = path.split("/")
        resolved = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = "/" + "/".join(resolved + [part])
            try:
                target = readlink(candidate)
            except OSError:
                resolved.append(part)
                continue
            hops += 1
            if hops > 40:
                return "/\0too-many-links"
            if target.startswith("/"):
                resolved = []
            parts = target.split("/") + parts
        return "/" + "/".join(resolved)

    def readable(path):
        if is_instance(path, as_int):
            return True  # an already open descriptor
        try:
            real = resolve(fspath(path))
        except (TypeError, ValueError):
            return False
        return (real + "/").startswith(read_roots)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if (is_instance(mode, to_str) and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or (
                is_instance(flags, as_int) and flags & write_flags
            ):
                refuse("writing a file (" + repr(path) + ")")
            if not readable(path):
                refuse("reading " + repr(path))
            return
        if event in ("os.listdir", "os.scandir"):
            path = args[0] if args and args[0] is not None else "."
            if not readable(path):
                refuse("listing " + repr(path))
            return
        if event == "import" and args and args[0] in refused_imports:
            refuse("importing " + to_str(args[0]))
        if event.startswith(refused_prefixes):
            what = event
            for prefix, description in what_is_refused:
                if event.startswith(prefix):
                    what = description
                    break
            refuse(what)

    sys.addaudithook(hook)


def _drop_unaudited_escapes():
    """Removes modules and functions that reach processes or signals without an audit event
    (`_posixsubprocess.fork_exec`, `pidfd_send_signal`), so a tool cannot pick them up from a
    module asyncio already imported. The OS sandbox contains them where it runs; this is the
    fallback's layer."""
    import signal
    import _signal

    sys.modules.pop("_posixsubprocess", None)
    for module in list(sys.modules.values()):
        for name in ("_posixsubprocess", "_fork_exec", "_USE_POSIX_SPAWN"):
            if getattr(module, name, None) is not None and module is not sys:
                try:
                    delattr(module, name)
                except (AttributeError, TypeError):
                    pass
    for module in (signal, _signal):
        for name in ("pidfd_send_signal", "pthread_kill"):
            if hasattr(module, name):
                delattr(module, name)
    for name in ("pidfd_open", "fork", "forkpty", "register_at_fork"):
        if hasattr(os, name):
            delattr(os, name)


# ---------------------------------------------------------------- running a call


class Ctx:
    """What a tool sees as `ctx`: settings and log locally, every other operation a request
    to the host."""

    def __init__(self, settings, channel, logs):
        self.settings = settings
        self._channel = channel
        self._logs = logs

    def log(self, *parts):
        self._logs.append(" ".join(str(p) for p in parts)[:1000])

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        channel = self._channel

        async def operation(*args, **kwargs):
            return channel.ctx(name, _plain(list(args)), _plain(kwargs))

        return operation


class Channel:
    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer

    def send(self, message):
        self.writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.writer.flush()

    def receive(self):
        line = self.reader.readline()
        if not line:
            os._exit(0)  # the host went away
        return json.loads(line)

    def ctx(self, name, args, kwargs):
        self.send({"op": "ctx", "name": name, "args": args, "kwargs": kwargs})
        reply = self.receive()
        if reply.get("op") != "ctx_result":
            raise CtxError(f"protocol error: expected ctx_result, got {reply.get('op')!r}")
        if not reply.get("ok"):
            raise CtxError(reply.get("error", "ctx operation failed"))
        return reply.get("value")


def _tool_line(tb):
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == "<tool>":
            line = lineno
    return line


def run_call(message, channel, loop, compiled):
    source_hash = message["source_hash"]
    code = compiled.get(source_hash)
    if code is None:
        code = compile(message["source"], "<tool>", "exec")
        compiled[source_hash] = code
    module = types.ModuleType("tool")
    logs = []
    printed = io.StringIO()
    sys.stdout = printed
    try:
        exec(code, module.__dict__)
        ctx = Ctx(message.get("settings") or {}, channel, logs)
        output = loop.run_until_complete(module.run(message.get("input"), ctx))
        return {"op": "result", "ok": True, "output": _plain(output)}
    except MemoryError:
        return {"op": "result", "ok": False, "fatal": True, "error": {"kind": "memory", "message": "the tool ran out of its memory limit"}}
    except SandboxViolation as error:
        return {"op": "result", "ok": False, "error": {"kind": "sandbox", "message": str(error), "line": _tool_line(error.__traceback__)}}
    except CtxError as error:
        return {"op": "result", "ok": False, "error": {"kind": "ctx", "message": str(error), "line": _tool_line(error.__traceback__)}}
    except BaseException as error:  # the tool's own bug: report it, keep serving
        return {
            "op": "result",
            "ok": False,
            "error": {
                "kind": "exception",
                "message": f"{type(error).__name__}: {error}",
                "line": _tool_line(error.__traceback__),
            },
        }
    finally:
        sys.stdout = sys.__stderr__
        # Nothing of a call may run during the next one: cancel what it left behind, and
        # retire the worker if anything refuses to stop.
        leftovers = asyncio.all_tasks(loop)
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=0.1))
        run_call.retire = any(not task.done() for task in leftovers) or not _back_to_one_thread()
        _reset_timers()
        text = printed.getvalue()
        if text:
            logs.append(text[:MAX_LOG_CHARS])
        run_call.logs = logs


_STATUS_FD = None


def _back_to_one_thread():
    """Whether only the main thread is left (3.11 audits no thread start, so a tool's threads
    are found here and the worker retired). Reads a descriptor opened before the hook."""
    try:
        status = os.pread(_STATUS_FD, 8192, 0).decode()
    except (OSError, TypeError):
        return False
    for line in status.splitlines():
        if line.startswith("Threads:"):
            return line.split()[1] == "1"
    return False


def _reset_timers():
    """No timer a call set may fire during the next one."""
    import signal

    for timer in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
        signal.setitimer(timer, 0)
    for number in (signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF):
        signal.signal(number, signal.SIG_DFL)


def _install_seccomp_filters():
    """Installs the host's seccomp filters (`QUARRY_SECCOMP`: base64 programs joined by `.`)
    on this process, for good: from here on the kernel refuses exec, new processes, sockets
    and the rest, whatever happens to the audit hook. Runs before the hook, the only time this
    script uses ctypes besides Landlock's. Returns whether filters are installed."""
    encoded = os.environ.pop("QUARRY_SECCOMP", "")
    if not encoded:
        return False
    import base64
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    for program in encoded.split("."):
        code = base64.b64decode(program)
        buffer = ctypes.create_string_buffer(code, len(code))
        fprog = SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")
    return True


def _forget_ctypes():
    """The confinement steps used ctypes; a tool has to import it again, which the hook refuses."""
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]


# What a confined worker may read besides its Python installation: the system libraries an
# extension module loads, the loader's cache and the time zone (what bubblewrap mounts).
SYSTEM_READ_ROOTS = ("/usr", "/lib", "/lib64", "/lib32", "/etc/ld.so.cache", "/etc/localtime")


# Threads a worker may run at once where the limit can be set (see `_limit_resources`).
MAX_TASKS = 128
# Each thread's stack, counted in the memory limit: glibc's default (the main thread's 8 MiB)
# would let 256 MB hold only about thirty threads.
THREAD_STACK_BYTES = 2 << 20


def _limit_resources(memory_mb):
    """Limits the worker's memory and, inside a user namespace of its own, its tasks. Memory is
    RLIMIT_DATA, not RLIMIT_AS: address space that glibc reserves for each thread's malloc
    arena and never touches made a fourth thread fail under 256 MB of address space, while
    the data limit counts what can be written. The kernel refuses new processes (seccomp), so
    this one process is everything the sandbox runs. RLIMIT_NPROC counts only the namespace's
    tasks there (Linux 5.14 and later); elsewhere it would count every process of the user,
    so it is left alone. Returns the task limit set, or None."""
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    import threading

    threading.stack_size(THREAD_STACK_BYTES)
    try:
        with open("/proc/self/uid_map") as f:
            identity = f.read().split() == ["0", "0", "4294967295"]
    except OSError:
        return None
    release = tuple(int(n) for n in re.findall(r"\d+", os.uname().release)[:2])
    if identity or release < (5, 14):
        return None
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_TASKS, MAX_TASKS))
    return MAX_TASKS


def _install_landlock(read_roots):
    """Restricts this process, for good, to reading (and mapping) files under `read_roots`;
    it may create, write or remove nothing. The kernel enforces it under the audit hook, so a
    tool that disarms the hook still reads no user file and no library database. Returns the
    Landlock ABI used, or 0 where the kernel has none (older than 5.13, or switched off)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    create_ruleset, add_rule, restrict_self = 444, 445, 446  # the same on x86_64 and aarch64
    abi = libc.syscall(create_ruleset, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    if abi < 1:
        return 0
    # Every filesystem right of this ABI: 13 in v1, then refer (v2), truncate (v3), ioctl_dev (v5).
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= 1 << 13
    if abi >= 3:
        rights |= 1 << 14
    if abi >= 5:
        rights |= 1 << 15
    read = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read_file, read_dir

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(rights)
    ruleset = libc.syscall(create_ruleset, ctypes.byref(attr), ctypes.sizeof(attr), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for root in read_roots:
            try:
                fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue  # not on this system
            try:
                # A file (the loader's cache) takes only file rights.
                allowed = read if os.path.isdir(root) else (1 << 0) | (1 << 2)
                rule = PathBeneath(allowed, fd)
                if libc.syscall(add_rule, ruleset, 1, ctypes.byref(rule), 0) != 0:  # PATH_BENEATH
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule({root}) failed")
            finally:
                os.close(fd)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(restrict_self, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi


def main():
    memory_mb = int(os.environ.get("QUARRY_TOOL_MEMORY_MB", "256"))
    # Protocol on a private copy of stdout; fd 1 becomes stderr so stray writes can't corrupt it.
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.__stderr__
    channel = Channel(sys.stdin.buffer, protocol_out)
    loop = asyncio.new_event_loop()  # before the hook: its self-pipe is a socket pair
    tasks = _limit_resources(memory_mb)
    global _STATUS_FD
    _STATUS_FD = os.open("/proc/self/status", os.O_RDONLY)
    landlock = 0
    if os.environ.get("QUARRY_LANDLOCK") != "off":
        landlock = _install_landlock(
            tuple(r.rstrip("/") or "/" for r in _allowed_read_roots()) + SYSTEM_READ_ROOTS
        )
    seccomp = _install_seccomp_filters()
    _forget_ctypes()
    _drop_unaudited_escapes()
    install_audit_hook()
    channel.send({"op": "ready", "python": sys.version.split()[0], "pid": os.getpid(), "seccomp": seccomp, "landlock": landlock, "tasks": tasks})
    compiled = {}
    while True:
        message = channel.receive()
        op = message.get("op")
        if op == "analyze":
            try:
                reply = {"op": "analyzed", "ok": True, **analyze(message["source"], message["tool_type"], set(message["ctx_operations"]))}
            except ShapeError as error:
                reply = {"op": "analyzed", "ok": False, "error": {"message": str(error), "line": error.line, "column": error.column}}
            except Exception as error:  # an analyser bug must not look like a missing Python
                reply = {"op": "analyzed", "ok": False, "error": {"message": f"cannot analyse the source: {type(error).__name__}: {error}", "line": 1, "column": 1}}
            channel.send(reply)
        elif op == "run":
            reply = run_call(message, channel, loop, compiled)
            reply["logs"] = getattr(run_call, "logs", [])
            if getattr(run_call, "retire", False):
                reply["fatal"] = True
            channel.send(reply)
            if reply.get("fatal"):
                # After a MemoryError, or with tasks that would not stop: start afresh.
                os._exit(3)
        elif op == "sync":
            # The host checks that nothing but this answer is left in the pipe.
            channel.send({"op": "synced", "nonce": message.get("nonce")})
        else:
            channel.send({"op": "error", "message": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
