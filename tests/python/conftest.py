"""Shared fixtures: a counting Python resource and a clean registry per test."""

import ctypes

import pytest

import devmm


class Counting:
    """Host memory from ctypes, counting allocate and free calls (real memory, not a double)."""

    def __init__(self):
        self.live = {}
        self.allocs = 0
        self.frees = 0

    def allocate(self, n, alignment, stream):
        buf = ctypes.create_string_buffer(n + max(alignment, 16))
        addr = ctypes.addressof(buf)
        a = max(alignment, 16)
        addr = (addr + a - 1) // a * a
        self.live[addr] = buf
        self.allocs += 1
        return addr

    def deallocate(self, ptr, n, alignment, stream):
        del self.live[ptr]  # a KeyError here would be a double free
        self.frees += 1


@pytest.fixture
def counting():
    c = Counting()
    r = devmm.CallbackMemoryResource(c.allocate, c.deallocate, name="counting")
    return c, r


@pytest.fixture(autouse=True)
def fresh_config(monkeypatch, tmp_path):
    """Each test starts from the built-in default configuration."""
    monkeypatch.delenv("DEVMM_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "no-xdg"))
    devmm.init()
    yield
