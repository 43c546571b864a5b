"""Experiments that train models and then analyse them: the reversal demo, and the d2l.ai
book's four-sentence check."""
