"""C extension modules (the compiled kernels); everything else is in pyproject.toml.

Each kernel is optional: when it does not compile (no C compiler, no Python headers), the
package installs without it and the pure-Python engine runs (docs/engine.md, "Compiled
kernels"). No -ffast-math: the kernels must round exactly as the Python reference does.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("marketsched.mechanisms.online._dlgm_kernel", ["src/marketsched/mechanisms/online/_dlgm_kernel.c"],
                  extra_compile_args=["-ffp-contract=off"], optional=True),
    ],
)
