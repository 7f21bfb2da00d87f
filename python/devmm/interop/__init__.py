"""Serving other frameworks from devmm: :mod:`devmm.interop.torch`, :mod:`devmm.interop.cupy`,
:mod:`devmm.interop.rmm`. Each imports its framework and says clearly when it is missing."""


def _require(module: str, package: str, what: str):
    """Imports module or raises an ImportError that says which package to install."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{what} needs {module} ({package}), which cannot be imported: "
                          f"{e}") from e
