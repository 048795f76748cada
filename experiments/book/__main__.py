"""python -m experiments.book [--smoke | --seeds N | --unstated ... | --gap]: the book study (study.py)."""

import sys

from experiments.book.study import main

if __name__ == "__main__":
    sys.exit(main())
