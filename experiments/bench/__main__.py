"""python -m experiments.bench [--quick] [--no-compile] [--peers DIR]: the benchmark (study.py)."""

from experiments.bench.study import main

if __name__ == "__main__":
    raise SystemExit(main())
