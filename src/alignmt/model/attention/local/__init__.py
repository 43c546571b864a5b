"""Local attention's windows, local-m and local-p (Luong et al. 2015, §3.2): an entry of the
attention room.

    flax.py       the local window in Flax
    reference.py  Luong's local windows (local-m, local-p) in float64, and their declaration
    torch.py      the local window, p_i and local-p's Gaussian
"""
