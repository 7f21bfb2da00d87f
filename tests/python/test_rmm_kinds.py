"""The memory kinds RMM users have (issue 24, deliverable 3), on the simulator: system-allocated
memory (SystemMemoryResource) with its headroom (SamHeadroomMemoryResource) and prefetch, and a
view of a pool another library owns (CudaAsyncViewMemoryResource). docs/from-rmm.md."""

import ctypes

import pytest

import devmm
from devmm.mrs import sim as simmrs


def sim_ini(tmp_path, pageable: bool, memory: str = "256MiB"):
    ini = tmp_path / "devmm.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\njitter_us = 0\n"
                   f"memory = {memory}\npageable_access = {'true' if pageable else 'false'}\n")
    devmm.init(str(ini))
    return ini


def test_system_refused_where_the_gpu_cannot_address_pageable_memory(tmp_path):
    sim_ini(tmp_path, pageable=False)
    with pytest.raises(devmm.DevmmError) as err:
        simmrs.SystemMemoryResource(0)
    msg = str(err.value)
    assert "sim.system on sim:0: this platform does not let the GPU address pageable memory " \
           "(simDevAttrPageableMemoryAccess = 0)" in msg, msg
    assert "pageable_access = true" in msg, msg  # the simulator's way to have it


def test_system_is_malloc_memory_the_device_and_the_host_reach(tmp_path):
    sim_ini(tmp_path, pageable=True)
    r = simmrs.SystemMemoryResource(0)
    assert r.name == "sim.system"
    t = devmm.zeros(4096, "uint8", resource=r)
    rt = simmrs.runtime()
    s = rt.stream(0)
    rt.fill(s, t.data_ptr, 0x5A, 4096)       # a kernel writing malloc'ed memory
    s.synchronize()
    assert ctypes.string_at(t.data_ptr, 4096) == b"\x5a" * 4096  # the host reads it directly
    assert t.data_ptr % 256 == 0
    s.destroy()
    del t


def test_kernels_reach_pageable_memory_only_with_pageable_access(tmp_path):
    buf = ctypes.create_string_buffer(64)
    sim_ini(tmp_path, pageable=False)
    rt = simmrs.runtime()
    with pytest.raises(devmm.DevmmError, match="simErrorInvalidValue"):
        rt.fill(None, ctypes.addressof(buf), 1, 64)   # pageable: refused, as on most GPUs
    sim_ini(tmp_path, pageable=True)
    rt.fill(None, ctypes.addressof(buf), 1, 64)       # HMM/ATS: the GPU addresses it
    rt.synchronize(0)
    assert buf.raw == b"\x01" * 64


def test_system_headroom_keeps_device_memory_free_as_rmm_does(tmp_path):
    # RMM's sam_headroom_memory_resource: the part of an allocation that fits in the device's
    # free memory less the headroom prefers the device, the rest the host; nothing is refused
    sim_ini(tmp_path, pageable=True, memory="4MiB")
    rt = simmrs.runtime()
    r = simmrs.SamHeadroomMemoryResource(headroom="3MiB", device=0)
    assert r.name == "sim.system(headroom)"
    t = devmm.empty(2 << 20, "uint8", resource=r)
    p = t.data_ptr
    assert rt.preferred_location(p) == 0                       # the first MiB: the device
    assert rt.preferred_location(p + (1 << 20) - 1) == 0
    assert rt.preferred_location(p + (1 << 20)) == -1          # the rest: the host
    assert rt.preferred_location(p + (2 << 20) - 1) == -1
    plain = devmm.empty(4096, "uint8", resource=simmrs.SystemMemoryResource(0))
    assert rt.preferred_location(plain.data_ptr) is None       # no headroom: no advice
    del t, plain


def test_system_headroom_bad_value(tmp_path):
    sim_ini(tmp_path, pageable=True)
    with pytest.raises(devmm.DevmmError, match="headroom"):
        simmrs.SystemMemoryResource(0, headroom="lots")


def test_system_prefetch_moves_each_allocation_to_the_device(tmp_path):
    sim_ini(tmp_path, pageable=True)
    rt = simmrs.runtime()
    r = simmrs.SystemMemoryResource(0, prefetch=True)
    assert r.name == "sim.system(prefetch)"
    rt.inject("MemPrefetchAsync", 0, 2)   # the prefetch is made: its failure is the allocation's
    with pytest.raises(devmm.DevmmError, match="simMemPrefetchAsync"):
        devmm.empty(4096, "uint8", resource=r)
    rt.inject(None)
    devmm.empty(4096, "uint8", resource=r)


def test_pool_view_allocates_from_a_pool_it_never_destroys(tmp_path):
    sim_ini(tmp_path, pageable=False)
    rt = simmrs.runtime()
    pool = rt.pool_create(0)
    try:
        r = simmrs.SimAsyncViewMemoryResource(pool, device=0)
        assert r.name == f"sim.async(view {pool:#x})"
        t = devmm.zeros(1024, "uint8", resource=r)
        assert t.device == "sim:0"
        s = rt.stream(0)
        ok = rt.check(s, t.data_ptr, 0, 1024)
        s.synchronize()
        assert ok.value == 1
        s.destroy()
        del t, r
        devmm.init()   # every resource gone: the pool is still the owner's
    finally:
        rt.pool_destroy(pool)   # fails (simErrorInvalidValue) had devmm destroyed it


def test_pool_view_refuses_what_is_no_pool(tmp_path):
    sim_ini(tmp_path, pageable=False)
    with pytest.raises(devmm.DevmmError,
                       match=r"sim.async on sim:0: simMemPoolGetAttribute\(.*\) failed"):
        simmrs.SimAsyncViewMemoryResource(0x1000, device=0)
    with pytest.raises(devmm.DevmmError, match="pool = 0xzz: expected default, own, managed or"):
        devmm.mrs.create_resource("sim.async", 0, pool="0xzz")
    with pytest.raises(devmm.DevmmError, match="release_threshold needs pool = own"):
        devmm.mrs.create_resource("sim.async", 0, pool="0x1000", release_threshold="1MiB")


def test_managed_pool_allocates_managed_memory_in_stream_order(tmp_path):
    sim_ini(tmp_path, pageable=False)
    rt = simmrs.runtime()
    r = simmrs.SimAsyncManagedMemoryResource(0)
    assert r.name == "sim.async(managed pool)"
    t = devmm.zeros(4096, "uint8", resource=r)
    assert t.device == "sim_managed:0"
    assert ctypes.string_at(t.data_ptr, 4096) == b"\0" * 4096   # the host reads it
    s = rt.stream(0)
    rt.fill(s, t.data_ptr, 3, 4096)                              # and the device writes it
    s.synchronize()
    assert ctypes.string_at(t.data_ptr, 16) == b"\3" * 16
    s.destroy()
    before = rt.stats()["allocations_live"]
    del t                                # freed in stream order: the pool's free runs
    rt.synchronize(0)
    assert rt.stats()["allocations_live"] == before - 1
    assert rt.stats()["frees_pending"] == 0


def test_managed_pool_takes_no_own_pool_settings(tmp_path):
    sim_ini(tmp_path, pageable=False)
    with pytest.raises(devmm.DevmmError, match="release_threshold needs pool = own"):
        devmm.mrs.create_resource("sim.async", 0, pool="managed", release_threshold="1MiB")


def test_prefetch_adaptor_prefetches_every_allocation_through_the_stack(tmp_path):
    sim_ini(tmp_path, pageable=False)
    rt = simmrs.runtime()
    managed = simmrs.ManagedMemoryResource(0)
    r = devmm.PrefetchAdaptor(devmm.StatisticsAdaptor(managed))   # an adaptor between them
    assert r.name == "prefetch(statistics(sim.managed))"
    kept = devmm.empty(4096, "uint8", resource=r)
    rt.inject("MemPrefetchAsync", 0, 2)    # the prefetch is made, on each allocation
    with pytest.raises(devmm.DevmmError, match=r"sim.managed on sim:0: simMemPrefetchAsync"):
        devmm.empty(4096, "uint8", resource=r)
    rt.inject(None)
    assert r.upstream.statistics.current_count == 1   # the failed one was given back
    del kept
    pool = devmm.PrefetchAdaptor(simmrs.SimAsyncManagedMemoryResource(0))
    t = devmm.empty(4096, "uint8", resource=pool)
    pool.prefetch(t.data_ptr, 4096)        # again, after the host touched it


def test_prefetch_adaptor_refused_over_memory_that_does_not_move(tmp_path):
    sim_ini(tmp_path, pageable=False)
    with pytest.raises(devmm.DevmmError,
                       match=r"prefetch adaptor over sim.async: its memory does not move"):
        devmm.PrefetchAdaptor(simmrs.SimAsyncMemoryResource(0))


def test_prefetch_adaptor_from_devmm_ini(tmp_path):
    ini = tmp_path / "devmm.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\njitter_us = 0\n"
                   "[device sim:0]\nresource = sim.managed\nadaptors = statistics, prefetch\n")
    devmm.init(str(ini))
    r = devmm.get_current_device_resource("sim:0")
    assert type(r) is devmm.PrefetchAdaptor and r.name == "prefetch(statistics(sim.managed))"


def test_pageable_access_takes_a_boolean(tmp_path):
    ini = tmp_path / "devmm.ini"
    ini.write_text("[devmm]\nplugins = cpu, sim\n[plugin sim]\npageable_access = maybe\n")
    with pytest.raises(devmm.DevmmError, match="pageable_access = maybe: expected true or false"):
        devmm.init(str(ini))
