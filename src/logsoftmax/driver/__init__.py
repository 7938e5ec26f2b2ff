"""The benchdnn-compatible driver behind ``logsoftmax bench``.

Modules: :mod:`.problem` (descriptors, layouts, repro lines), :mod:`.parser`
(benchdnn command lines and batch files), :mod:`.fill` (benchdnn's fills),
:mod:`.compare` (benchdnn's f32 reference and pass rule, eps errors),
:mod:`.perf` (timing, the copy floor, peers), :mod:`.runner` (one problem),
:mod:`.report` (output), :mod:`.jobs` (the main job and JSON problem files).
Imported only by the ``bench`` command; nothing here runs at import.
"""

from .problem import Problem

__all__ = ["Problem"]
