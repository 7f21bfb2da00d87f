"""The Python side of the binding: stacks come back as the classes of their adaptors, statistics
as a frozen dataclass, every C entry point is bound in _lib.py and no C constant is retyped."""

import ast
import dataclasses
import os
import pathlib

import pytest

import devmm
from devmm.mrs.cpu import MallocMemoryResource

PACKAGE = pathlib.Path(devmm.__file__).parent
ADAPTORS = ["statistics", "limiting", "tracking", "logging", "aligned", "thread_safe"]
CLASSES = {"statistics": devmm.StatisticsAdaptor, "limiting": devmm.LimitingAdaptor,
           "tracking": devmm.TrackingAdaptor, "logging": devmm.LoggingAdaptor,
           "aligned": devmm.AlignedAdaptor, "thread_safe": devmm.ThreadSafeAdaptor}


def configure(tmp_path, adaptors):
    cfg = tmp_path / "devmm.ini"
    log = f"log_file = {os.devnull}\n" if "logging" in adaptors else ""
    log += "limit = 1GiB\n" if "limiting" in adaptors else ""  # limiting needs a limit
    cfg.write_text(f"[device cpu]\nresource = cpu.malloc\nadaptors = {', '.join(adaptors)}\n{log}")
    devmm.init(str(cfg))


@pytest.mark.parametrize("top", ADAPTORS)
def test_a_configured_stack_comes_back_as_its_top_adaptor(tmp_path, top):
    under = [a for a in ADAPTORS if a != top]
    configure(tmp_path, under + [top])  # the last adaptor listed is the outermost
    r = devmm.get_current_device_resource("cpu")
    assert type(r) is CLASSES[top] and r.name.startswith(top + "(")
    chain = []
    while r is not None:  # every upstream is typed too, down to the plugin's resource
        chain.append(type(r))
        r = r.upstream
    assert chain == [CLASSES[a] for a in reversed(under + [top])] + [devmm.MemoryResource]


def test_configured_statistics_are_readable_directly(tmp_path):
    configure(tmp_path, ["limiting", "statistics"])
    stats = devmm.get_current_device_resource("cpu")
    t = devmm.empty((256,), "float32")
    assert stats.current_bytes == 1024 and stats.statistics.current_count == 1
    t.buffer.free()
    assert stats.current_bytes == 0


def test_typed_everywhere_a_resource_comes_back():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    lim = devmm.LimitingAdaptor(s, 1 << 20)
    t = devmm.empty(4, resource=lim)
    assert type(t.buffer.resource) is devmm.LimitingAdaptor
    assert type(t.buffer.resource.upstream) is devmm.StatisticsAdaptor
    prev = devmm.set_current_device_resource(lim)
    try:
        assert type(devmm.set_current_device_resource(lim)) is devmm.LimitingAdaptor
        assert type(devmm.get_current_device_resource()) is devmm.LimitingAdaptor
    finally:
        devmm.set_current_device_resource(prev)
    assert type(devmm.StatisticsAdaptor.find(lim)) is devmm.StatisticsAdaptor


def test_statistics_are_a_frozen_dataclass():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    keep = devmm.empty(100, "int8", resource=s)
    st = s.statistics
    assert isinstance(st, devmm.Statistics) and dataclasses.is_dataclass(st)
    assert st == devmm.Statistics(current_bytes=100, current_count=1, peak_bytes=100,
                                  peak_count=1, total_bytes=100, total_count=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.current_bytes = 0
    assert [f.name for f in dataclasses.fields(st)] == [  # RMM's Statistics, field for field
        "current_bytes", "current_count", "peak_bytes", "peak_count", "total_bytes",
        "total_count"]
    s.push()
    devmm.empty(300, "int8", resource=s)
    inner = s.pop()
    assert isinstance(inner, devmm.Statistics)
    assert (inner.peak_bytes, inner.current_bytes, inner.total_count) == (300, 0, 1)
    assert (s.current_bytes, s.peak_bytes, s.total_bytes, s.current_count, s.peak_count,
            s.total_count) == (100, 400, 400, 1, 2, 2)
    assert "current_bytes=100" in repr(s.statistics)
    del keep


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(), str(path))


def _source_line(name, lineno):
    return (PACKAGE / name).read_text().splitlines()[lineno - 1]


def test_only_lib_opens_the_library():
    # every binding, typed or not, lives in _lib.py: no other module opens the library or
    # binds a symbol through _lib's handle
    loaders = ("CDLL", "PyDLL", "pythonapi", "LibraryLoader", "cdll", "pydll")
    seen = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and (
                    node.attr in loaders or (node.attr == "lib" and isinstance(node.value, ast.Name)
                                             and node.value.id == "_lib")):
                seen.append(f"{name}:{node.lineno} {node.attr}")
    assert [s for s in seen if not s.startswith("_lib.py:")] == []
    assert seen, "the test must see _lib.py's own loader"


def _is_int(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def test_no_c_constant_is_retyped():
    # C's codes typed again in Python: a module-level name bound to an int, or a literal table
    # of ints (device types in a tuple, status codes, a dict keyed by codes). Ask C instead.
    # A protocol's own values (the Array API's stream numbers) say "not a C constant" on their
    # line.
    retyped = []
    for name, tree in _modules():
        if name == "_lib.py":
            continue
        for node in tree.body:
            if isinstance(node, ast.Assign) and _is_int(node.value):
                retyped.append(f"{name}:{node.lineno} = {ast.unparse(node.value)}")
        for node in ast.walk(tree):
            items = (node.keys if isinstance(node, ast.Dict) else
                     node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [])
            if (len(items) >= 2 and all(item is not None and _is_int(item) for item in items)
                    and "not a C constant" not in _source_line(name, node.lineno)):
                retyped.append(f"{name}:{node.lineno} {ast.unparse(node)[:40]}")
    assert not retyped, "retyped C constants:\n" + "\n".join(retyped)


def test_constants_come_from_c():
    from devmm import _lib
    c = _lib.CONSTANTS
    assert c["DEVMM_DEVICE_CUDA_MANAGED"] == 13 and c["DEVMM_ECALLBACK"] == -11
    assert c["DEVMM_DLPACK_FLAG_IS_COPIED"] == 2 and c["DEVMM_MAX_NDIM"] == 32


def test_lib_binds_ctypes_on_first_use():
    # ADR 45: _lib loads libdevmm as devmm._libdevmm; the structs, the signature table and the
    # ctypes handle come with the first read of one, and what the import system asks of a
    # module (__path__, ...) imports nothing
    import subprocess
    import sys
    code = ("import sys\n"
            "from devmm import _lib as L\n"
            "seen = lambda: ('ctypes' in sys.modules, 'devmm._cdecl' in sys.modules)\n"
            "print(seen(), hasattr(L, '__path__'), seen())\n"
            "print(L.Device(2, 1).device_id, seen(), L.lib is L.lib)\n"
            "print(L.resource_name.restype is L.ctypes.c_char_p, L.status_name(0))\n"
            "try:\n"
            "    L.no_such_function\n"
            "except AttributeError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "(False, False) False (False, False)", "1 (True, True) True", "True b'DEVMM_OK'",
        "module 'devmm._lib' has no attribute 'no_such_function'"], r.stdout
