"""alignmt in a notebook: `train` and `load` give a `Run`, one handle on a run folder to
translate with, score and draw in a few lines, whose results render as tables and figures.

    run = alignmt.train("reverse", steps=2000, out_dir="runs/r")
    run.translate(["attention"], beam=5)
    run.heatmap("attention")

Everything here calls what the command line calls (training, the Translator, the scorers,
the plots); nothing is computed a second way.

    explorer.py  the explorer as an anywidget
    run.py       `Run`, `train`, `load`
    views.py     translations and scores as HTML
"""
