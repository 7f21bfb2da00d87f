"""Resources by backend: :mod:`devmm.mrs.cpu`, :mod:`devmm.mrs.cuda`, :mod:`devmm.mrs.rocm`,
:mod:`devmm.mrs.cupy`; :func:`create_resource` makes any plugin's kind by name."""

from ._kind import create_resource

__all__ = ["create_resource"]
