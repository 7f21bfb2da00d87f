"""Resources by backend: :mod:`devmm.mrs.cpu` (and, with their plugins, cuda and rocm)."""
