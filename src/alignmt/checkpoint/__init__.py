"""Run folders: the checkpoint format and snapshots, atomic writes, the shortlist and
averaging, none of which needs torch, and the PyTorch and Flax loaders and savers on top.

    average.py       checkpoint averaging
    flax_io.py       the name map to Flax parameters; loading and saving without torch
    format.py        file names, the checkpoint header, snapshots
    rundir.py        refusing to start over a run; atomic, durable writes
    shortlist_io.py  `shortlist.safetensors`
    torch_io.py      saving and loading PyTorch models and training state
"""
