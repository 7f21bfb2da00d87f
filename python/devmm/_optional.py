"""Optional frameworks, imported where they are used: each module that needs one (the
:mod:`devmm.interop` modules, :mod:`devmm.mrs.cupy`, :mod:`devmm.dask`) says clearly which
package to install when it is missing.

>>> require("json", "json", "this example").__name__
'json'
>>> require("no_such_framework", "no-such-framework", "devmm.example")
Traceback (most recent call last):
...
ImportError: devmm.example needs no_such_framework (no-such-framework), which cannot be imported: No module named 'no_such_framework'
"""

from __future__ import annotations

import importlib
import types


def require(module: str, package: str, what: str) -> types.ModuleType:
    """Imports module or raises an ImportError that says which package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs {module} ({package}), which cannot be imported: "
                          f"{e}") from e
