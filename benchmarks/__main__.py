"""Run every benchmark module (``python -m benchmarks [name ...]``), e.g. ``python -m benchmarks dsgd``."""

import importlib
import pkgutil
import sys
import time

import benchmarks


def main(selected: list[str]) -> None:
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    for name in names:
        if selected and name.removeprefix("bench_") not in selected:
            continue
        print(f"\n=== {name} ===", flush=True)
        begin = time.perf_counter()
        importlib.import_module(f"benchmarks.{name}").main()
        print(f"({name}: {time.perf_counter() - begin:.1f} s)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
