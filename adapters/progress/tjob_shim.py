"""tjob's helper for a job's code, put on its PYTHONPATH by the engine that runs it:
`import tjob; tjob.report(progress=..., eta=..., loss=...)` (tjob/report.py, beside this file).

When the job's own Python has the tjob package installed, `import tjob` gives that package
instead (it has report too): this directory only fills in for a Python without it.
"""
import importlib.machinery as _machinery
import importlib.util as _util
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
_spec = _machinery.PathFinder.find_spec(
    __name__, [p for p in _sys.path if _os.path.abspath(p or _os.curdir) != _here])
if _spec is not None and _spec.origin and _os.path.abspath(_spec.origin) != _os.path.abspath(__file__):
    _real = _util.module_from_spec(_spec)
    _sys.modules[__name__] = _real
    _spec.loader.exec_module(_real)
else:
    from .report import checkpoint_dir, flush, report, restart_count, stop_requested, trial_parameters  # noqa: F401

    __all__ = ["report", "flush", "checkpoint_dir", "restart_count", "stop_requested", "trial_parameters"]
