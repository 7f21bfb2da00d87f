"""What a user coming from RAPIDS RMM relies on (issue 24, docs/from-rmm.md, ADR 41): RMM's
module-level conveniences over devmm's adaptors, and the differences devmm keeps or gave up."""

import ctypes
import dataclasses
import os
import subprocess
import sys

import pytest

import devmm
from devmm.mrs.cpu import MallocMemoryResource

SIM_INI = "[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 2\n[device sim:*]\n" \
          "resource = sim.async\n"


# ----------------------------------------------------------------------------- statistics

def test_push_returns_the_figures_before_the_push():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    p = s.allocate(100)
    before = s.push()
    assert before == devmm.Statistics(100, 1, 100, 1, 100, 1)
    assert s.current_bytes == 0
    s.pop()
    s.deallocate(p, 100)


def test_enable_statistics_stacks_once_on_every_device():
    devmm.init(SIM_INI)
    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.enable_statistics()
    for d in ("cpu", "sim:0", "sim:1"):
        assert isinstance(devmm.get_current_device_resource(d), devmm.StatisticsAdaptor), d
    devmm.enable_statistics()  # already there: not stacked twice
    assert devmm.get_current_device_resource().name == "statistics(cpu.malloc)"


def test_enable_statistics_of_one_device():
    devmm.init(SIM_INI)
    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.enable_statistics("sim:1")
    assert devmm.get_current_device_resource("sim:1").name.startswith("statistics(")
    assert devmm.get_current_device_resource().name == "cpu.malloc"
    assert devmm.get_statistics() is None  # as RMM's: None where no statistics are kept


def test_get_push_pop_statistics():
    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.enable_statistics("cpu")
    t = devmm.empty(64, "int8")
    assert devmm.get_statistics().current_bytes == 64
    assert devmm.push_statistics() == devmm.Statistics(64, 1, 64, 1, 64, 1)
    u = devmm.empty(32, "int8")
    assert devmm.get_statistics().current_bytes == 32
    assert devmm.pop_statistics().total_bytes == 32
    assert devmm.get_statistics().total_bytes == 96
    del t, u


def test_statistics_block_enables_and_restores():
    base = MallocMemoryResource()
    devmm.set_current_device_resource(base)
    with devmm.statistics():
        t = devmm.empty(16, "int8")
        assert devmm.get_statistics().current_bytes == 16
    assert devmm.get_current_device_resource() == base
    del t
    devmm.enable_statistics("cpu")
    outer = devmm.get_current_device_resource()
    with devmm.statistics():
        u = devmm.empty(8, "int8")
        assert devmm.get_statistics().total_bytes == 8
    assert devmm.get_current_device_resource() == outer
    assert devmm.get_statistics().total_bytes == 8  # the scope merged into the outer one
    del u


def test_statistics_block_refuses_a_changed_stack():
    devmm.set_current_device_resource(MallocMemoryResource())
    with pytest.raises(ValueError, match="changed"):
        with devmm.statistics():
            devmm.set_current_device_resource(MallocMemoryResource())


def test_popping_the_last_scope_is_an_index_error_too():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    with pytest.raises(IndexError):
        s.pop()
    with pytest.raises(devmm.DevmmStateError):
        s.pop()


def test_statistics_module_and_function_coexist():
    import devmm._statistics  # the dataclass's module: importing it never hides the function
    assert callable(devmm.statistics)
    assert devmm._statistics.Statistics is devmm.Statistics


# ----------------------------------------------------------------------------- logging

def test_enable_logging_names_a_file_per_device(tmp_path):
    devmm.init(SIM_INI)
    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.enable_logging(log_file_name=str(tmp_path / "rmm_log.csv"))
    names = devmm.get_log_filenames()
    assert names["cpu"] == str(tmp_path / "rmm_log.cpu.csv")
    assert names["sim:0"] == str(tmp_path / "rmm_log.sim0.csv")
    t = devmm.empty(48, "int8")
    del t
    devmm.disable_logging()
    assert devmm.get_current_device_resource().name == "cpu.malloc"
    assert devmm.get_log_filenames() == {}
    text = (tmp_path / "rmm_log.cpu.csv").read_text()
    assert text.startswith("Thread,Time,Action,Pointer,Size,Stream") and ",48," in text


def test_cuda_devices_keep_rmm_file_names():
    from devmm.rmm_compat import log_file_for
    assert log_file_for("x/rmm_log.csv", "cuda:1") == "x/rmm_log.dev1.csv"
    assert log_file_for("rmm_log", "rocm:0") == "rmm_log.rocm0"


def test_log_file_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DEVMM_LOG_FILE", str(tmp_path / "env.csv"))
    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.enable_logging(device="cpu")
    assert devmm.get_log_filenames() == {"cpu": str(tmp_path / "env.csv").replace(
        "env.csv", "env.cpu.csv")}
    devmm.disable_logging()
    monkeypatch.delenv("DEVMM_LOG_FILE")
    with pytest.raises(ValueError, match="DEVMM_LOG_FILE"):
        devmm.enable_logging(device="cpu")


def test_more_than_one_sink(tmp_path):
    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.enable_logging(log_file_name=[str(tmp_path / "a.csv"), str(tmp_path / "b.csv")],
                         device="cpu")
    t = devmm.empty(24, "int8")
    del t
    devmm.flush_logger()
    for f in ("a.cpu.csv", "b.cpu.csv"):
        assert ",24," in (tmp_path / f).read_text(), f
    devmm.disable_logging()
    assert devmm.get_current_device_resource().name == "cpu.malloc"


def test_logging_level_api():
    was = devmm.get_logging_level()
    try:
        devmm.set_logging_level("debug")
        assert devmm.get_logging_level() == devmm.level_enum.debug
        assert devmm.should_log(devmm.level_enum.info)
        devmm.set_logging_level(devmm.level_enum.error)
        assert not devmm.should_log("warn") and devmm.should_log("critical")
        devmm.set_logging_level("critical")  # RMM's: devmm's diagnostics say errors
        assert devmm.get_logging_level() == devmm.level_enum.critical
        devmm.set_flush_level("warn")
        assert devmm.get_flush_level() == devmm.level_enum.warn
        with pytest.raises(ValueError, match="not a level"):
            devmm.set_logging_level("loud")
    finally:
        devmm.set_logging_level(was)


def test_logging_level_reaches_devmms_diagnostics(tmp_path):
    # the level C's diagnostics use: DEVMM_LOG_LEVEL's, then the one set, then devmm.ini's
    ini = tmp_path / "info.ini"
    ini.write_text("[devmm]\nlog_level = info\n")
    code = ("import devmm, devmm._lib as lib; print(devmm.get_logging_level().name); "
            "devmm.set_logging_level('critical'); print(lib.log_level().decode()); "
            f"devmm.init({str(ini)!r}); print(devmm.get_logging_level().name)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, DEVMM_LOG_LEVEL="debug"))
    assert r.stdout.split() == ["debug", "error", "info"], r.stderr


def test_log_outstanding_allocations(capfd):
    tr = devmm.TrackingAdaptor(MallocMemoryResource())
    p = tr.allocate(4096)
    assert tr.get_allocated_bytes() == 4096
    assert "4096" in tr.get_outstanding_allocations_str()
    was = devmm.get_logging_level()
    try:
        devmm.set_logging_level("info")
        tr.log_outstanding_allocations()
        assert "4096" not in capfd.readouterr().err  # RMM logs them at debug
        devmm.set_logging_level("debug")
        tr.log_outstanding_allocations()
        assert "4096" in capfd.readouterr().err
    finally:
        devmm.set_logging_level(was)
    tr.deallocate(p, 4096)


# ----------------------------------------------------------------------------- (re)initialisation

def test_reinitialize_hooks_run_before_and_after_init():
    seen = []

    def before(tag, *, n):
        seen.append(("before", tag, n, devmm.get_current_device_resource().name))

    def after():
        seen.append(("after", devmm.get_current_device_resource().name))

    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.register_reinitialize_hook(before, "x", n=1)
    devmm.register_reinitialize_hook(after, after=True)
    try:
        devmm.init("[device cpu]\nresource = cpu.malloc\nadaptors = statistics\n")
    finally:
        devmm.unregister_reinitialize_hook(before)
        devmm.unregister_reinitialize_hook(after)
    assert seen == [("before", "x", 1, "cpu.malloc"), ("after", "statistics(cpu.malloc)")]
    devmm.init()
    assert len(seen) == 2  # unregistered


def test_reset_current_device_resource():
    configured = devmm.get_current_device_resource()
    devmm.set_current_device_resource(MallocMemoryResource())
    devmm.set_current_device_resource(devmm.StatisticsAdaptor(MallocMemoryResource()))
    devmm.reset_current_device_resource()
    assert devmm.get_current_device_resource() == configured
    assert devmm.is_initialized() and devmm.is_initialized("cpu")
    assert not devmm.is_initialized("sim:7")


def test_is_initialized_before_first_use():
    r = subprocess.run([sys.executable, "-c", "import devmm; print(devmm.is_initialized()); "
                        "devmm.empty(1); print(devmm.is_initialized())"],
                       capture_output=True, text=True)
    assert r.stdout.split() == ["False", "True"], r.stderr


# ----------------------------------------------------------------------------- resources

def test_current_resource_is_what_was_set():
    for mr in (MallocMemoryResource(), devmm.StatisticsAdaptor(MallocMemoryResource())):
        devmm.set_current_device_resource(mr)
        assert type(devmm.get_current_device_resource()) is type(mr)
        assert devmm.get_current_device_resource() is mr


def test_failure_callback_exception_reaches_the_caller():
    def callback(nbytes, attempt):
        raise RuntimeError("MyError")

    mr = devmm.FailureCallbackAdaptor(devmm.LimitingAdaptor(MallocMemoryResource(), 10),
                                      callback)
    with pytest.raises(RuntimeError, match="MyError"):
        mr.allocate(100)
    devmm.set_current_device_resource(mr)
    with pytest.raises(RuntimeError, match="MyError"):
        devmm.empty(100, "int8")
    # the next failure is the adaptor's own again, not the stale exception
    quiet = devmm.FailureCallbackAdaptor(devmm.LimitingAdaptor(MallocMemoryResource(), 10),
                                         lambda n, a: False)
    with pytest.raises(devmm.OutOfMemoryError):
        quiet.allocate(100)


def test_failure_callback_on_any_error():
    calls = []

    def refuse(n, a, s):
        raise ValueError("no")

    bad = devmm.CallbackMemoryResource(refuse, lambda *a: None, name="bad")
    only_oom = devmm.FailureCallbackAdaptor(bad, lambda n, a: calls.append(n) or False)
    with pytest.raises(devmm.CallbackError):
        only_oom.allocate(8)
    assert calls == []
    anyerr = devmm.FailureCallbackAdaptor(bad, lambda n, a: calls.append(n) or False,
                                          any_error=True)
    with pytest.raises(devmm.CallbackError, match="gave up"):
        anyerr.allocate(8)
    assert calls == [8]


def test_git_commit():
    c = devmm.__git_commit__
    assert c == "unknown" or (len(c) == 40 and int(c, 16) >= 0)
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.path.isdir(os.path.join(top, ".git")) and devmm.__file__.startswith(top):
        r = subprocess.run(["git", "-C", top, "rev-parse", "HEAD"], capture_output=True,
                           text=True)
        if r.returncode == 0:
            assert c == r.stdout.strip()


def test_new_names_are_lazy():
    r = subprocess.run([sys.executable, "-c", "import sys, devmm; "
                        "print('devmm.rmm_compat' in sys.modules); devmm.enable_statistics; "
                        "print('devmm.rmm_compat' in sys.modules)"],
                       capture_output=True, text=True)
    assert r.stdout.split() == ["False", "True"], r.stderr


# ----------------------------------------------------------------------------- RMM's own names
# What RMM's Python tests call, ported as they are (docs/from-rmm.md, Names)

def test_outstanding_allocations_str_is_empty_with_none_outstanding(capfd):
    tr = devmm.TrackingAdaptor(MallocMemoryResource())
    assert tr.get_outstanding_allocations_str() == ""  # RMM's test: len(...) == 0
    p = tr.allocate(64)
    assert "64 bytes" in tr.get_outstanding_allocations_str()
    tr.deallocate(p, 64)
    assert len(tr.get_outstanding_allocations_str()) == 0
    assert "0 outstanding allocations" in tr.report()  # devmm's summary, kept
    was = devmm.get_logging_level()
    try:
        devmm.set_logging_level("debug")
        tr.log_outstanding_allocations()  # says there are none, as report() does
        assert "0 outstanding allocations" in capfd.readouterr().err
    finally:
        devmm.set_logging_level(was)


def test_tracking_takes_rmms_capture_stacks():
    base = MallocMemoryResource()
    tr = devmm.TrackingAdaptor(base, capture_stacks=True)
    p = tr.allocate(32)
    stack = tr.lookup(p)["python_stack"]
    assert stack[0][2] == "test_tracking_takes_rmms_capture_stacks" and len(stack) <= 16
    assert "test_tracking_takes_rmms_capture_stacks" in tr.get_outstanding_allocations_str()
    tr.deallocate(p, 32)
    off = devmm.TrackingAdaptor(base, capture_stacks=False)
    q = off.allocate(8)
    assert off.lookup(q)["python_stack"] == []
    off.deallocate(q, 8)
    with pytest.raises(TypeError, match="capture_stacks or python_stack, not both"):
        devmm.TrackingAdaptor(base, capture_stacks=True, python_stack=4)
    with pytest.raises(TypeError, match="capture_stacks must be True or False"):
        devmm.TrackingAdaptor(base, capture_stacks=1)


def test_limiting_takes_rmms_names():
    base = MallocMemoryResource()
    lim = devmm.LimitingAdaptor(base, allocation_limit=1000)
    assert lim.get_allocation_limit() == lim.limit == 1000
    p = lim.allocate(100)
    assert lim.get_allocated_bytes() == lim.allocated_bytes == 100
    lim.deallocate(p, 100)
    assert devmm.LimitingAdaptor(base, "1KiB").get_allocation_limit() == 1024
    with pytest.raises(TypeError, match="limit or allocation_limit, not both"):
        devmm.LimitingAdaptor(base, 10, allocation_limit=10)
    with pytest.raises(TypeError, match="missing the limit"):
        devmm.LimitingAdaptor(base)
    with pytest.raises(ValueError, match="^allocation_limit"):  # the name it was given as
        devmm.LimitingAdaptor(base, allocation_limit="lots")


def _host_memory(live):
    def alloc(nbytes):
        buf = ctypes.create_string_buffer(nbytes + 256)
        ptr = -(-ctypes.addressof(buf) // 256) * 256  # 256-aligned, as CUDA's
        live[ptr] = buf
        return ptr
    return alloc


def test_callback_resource_takes_rmms_signatures():
    live, calls = {}, []
    alloc = _host_memory(live)

    def rmm_allocate(nbytes, stream):  # RMM's: allocate(nbytes, stream)
        calls.append(("allocate", nbytes, stream))
        return alloc(nbytes)

    def rmm_deallocate(ptr, nbytes, stream):  # and deallocate(ptr, nbytes, stream)
        calls.append(("deallocate", nbytes, stream))
        del live[ptr]

    r = devmm.CallbackMemoryResource(rmm_allocate, rmm_deallocate, name="rmm")
    t = devmm.empty(10, "int8", resource=r)
    t.buffer.free()
    # the CPU's tensors ask for 64 bytes, which RMM's callback is not told: devmm asks 63 more
    assert calls == [("allocate", 10 + 63, None), ("deallocate", 10 + 63, None)] and not live
    # older RMM's: allocate(nbytes), deallocate(ptr, nbytes)
    old = devmm.CallbackMemoryResource(lambda n: alloc(n), lambda p, n: live.pop(p))
    p = old.allocate(16)
    assert len(live) == 1
    old.deallocate(p, 16)
    assert not live
    # an argument with a default is taken when it fits; *args takes devmm's four
    seen = []
    d = devmm.CallbackMemoryResource(lambda n, stream="unset": seen.append(stream) or alloc(n),
                                     lambda *args: seen.append(args) or live.pop(args[0]))
    p = d.allocate(8)
    d.deallocate(p, 8)
    assert seen[0] is None and len(seen[1]) == 4 and seen[1][:2] == (p, 8) and not live
    with pytest.raises(TypeError, match=r"deallocate must be callable\(ptr, nbytes, alignment, "
                                        r"stream\), got a function of 1 argument \(RMM's "
                                        r"\(ptr, nbytes, stream\) and \(ptr, nbytes\) are"):
        devmm.CallbackMemoryResource(rmm_allocate, lambda p: None)
    with pytest.raises(TypeError, match=r"allocate must be callable\(nbytes, alignment, stream\) "
                                        r"-> int, got a function of 4 arguments \(RMM's"):
        devmm.CallbackMemoryResource(lambda a, b, c, d: 0, rmm_deallocate)


def test_failure_callback_takes_rmms_one_argument_callback():
    seen = []

    def callback(nbytes):  # RMM's: callback(nbytes) -> bool
        seen.append(nbytes)
        return len(seen) < 3

    limited = devmm.LimitingAdaptor(MallocMemoryResource(), 10)
    mr = devmm.FailureCallbackAdaptor(limited, callback)
    with pytest.raises(devmm.OutOfMemoryError, match="gave up after 3 attempts"):
        mr.allocate(100)
    assert seen == [100, 100, 100]
    # a callable without a signature is called as devmm's: min(nbytes, attempt) is 0 at once
    with pytest.raises(devmm.OutOfMemoryError, match="gave up after 1 attempt\\)"):
        devmm.FailureCallbackAdaptor(limited, min).allocate(100)
    with pytest.raises(TypeError, match=r"callback must be callable\(nbytes, attempt\) -> bool, "
                                        r"got a function of 0 arguments \(RMM's \(nbytes\) is"):
        devmm.FailureCallbackAdaptor(limited, lambda: True)


def test_log_levels_accept_what_the_docs_say():
    was = devmm.get_logging_level()
    lv = devmm.level_enum
    try:
        for level, want in (("debug", lv.debug), (" Warning ", lv.warn), (3, lv.warn),
                            (lv.info, lv.info), ("CRITICAL", lv.critical)):
            devmm.set_logging_level(level)
            assert devmm.get_logging_level() == want, level
        for fn in (devmm.set_logging_level, devmm.set_flush_level, devmm.should_log):
            for bad in ("loud", 99, -1, ""):
                with pytest.raises(ValueError, match="is not a level: expected one of trace"):
                    fn(bad)
            for bad in (None, 1.5, True, b"info"):
                with pytest.raises(TypeError, match="a level is a devmm.level_enum, an int or "
                                                    "a str, got"):
                    fn(bad)
    finally:
        devmm.set_logging_level(was)


def test_statistics_read_as_rmms_dict():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    p = s.allocate(100)
    counts = s.allocation_counts  # RMM's name
    want = {"current_bytes": 100, "current_count": 1, "peak_bytes": 100, "peak_count": 1,
            "total_bytes": 100, "total_count": 1}
    assert counts["current_bytes"] == 100 and counts.current_bytes == 100
    assert dict(counts) == want and counts == want and want == counts  # older RMM's: a dict
    assert counts == devmm.Statistics(100, 1, 100, 1, 100, 1)  # newer RMM's: Statistics
    assert counts != dict(want, peak_count=2) and counts != devmm.Statistics(0, 0, 0, 0, 0, 0)
    assert list(counts) == list(want) and len(counts) == 6 and "peak_count" in counts
    assert counts.get("nope") is None and dataclasses.asdict(counts) == want
    assert hash(counts) == hash(devmm.Statistics(100, 1, 100, 1, 100, 1))
    with pytest.raises(KeyError):
        counts["nope"]
    assert s.push_counters() == want  # RMM's names for push() and pop()
    assert s.pop_counters().total_count == 0
    s.deallocate(p, 100)


def test_popping_the_last_scope_says_rmms_words():
    s = devmm.StatisticsAdaptor(MallocMemoryResource())
    with pytest.raises(IndexError, match="cannot pop the last counter pair"):  # RMM's test
        s.pop_counters()
    with pytest.raises(devmm.StatisticsScopeError, match="pop without a matching push"):
        s.pop()


# ----------------------------------------------------------------------------- RMM's own tests, as
# written (the outside port of RMM's test_callback_memory_resource.py and test_logging.py)

def _misaligned_host(live):
    """A malloc-like allocate: 16-byte aligned, never 64 (so a 64-byte ask always needs help)."""
    def alloc(nbytes):
        buf = ctypes.create_string_buffer(nbytes + 128)
        ptr = -(-ctypes.addressof(buf) // 64) * 64 + 16
        live[ptr] = (buf, nbytes)
        return ptr
    return alloc


def test_rmm_positional_stream_reaches_devmms_allocate():
    base, calls = MallocMemoryResource(), []

    def allocate_func(size, stream):  # RMM's test_custom_mr, as written
        calls.append(("allocate", size))
        return base.allocate(size, stream)

    def deallocate_func(ptr, size, stream):
        calls.append(("deallocate", size))
        return base.deallocate(ptr, size, stream)

    t = devmm.empty(256, "int8", resource=devmm.CallbackMemoryResource(allocate_func,
                                                                       deallocate_func))
    del t
    assert [c[0] for c in calls] == ["allocate", "deallocate"] and calls[0][1] == calls[1][1]
    p = base.allocate(64, None)  # None in alignment's place: RMM's stream
    base.deallocate(p, 64, None)
    from devmm.mrs.sim import runtime
    devmm.init(SIM_INI)
    sim = devmm.get_current_device_resource("sim:0")
    with runtime().stream() as s:  # a stream object: RMM's stream too
        p = sim.allocate(64, s)
        sim.deallocate(p, 64, s)
    with pytest.raises(TypeError, match="stream given twice"):
        base.allocate(64, None, 5)
    with pytest.raises(devmm.DevmmValueError, match=r"not a power of two.*stream="):
        base.allocate(64, 94059849133520)  # a plain int stays the alignment: the hint says so
    p = base.allocate(64)
    with pytest.raises(devmm.DevmmValueError, match=r"alignment=0 \(a stream handle .*stream="):
        base.deallocate(p, 64, 94059849133520)
    base.deallocate(p, 64)


def test_rmm_shaped_callback_gets_the_alignment_it_was_not_told():
    live, freed = {}, []
    alloc = _misaligned_host(live)

    def dealloc(ptr, nbytes, stream):
        assert live.pop(ptr)[1] == nbytes  # the callback's own pointer and size come back
        freed.append(nbytes)

    r = devmm.CallbackMemoryResource(lambda n, stream: alloc(n), dealloc)
    ts = [devmm.empty(256, "int8", resource=r) for _ in range(50)]  # the CPU asks for 64
    assert all(t.data_ptr % 64 == 0 for t in ts) and len(live) == 50
    del ts
    assert not live and len(freed) == 50
    p = r.allocate(100, 4096)
    assert p % 4096 == 0
    r.deallocate(p, 100, 4096)
    assert not live
    fail = [True]  # a free that raises keeps the callback's pointer for the next try

    def flaky(ptr, nbytes, stream):
        if fail.pop() if fail else False:
            raise RuntimeError("not now")
        dealloc(ptr, nbytes, stream)

    f = devmm.CallbackMemoryResource(lambda n, stream: alloc(n), flaky)
    p = f.allocate(10, 64)
    with pytest.raises(devmm.CallbackError, match="not now"):
        f.deallocate(p, 10, 64)
    f.deallocate(p, 10, 64)  # the second try frees what the callback gave
    assert not live
    # on the simulator RMM's callback over a sim resource, stream passed on as written
    devmm.init(SIM_INI)
    from devmm.mrs.sim import SimMemoryResource, runtime
    base, streams = SimMemoryResource(0), []

    def sim_alloc(size, stream):
        streams.append(stream)
        return base.allocate(size, stream)

    sr = devmm.CallbackMemoryResource(sim_alloc, lambda p, n, s: base.deallocate(p, n, s),
                                      device="sim:0")
    with runtime().stream() as s:
        t = devmm.empty(256, "int8", resource=sr, stream=s.handle)
        assert t.device == "sim:0" and streams[-1] == s.handle
        del t
    assert isinstance(streams[-1], int)


def test_callback_error_is_a_runtime_error_and_interrupts_propagate():
    def fails(nbytes, stream):
        raise ValueError("My alloc error")

    r = devmm.CallbackMemoryResource(fails, lambda p, n, s: None)
    with pytest.raises(RuntimeError, match="My alloc error"):  # RMM's test
        devmm.empty(8, "int8", resource=r)
    assert issubclass(devmm.CallbackError, devmm.DevmmError)

    def interrupted(nbytes, stream):
        raise KeyboardInterrupt()

    with pytest.raises(KeyboardInterrupt):
        devmm.empty(8, "int8", resource=devmm.CallbackMemoryResource(interrupted,
                                                                     lambda p, n, s: None))


def test_flush_logger_flushes_logging_adaptors_from_devmm_ini(tmp_path):
    f, g = tmp_path / "x.cpu.csv", tmp_path / "x.sim0.csv"
    devmm.init(f"[devmm]\nplugins = cpu, sim\n[device cpu]\nresource = cpu.malloc\n"
               f"adaptors = logging, statistics\nlog_file = {f}\n"
               f"[device sim:0]\nresource = sim.async\nadaptors = logging\nlog_file = {g}\n")
    t = devmm.empty(10, "int8")
    u = devmm.empty(10, "int8", device="sim:0")
    del t, u
    devmm.flush_logger()  # RMM's rmm.mr._flush_logs()
    for path in (f, g):
        lines = path.read_text().splitlines()
        assert lines[0] == "Thread,Time,Action,Pointer,Size,Stream" and len(lines) == 3, path


def test_rmm_adaptor_names():
    base = MallocMemoryResource()
    s = devmm.StatisticsAdaptor(base)
    assert s.get_upstream() == base and s.upstream_mr == base and s.get_upstream() is s.upstream
    lim = devmm.LimitingAdaptor(s, 100)
    assert lim.get_upstream() == s and isinstance(lim.upstream_mr, devmm.StatisticsAdaptor)
    assert devmm.profile.Record("f", 1, 2, 3).num_calls == 1
    r = devmm.profile.Record("f", 1, 2, 3)
    assert (r.num_calls, r.memory_peak, r.memory_total) == (1, 2, 3)


def test_logging_adaptor_get_file_name(tmp_path):
    path = str(tmp_path / "log.csv")
    lg = devmm.LoggingAdaptor(MallocMemoryResource(), path)
    assert lg.get_file_name() == path
    assert devmm.LoggingAdaptor(MallocMemoryResource()).get_file_name() is None
