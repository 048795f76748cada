"""The paper study: its six runs, every figure, results.md (study.py; the narrative: README.md)."""
