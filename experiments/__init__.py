"""The studies (paper, book), the benchmark, the AdderBoard scorer, the README's table: python -m experiments.NAME"""
