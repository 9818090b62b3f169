"""The compiled kernels (C extension modules); everything else is in pyproject.toml.

Each kernel is optional: when a compiler is missing or a kernel fails to build, the install goes
on without it and the engine runs the pure-Python path (docs/engine.md, "Compiled kernels").
No -ffast-math: the records must equal the Python reference's bit for bit, so every float
operation keeps IEEE semantics, and -ffp-contract=off keeps a * b + c from becoming one fused
multiply-add where the hardware has it.
"""

from setuptools import Extension, setup

ENGINE = "src/marketsched/engine"
FLAGS = ["-ffp-contract=off"]
HEADERS = [f"{ENGINE}/kernel_engine.h", f"{ENGINE}/kernel_sorted.h", f"{ENGINE}/kernel_rankset.h",
           f"{ENGINE}/kernel_sumtree.h", f"{ENGINE}/kernel_alloc.h"]

setup(
    ext_modules=[
        # one entry per kernel
        Extension("marketsched.engine._priority", [f"{ENGINE}/_priority.c"], depends=HEADERS,
                  extra_compile_args=FLAGS, optional=True),
        Extension("marketsched.engine._backfilling", [f"{ENGINE}/_backfilling.c"], depends=HEADERS,
                  extra_compile_args=FLAGS, optional=True),
        Extension("marketsched.mechanisms.online._dlgm_kernel", ["src/marketsched/mechanisms/online/_dlgm_kernel.c"],
                  depends=HEADERS, extra_compile_args=FLAGS, optional=True),
        Extension("marketsched.mechanisms.clearing._greedex_kernel",
                  ["src/marketsched/mechanisms/clearing/_greedex_kernel.c"], extra_compile_args=FLAGS, optional=True),
        Extension("marketsched.mechanisms.online._share_kernel", ["src/marketsched/mechanisms/online/_share_kernel.c"],
                  extra_compile_args=FLAGS, optional=True),
        Extension("marketsched.mechanisms.online._profile_kernel", ["src/marketsched/mechanisms/online/_profile_kernel.c"],
                  extra_compile_args=FLAGS, optional=True),
        Extension("marketsched.mechanisms.online.egg._auctioneer_kernel",
                  ["src/marketsched/mechanisms/online/egg/_auctioneer_kernel.c"], extra_compile_args=FLAGS, optional=True),
    ]
)
