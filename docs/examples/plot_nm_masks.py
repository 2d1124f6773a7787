"""
1-D N:M masks and ties
======================

A 2:4 mask keeps the 2 largest of every 4 consecutive scores along the reduction axis.
"""

import matplotlib.pyplot as plt
import numpy as np

import nmref

scores = np.round(np.random.default_rng(0).standard_normal((6, 8)), 1)
mask = nmref.nm_mask(scores, 2, 4)
fig, ax = plt.subplots()
ax.imshow(mask)
