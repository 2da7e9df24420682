"""call_after_import: run a function once a module has been imported, without importing it."""
import importlib.abc
import sys
from typing import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """A finder ahead of the others that finds `module_name` through them and makes the spec's loader
    call `callback` once it has run the module; then it leaves sys.meta_path."""

    def __init__(self, module_name: str, callback: Callable[[], None]):
        self.module_name = module_name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.module_name:
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *_: None)(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            execute = spec.loader.exec_module

            def execute_then_call(module):
                execute(module)
                if self in sys.meta_path:  # (only the first import: a reload runs the loader again)
                    sys.meta_path.remove(self)
                    self.callback()

            spec.loader.exec_module = execute_then_call
        return spec


def call_after_import(module_name: str, callback: Callable[[], None]) -> None:
    """callback() now if `module_name` has been imported, else right after its first import."""
    if module_name in sys.modules:
        callback()
    else:
        sys.meta_path.insert(0, _AfterImport(module_name, callback))
