"""Serving other frameworks from devmm (devmm *out*): :mod:`devmm.interop.torch`,
:mod:`devmm.interop.cupy`, :mod:`devmm.interop.rmm`. Each imports its framework and says
clearly when it is missing. The other direction, other allocators *into* devmm, is
:mod:`devmm.mrs`; docs/frameworks.md lists both directions of each framework."""
