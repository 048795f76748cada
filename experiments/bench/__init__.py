"""The benchmark: miiii's training against plain PyTorch references (study.py; the guide: docs/benchmark.md)."""
