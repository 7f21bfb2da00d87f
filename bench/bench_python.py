"""Python benchmark: every figure is a ratio to a baseline measured in the same run.

  python bench_python.py alloc      devmm.empty((256,), "float32") + free  vs  torch.empty(256)
                                    (Debian's python3, torch 1.13)
  python bench_python.py dlpack     np.from_dlpack(devmm tensor)  vs  np.from_dlpack(ndarray)
                                    (the PyPI venv, numpy >= 2.3)
  python bench_python.py startup    `python -c "import devmm; devmm.empty((1,), 'float32')"`
                                    vs `python -c "pass"`, as whole processes
Targets: alloc <= 1.0x, dlpack <= 2.0x, startup <= 1.5x.
"""

import os
import subprocess
import sys
import time
import timeit


def best(stmt, setup, globs, number, repeat=7):
    t = timeit.Timer(stmt, setup, globals=globs).repeat(repeat=repeat, number=number)
    return min(t) / number * 1e9  # ns per iteration


def report(name, ns, base_name, base_ns, target):
    ratio = ns / base_ns
    verdict = "MET" if ratio <= target else "MISSED"
    print(f"  {name:<46} {ns:9.0f} ns   {base_name:<32} {base_ns:9.0f} ns   "
          f"{ratio:5.2f}x (target <= {target}x) {verdict}")


def alloc():
    import torch

    import devmm
    g = {"devmm": devmm, "torch": torch}
    n = 200000
    torch_ns = best("x = torch.empty(256); del x", "", g, n)
    del_ns = best("t = devmm.empty((256,), 'float32'); del t", "", g, n)
    free_ns = best("t = devmm.empty((256,), 'float32'); t.buffer.free(); del t", "", g, n)
    res = devmm.get_current_device_resource()
    g["r"] = res
    res_ns = best("t = devmm.empty((256,), 'float32', resource=r); del t", "", g, n)
    print(f"allocation, python {sys.version.split()[0]}, torch {torch.__version__} (CPU)")
    report("devmm.empty((256,), 'float32') + del", del_ns, "torch.empty(256) + del", torch_ns,
           1.0)
    report("devmm.empty + buffer.free() + del", free_ns, "torch.empty(256) + del", torch_ns, 1.0)
    report("devmm.empty(resource=r) + del", res_ns, "torch.empty(256) + del", torch_ns, 1.0)


def dlpack():
    import numpy as np

    import devmm
    g = {"np": np, "t": devmm.empty((256,), "float32"), "a": np.empty(256, np.float32)}
    n = 100000
    base = best("np.from_dlpack(a)", "", g, n)
    mine = best("np.from_dlpack(t)", "", g, n)
    print(f"DLPack import, numpy {np.__version__}")
    report("np.from_dlpack(devmm tensor)", mine, "np.from_dlpack(ndarray)", base, 2.0)


def startup():
    # As installed: the package byte-compiled, and Python allowed to use the .pyc files.
    import compileall

    import devmm
    compileall.compile_dir(os.path.dirname(devmm.__file__), quiet=1)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)

    def run(code, reps=25):
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], env=env, check=True)
            times.append(time.perf_counter() - t0)
        return min(times) * 1e9

    run("pass", 3)  # warm the page cache
    base = run("pass")
    mine = run("import devmm; devmm.empty((1,), 'float32')")
    print(f"start-up, python {sys.version.split()[0]} (best of 25 processes)")
    report("import devmm; devmm.empty((1,), 'float32')", mine, "python -c pass", base, 1.5)


if __name__ == "__main__":
    {"alloc": alloc, "dlpack": dlpack, "startup": startup}[sys.argv[1]]()
