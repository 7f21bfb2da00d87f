"""The GPU plugins on a machine without a GPU (CI): they load, report 0 devices with the
runtime's reason, and every resource creation fails cleanly with that reason. On a machine
with a GPU these checks do not apply (tests/gpu/run.sh covers it) and say so by skipping."""

import os

import pytest

import devmm
from devmm import _interchange

# the GPU plugins this build produced: the ones in the plugin path
BUILT = [p for p in ("cuda", "rocm", "rmm")
         if any(os.path.exists(os.path.join(d, f"devmm-{p}.so"))
                for d in os.environ.get("DEVMM_PLUGIN_PATH", "").split(":") if d)]
KINDS = {"cuda": ("device", "async", "managed", "pinned"),
         "rocm": ("device", "async", "managed", "pinned"),
         "rmm": ("current", "pool", "arena")}
DEVICE = {"cuda": "cuda", "rocm": "rocm", "rmm": "cuda"}  # the device type each one serves


def test_the_gpu_plugins_were_built_here():
    # CI's machine has the CUDA toolkit and Debian's libamdhip64-dev: both must build there
    if os.path.isdir("/usr/local/cuda"):
        assert "cuda" in BUILT
        # and the RMM bridge, against the librmm-cu13 wheel of the test venv
        assert "rmm" in BUILT
    assert "rocm" in BUILT or not os.path.exists("/usr/include/hip/hip_runtime_api.h")


@pytest.mark.parametrize("plugin", BUILT)
def test_plugin_loads_with_zero_devices_and_a_reason(plugin, tmp_path):
    ini = tmp_path / "devmm.ini"
    kind = "pool" if plugin == "rmm" else "async"
    ini.write_text(f"[devmm]\nplugins = cpu, {plugin}\n[device {DEVICE[plugin]}:*]\n"
                   f"resource = {plugin}.{kind}\nadaptors = statistics, limiting\nlimit = 90%\n")
    devmm.init(str(ini))  # a valid file: no error even without a device
    status = {p["name"]: p for p in devmm.plugins()}[plugin]
    assert status["status"] == "loaded", status
    if status["devices"]:
        pytest.skip(f"{plugin}: a device is present; tests/gpu/run.sh covers it")
    assert status["error"].startswith("0 devices: ") and len(status["error"]) > 15
    reason = status["error"][len("0 devices: "):]
    with pytest.raises(devmm.DevmmError,
                       match=f"no current resource for device {DEVICE[plugin]}:0"):
        devmm.empty(4, device=f"{DEVICE[plugin]}:0")
    for kind in KINDS[plugin]:
        with pytest.raises(devmm.DevmmError) as e:
            from devmm.mrs._kind import create
            create(f"{plugin}.{kind}", 0)
        assert f"{plugin}.{kind}: no {DEVICE[plugin]} device 0: 0 devices: {reason}" == str(e.value)


@pytest.mark.parametrize("plugin", [p for p in BUILT if p != "rmm"])
def test_python_classes_fail_cleanly(plugin, tmp_path):
    import importlib
    mod = importlib.import_module(f"devmm.mrs.{plugin}")
    prefix = "Cuda" if plugin == "cuda" else "Rocm"
    classes = [getattr(mod, f"{prefix}MemoryResource"), getattr(mod, f"{prefix}AsyncMemoryResource"),
               mod.ManagedMemoryResource, mod.PinnedMemoryResource]
    ini = tmp_path / "devmm.ini"
    ini.write_text(f"[devmm]\nplugins = cpu, {plugin}\n")
    devmm.init(str(ini))
    status = {p["name"]: p for p in devmm.plugins()}[plugin]
    assert status["status"] == "loaded", status
    if status["devices"]:
        pytest.skip(f"{plugin}: a device is present; tests/gpu/run.sh covers it")
    reason = status["error"][len("0 devices: "):]
    assert status["error"] == f"0 devices: {reason}" and reason
    assert sorted(c.KIND for c in classes) == sorted(f"{plugin}.{k}" for k in KINDS[plugin])
    for cls in classes:
        with pytest.raises(devmm.DevmmError) as e:
            cls()
        assert str(e.value) == f"{cls.KIND}: no {DEVICE[plugin]} device 0: 0 devices: {reason}"


def test_stream_rules_of_the_array_api():
    check = _interchange.check_stream
    check(2, None)
    check(2, 1)       # legacy default stream
    check(2, 2)       # per-thread default stream
    check(2, -1)      # no synchronisation
    check(2, 0x7f00)  # a cudaStream_t
    with pytest.raises(ValueError, match="stream 0 is ambiguous for CUDA"):
        check(2, 0)
    check(10, 0)      # ROCm's default stream
    with pytest.raises(ValueError, match="stream 1 is not valid for ROCm"):
        check(10, 1)
    with pytest.raises(ValueError, match="stream must be None for cpu"):
        check(1, 5)
    with pytest.raises(TypeError, match="stream must be an int"):
        check(2, "default")


def test_cuda_array_interface_only_on_cuda():
    with pytest.raises(AttributeError, match="cpu is not CUDA memory"):
        devmm.empty(2).__cuda_array_interface__
