"""Measuring what a model does: corpus BLEU and chrF with length buckets, tables, attention
as alignment (AER against gold links or eflomal), scores on the synthetic tasks, and plots.
Never trains.

    align.py        AER; attention's (or an attribution's) word links, through the engine;
                    eflomal's of a test set
    attribution.py  one translation's attribution through its engine; Kendall's tau between two
    coverage.py     over- and under-translation rates
    evaluation.py   a test set translated and scored
    explanation.py  attention beside each attribution over a test set: links, Kendall's tau, the
                    what-if
    plot.py         heatmaps, curves and BLEU plots as matplotlib figures
    scores.py       sacreBLEU's BLEU and chrF, by source length
    tables.py       Markdown tables of scores
    task_scores.py  accuracy and alignment on the synthetic tasks
"""
