"""Which device a resource and a tensor are on (docs/api.md, the registry): a tensor's device is
its memory's, whichever route allocated it; a resource set with no device becomes the current
one of its home device (the GPU its memory belongs to), one of another device is refused; a
GPU section that devmm.ini got wrong names its file:line at first use too, and RMM's
every-device calls change every device or none."""

import pytest

import devmm
from devmm import _lib
from devmm.mrs import sim as simmrs
from devmm.mrs.cpu import MallocMemoryResource

BASE = "[devmm]\nplugins = cpu, sim\n[plugin sim]\ndevices = 1\nmemory = 64MiB\njitter_us = 0\n"
MANAGED = {"sim.managed": "resource = sim.managed\n",
           "pool=managed": "resource = sim.async\npool = managed\n"}


@pytest.mark.parametrize("section", sorted(MANAGED))
def test_a_tensor_is_on_its_memorys_device_by_either_route(section):
    devmm.init(BASE + "[device sim:0]\n" + MANAGED[section])
    by_device = devmm.empty(16, "uint8", device="sim:0")
    by_resource = devmm.empty(16, "uint8", resource=devmm.get_current_device_resource("sim:0"))
    for t in (by_device, by_resource):
        assert t.device == "sim_managed:0" == t.buffer.device
        assert t.__dlpack_device__() == (_lib.CONSTANTS["DEVMM_DEVICE_SIM_MANAGED"], 0)
    plain = devmm.empty(16, "uint8", device="cpu")
    assert plain.device == "cpu" and plain.__dlpack_device__() == (1, 0)


def test_set_with_no_device_sets_the_home_gpu_of_managed_memory():
    devmm.init(BASE + "[device sim:0]\nresource = sim.async\n")
    configured = devmm.get_current_device_resource("sim:0")
    mr = devmm.StatisticsAdaptor(simmrs.ManagedMemoryResource(0))
    assert mr.device == "sim_managed:0"
    assert devmm.set_current_device_resource(mr) is configured  # RMM's README pattern
    try:
        assert devmm.get_current_device_resource("sim:0") is mr
        devmm.empty(100, "uint8", device="sim:0")
        assert mr.total_count == 1
    finally:
        devmm.set_current_device_resource(configured, "sim:0")


def test_pinned_memory_is_its_own_device_as_in_devmm_ini():
    # [device sim:0] resource = sim.pinned is refused by devmm.ini: sim_host memory is its own
    with pytest.raises(devmm.errors.ConfigError, match="allocates sim_host memory, but this "
                       "section is for sim devices"):
        devmm.init(BASE + "[device sim:0]\nresource = sim.pinned\n")
    devmm.init(BASE)
    pinned = simmrs.PinnedMemoryResource()
    devmm.set_current_device_resource(pinned)
    assert devmm.get_current_device_resource("sim_host:0") is pinned
    devmm.reset_current_device_resource("sim_host:0")


def test_a_block_of_managed_memory_is_its_gpus():
    devmm.init(BASE + "[device sim:0]\nresource = sim.async\n")
    with devmm.using_memory_resource(simmrs.ManagedMemoryResource(0)) as mr:
        t = devmm.empty(8, "uint8", device="sim:0")
    assert t.buffer.resource.handle == mr.handle and t.device == "sim_managed:0"


def test_managed_memorys_own_device_is_served_by_its_gpus_resource():
    # a tensor of managed memory says sim_managed:0; asking for that device gets sim:0's
    # resource, in a block (the block's) and out of one (sim:0's current resource)
    devmm.init(BASE + "[device sim:0]\nresource = sim.async\n")
    configured = devmm.get_current_device_resource("sim:0")
    with devmm.using_memory_resource(simmrs.ManagedMemoryResource(0)) as mr:
        assert devmm.get_current_device_resource("sim_managed:0") is mr
        t = devmm.empty(8, "uint8", device="sim:0")
        u = devmm.empty(8, "uint8", device=t.device)
        assert u.buffer.resource.handle == mr.handle and u.device == "sim_managed:0"
    assert devmm.get_current_device_resource("sim_managed:0") is configured
    v = devmm.empty(8, "uint8", device="sim_managed:0")
    assert v.buffer.resource.handle == configured.handle and v.device == "sim:0"


def test_is_initialized_asks_managed_memorys_gpu():
    # as get_current_device_resource: sim_managed:0 has sim:0's current resource
    devmm.init(BASE + "[device sim:0]\nresource = sim.async\n")
    devmm.get_current_device_resource("sim:0")
    assert devmm.is_initialized("sim:0")
    assert devmm.is_initialized("sim_managed:0")


@pytest.mark.parametrize("section, target, lands", [("sim.managed", "sim:0", "sim_managed:0"),
                                                     ("sim.device", "sim_managed:0", "sim:0")])
def test_a_copy_is_on_its_memorys_device(section, target, lands):
    # a copy to another device allocates from that device's (home's) current resource, and is
    # on the device its memory is, as devmm.empty's tensor is
    devmm.init(BASE + f"[device sim:0]\nresource = {section}\n")
    u = devmm.empty(4, "uint8").copy(target)
    assert u.device == lands == u.buffer.device


def test_another_devices_resource_is_refused_and_nothing_changes():
    devmm.init(BASE + "[device sim:0]\nresource = sim.async\n")
    cpu = devmm.get_current_device_resource("cpu")
    sim = simmrs.SimMemoryResource(0)
    with pytest.raises(devmm.DevmmValueError) as e:
        devmm.set_current_device_resource(sim, device="cpu")
    assert str(e.value) == (
        "set_current_device_resource: sim.device (memory on sim:0) is a resource of sim:0, not "
        "of cpu: call set_current_device_resource(mr) or set_current_device_resource(mr, "
        "\"sim:0\")")
    assert devmm.get_current_device_resource("cpu") is cpu
    assert devmm.empty(4, "int8").buffer.device == "cpu"
    managed = simmrs.ManagedMemoryResource(0)
    with pytest.raises(devmm.DevmmValueError, match="sim.managed \\(memory on "
                       "sim_managed:0\\) is a resource of sim:0, not of sim_managed:0"):
        devmm.set_current_device_resource(managed, device="sim_managed:0")
    with pytest.raises(devmm.DevmmValueError,
                       match="cpu.malloc .* is a resource of cpu, not of sim:0"):
        devmm.set_current_device_resource(MallocMemoryResource(), device="sim:0")


BROKEN = BASE + "[device sim:0]\nresource = sim.device\nadaptors = prefetch\n"


def test_a_broken_gpu_section_names_its_line_at_first_use(tmp_path):
    ini = tmp_path / "devmm.ini"
    ini.write_text(BROKEN)
    devmm.init(str(ini))  # GPU devices are built on first use (ADR 38)
    with pytest.raises(devmm.DevmmError) as e:
        devmm.get_current_device_resource("sim:0")
    assert f"{ini}:9: [device sim:0]" in str(e.value), str(e.value)
    assert "prefetch adaptor over sim.device: its memory does not move" in str(e.value)


@pytest.mark.parametrize("call", ["enable_statistics", "enable_logging", "disable_logging"])
def test_every_device_calls_change_all_or_nothing(tmp_path, call):
    devmm.init(BROKEN)
    log = str(tmp_path / "log.csv")
    if call == "disable_logging":
        devmm.enable_logging(log, device="cpu")
    cpu, files = devmm.get_current_device_resource("cpu"), devmm.get_log_filenames()
    with pytest.raises(devmm.DevmmError, match="sim:0"):
        getattr(devmm, call)(*((log,) if call == "enable_logging" else ()))
    assert devmm.get_current_device_resource("cpu") is cpu
    assert devmm.get_log_filenames() == files
    if call == "disable_logging":
        devmm.disable_logging("cpu")


def _stand_in(resource, device):
    """Makes resource device's current resource in C's registry directly, as a C caller may
    (ADR 47: C's registry is keyed by device only); see tests/python/test_interop.py."""
    _lib.check(_lib.set_current_resource(devmm.resource.parse_device(device),
                                         resource.handle, None))


def test_every_device_calls_take_a_resource_c_stood_in(tmp_path):
    # what C's registry holds for a device is that device's, whatever its memory: the
    # every-device calls re-set it there (they changed cpu, then raised on sim:0)
    devmm.init(BASE + "[device sim:0]\nresource = sim.device\n")
    stand_in = MallocMemoryResource()
    _stand_in(stand_in, "sim:0")
    with devmm.statistics("sim:0") as stats:  # a block of its own: stacked, then put back
        devmm.empty(8, "uint8", device="sim:0")
    assert stats.total_count == 1
    assert devmm.get_current_device_resource("sim:0").handle == stand_in.handle
    devmm.enable_statistics()
    for d in ("cpu", "sim:0"):
        assert isinstance(devmm.get_current_device_resource(d), devmm.StatisticsAdaptor)
    assert devmm.get_current_device_resource("sim:0").upstream.handle == stand_in.handle
    devmm.enable_logging(str(tmp_path / "log.csv"))
    assert isinstance(devmm.get_current_device_resource("sim:0"), devmm.LoggingAdaptor)
    devmm.disable_logging()
    top = devmm.get_current_device_resource("sim:0")
    assert isinstance(top, devmm.StatisticsAdaptor) and top.upstream.handle == stand_in.handle
