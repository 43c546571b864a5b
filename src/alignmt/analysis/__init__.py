"""Measuring what a model does: corpus BLEU and chrF with length buckets, tables, attention
as alignment (AER against gold links or eflomal), scores on the synthetic tasks, and plots.
Never trains."""
