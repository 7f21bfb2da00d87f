"""devmm.ini answers seen from Python: what has no effect is a RuntimeWarning (said once) and is
listed in ``devmm.info()["warnings"]``; history from devmm.ini reaches devmm.snapshot's tracker;
python_stack in devmm.ini is refused with the advice to use TrackingAdaptor."""

import warnings

import pytest

import devmm


def test_a_section_for_a_device_nobody_has_warns(tmp_path):
    cfg = tmp_path / "devmm.ini"
    cfg.write_text("[device cpu]\nadaptors = statistics\n[device cpu:1]\nadaptors = statistics\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = devmm.init(str(cfg))
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    want = (f"{cfg}:3: [device cpu:1]: no loaded plugin has device cpu:1, so this section is not "
            "used (plugin 'cpu' has cpu only)")
    assert said == ["devmm: " + want], said
    assert data["warnings"] == [want]
    devmm.init("[device cpu]\nadaptors = statistics\n")
    assert devmm.info()["warnings"] == []


def test_history_from_devmm_ini(tmp_path):
    devmm.init("[device cpu]\nadaptors = tracking\nhistory = 16\n")
    tr = devmm.get_current_device_resource("cpu")
    assert isinstance(tr, devmm.TrackingAdaptor)
    t = devmm.empty(64, "int8")
    t.buffer.free()
    trace = devmm.snapshot(tr).traces[0]
    assert trace.nbytes == [64] and len(trace.order) == 2, (trace.nbytes, trace.order)


def test_python_stack_in_devmm_ini_is_refused_with_advice():
    with pytest.raises(devmm.ConfigError, match=r":4: python_stack is not a devmm.ini key: .*"
                       r"expected devmm.TrackingAdaptor\(upstream, python_stack=N\)"):
        devmm.init("[device cpu]\nadaptors = tracking\nhistory = 16\npython_stack = 8\n")
