"""Experiments that train models and then analyse them: the reversal demo, and the d2l.ai
book's four-sentence check.

    d2l.py   the d2l.ai chapter's four sentences
    demo.py  the reversal experiment
"""
