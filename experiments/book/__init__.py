"""The book study: the book's adder and reversal replicated, over seeds, against its loop in PyTorch (README.md)."""
