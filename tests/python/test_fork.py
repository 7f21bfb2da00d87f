"""Fork and first use (ADR 37 and 38, "Fork"), on the simulator: a GPU runtime is initialised only
by the first use of one of its devices, never by ``import devmm``, ``devmm.init`` or a CPU
allocation; a child forked after that use gets a quick error naming fork and the ``spawn`` /
``forkserver`` start methods (never a hang); a child of a parent that used only the CPU works.

Each scenario runs in a fresh interpreter (``python -c``), so that what this pytest process did
with the simulator before does not count, under a time limit: a hang is a failure."""

import os
import subprocess
import sys
import textwrap

import pytest

CONFIG = ("[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 1\nmemory = 16MiB\n"
          "jitter_us = 0\n[device sim:*]\nresource = sim.async\n")

PRELUDE = """
import ctypes, multiprocessing, os, sys
import devmm

def sim_state():
    # the simulator's own report, from the copy devmm loaded (devmm.plugins() would count every
    # device, which is devmm-info's view and initialises the runtime)
    so = os.path.join(os.environ["DEVMM_PLUGIN_PATH"].split(":")[0], "devmm-sim.so")
    try:
        lib = ctypes.CDLL(so, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return -1  # not loaded at all
    return lib.devmm_sim_runtime_state()

devmm.init(sys.argv[1])
"""


def run(tmp_path, body, defs="", timeout=30):
    """Runs a script of PRELUDE, defs and body (under ``__name__ == "__main__"``: a spawned child
    imports the script) in a fresh interpreter; its stdout, or the test fails."""
    ini = tmp_path / "devmm.ini"
    ini.write_text(CONFIG)
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent(defs) + '\nif __name__ == "__main__":\n'
                      + textwrap.indent(textwrap.dedent(body), "    "))
    try:
        p = subprocess.run([sys.executable, str(script), str(ini)], capture_output=True, text=True,
                           timeout=timeout, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the process hung: killed after {timeout} s")
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def test_init_and_cpu_allocation_leave_the_device_runtime_alone(tmp_path):
    out = run(tmp_path, """
        devmm.empty((4,), "float32")
        print("after cpu", sim_state())
        devmm.empty((4,), "float32", device="sim:0")
        print("after sim", sim_state())
    """)
    assert "after cpu 0" in out, out
    assert "after sim 1" in out, out


CHILD = """
def child(q):
    try:
        devmm.empty((4,), "float32", device="sim:0")
        q.put("allocated")
    except devmm.DevmmError as e:
        q.put(f"{type(e).__name__}: {e}")
    devmm.empty((4,), "float32")  # the CPU still works
    q.put("cpu ok")
"""

FORK_AFTER_USE = """
t = devmm.empty((1024,), "float32", device="sim:0")
ctx = multiprocessing.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
p.join(10)
if p.is_alive():
    p.kill()
    print("HUNG")
else:
    print("exit", p.exitcode)
    print(q.get(timeout=5))
    print(q.get(timeout=5))
"""


def test_fork_after_device_use_fails_fast_and_says_why(tmp_path):
    out = run(tmp_path, FORK_AFTER_USE, CHILD)
    assert "HUNG" not in out, out
    assert "exit 0" in out, out
    assert "allocated" not in out, out
    assert "DevmmError" in out and "was forked" in out, out
    assert "'spawn'" in out and "'forkserver'" in out, out
    assert "cpu ok" in out, out


CPU_ONLY_CHILD = """
def child(q):
    devmm.empty((4,), "float32")
    t = devmm.empty((1024,), "float32", device="sim:0")
    q.put(f"sim ok {t.device}")
"""

CPU_ONLY_PARENT = """
devmm.empty((4,), "float32")
ctx = multiprocessing.get_context("fork")
q = ctx.Queue()
p = ctx.Process(target=child, args=(q,))
p.start()
p.join(10)
if p.is_alive():
    p.kill()
    print("HUNG")
else:
    print("exit", p.exitcode)
    print(q.get(timeout=5))
"""


def test_child_of_a_cpu_only_parent_uses_the_device(tmp_path):
    out = run(tmp_path, CPU_ONLY_PARENT, CPU_ONLY_CHILD)
    assert "HUNG" not in out, out
    assert "exit 0" in out and "sim ok" in out, out


def test_spawn_after_device_use_works(tmp_path):
    # what the fork error recommends works: a spawned child initialises its own runtime
    out = run(tmp_path, FORK_AFTER_USE.replace('get_context("fork")', 'get_context("spawn")'),
              CHILD, timeout=60)
    assert "exit 0" in out and "allocated" in out, out


def test_exit_does_not_hang_on_work_that_never_ends(tmp_path):
    # a tensor handed to a stream whose work never ends (a host function that blocks): its free
    # is deferred and can never run; exit waits at most 2 s for it, then leaves it to the OS
    ini = tmp_path / "devmm.ini"
    ini.write_text(CONFIG)
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent("""
        import threading
        from devmm.mrs.sim import SimAsyncMemoryResource, runtime
        rt = runtime()
        never = threading.Event()
        t = devmm.empty(1 << 16, "uint8", resource=SimAsyncMemoryResource(0))
        s = rt.stream(0)
        rt.launch(s, never.wait)
        t.__dlpack__(stream=s.handle)
        del t
        print("PASS", flush=True)
    """))
    try:
        # (meson's test environment sets DEVMM_LOG_LEVEL=error, which would hide the warning)
        p = subprocess.run([sys.executable, str(script), str(ini)], capture_output=True, text=True,
                           timeout=30, env=dict(os.environ, DEVMM_LOG_LEVEL="warn"))
    except subprocess.TimeoutExpired:
        pytest.fail("exit hung on a deferred free whose consumer's work never ends")
    assert p.returncode == 0 and "PASS" in p.stdout, p.stdout + p.stderr
    assert p.stderr.count("left to the OS") == 1, p.stderr


def test_a_forked_child_drops_inherited_device_tensors_quietly(tmp_path):
    # the parent's device memory is the parent's: a child letting go of a tensor it inherited
    # frees nothing and logs nothing (it logged "freeing ... failed" before)
    ini = tmp_path / "devmm.ini"
    ini.write_text(CONFIG)
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + textwrap.dedent("""
        import gc
        t = devmm.zeros((1024,), "float32", device="sim:0")
        pid = os.fork()
        if pid == 0:
            del t
            gc.collect()
            os._exit(0)
        _, st = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(st), flush=True)
        del t
    """))
    p = subprocess.run([sys.executable, str(script), str(ini)], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ))
    assert p.returncode == 0 and "child 0" in p.stdout, p.stdout + p.stderr
    assert "freeing" not in p.stderr, p.stderr


def test_a_child_forked_while_another_thread_gets_the_resource_gets_it_too(tmp_path):
    # a thread inside get_current_device_resource's locked part at the fork (held here by the
    # test) must not leave the child's lock held forever: the child's get answers
    out = run(tmp_path, """
        import threading, time
        import devmm.resource as R
        held = threading.Event()

        def holder():
            with R._lock:
                held.set()
                time.sleep(3)
        threading.Thread(target=holder, daemon=True).start()
        held.wait()
        devmm.init()  # nothing remembered: the child's get wraps, under the lock
        pid = os.fork()
        if pid == 0:
            devmm.get_current_device_resource()
            os._exit(0)
        for _ in range(100):
            if os.waitpid(pid, os.WNOHANG)[0]:
                print("child done")
                break
            time.sleep(0.02)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("child blocked")
    """)
    assert "child done" in out, out
