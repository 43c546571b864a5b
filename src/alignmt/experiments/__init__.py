"""Experiments that train models and then analyse them: the reversal demo."""
