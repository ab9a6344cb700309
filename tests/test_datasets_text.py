"""Bag-of-words counts normalised to equal length (ppl_models.datasets.text, seed 004 sec. 5.3)."""

import numpy as np
import pytest

from ppl_models.datasets import text

DOCUMENTS = [
    "The fire burned the bush; fire crews came.",
    "Fire crews and police came to the town.",
    "Police said the town is safe, police said.",
    "A quiet day in the town.",
]


def test_counts_vocabulary_and_normalisation():
    bow = text.bag_of_words(DOCUMENTS, min_documents=2, stop_words={"the", "and", "to", "is",
                                                                    "in"})
    # Words in >= 2 documents: came (0, 1), crews (0, 1), fire (0, 1), police (1, 2),
    # said (2 only: out), town (1, 2, 3).
    assert bow.vocabulary.tolist() == ["came", "crews", "fire", "police", "town"]
    np.testing.assert_array_equal(bow.counts, [[1, 1, 2, 0, 0], [1, 1, 1, 1, 1],
                                               [0, 0, 0, 2, 1], [0, 0, 0, 0, 1]])
    # Every row sums to the mean kept length (4 + 5 + 3 + 1) / 4 = 3.25, proportionally.
    assert bow.num_words == pytest.approx(3.25)
    np.testing.assert_allclose(bow.x.sum(axis=1), 3.25)
    np.testing.assert_allclose(bow.x, bow.counts * (3.25 / bow.counts.sum(axis=1))[:, None])
    bow = text.bag_of_words(DOCUMENTS, min_documents=2, stop_words={"the"}, num_words=10)
    np.testing.assert_allclose(bow.x.sum(axis=1), 10.0)
    assert bow.documents == tuple(DOCUMENTS)


def test_tokenizer_lowercases_and_drops_single_letters():
    assert text.tokenize("A B2 fire-Fighters' 100 trucks") == ["fire", "fighters", "trucks"]


def test_bad_input():
    with pytest.raises(ValueError, match="document\\(s\\) \\[3\\] keep no word"):
        text.bag_of_words(DOCUMENTS, min_documents=2, stop_words={"town", "the", "in"})
    with pytest.raises(ValueError, match="no word appears in 5 or more"):
        text.bag_of_words(DOCUMENTS, min_documents=5)
    with pytest.raises(ValueError, match="min_documents must be an int >= 1"):
        text.bag_of_words(DOCUMENTS, min_documents=0)
    with pytest.raises(ValueError, match="num_words must be a positive number"):
        text.bag_of_words(DOCUMENTS, num_words=-1.0)
    with pytest.raises(ValueError, match="at least one document"):
        text.bag_of_words([])
    with pytest.raises(TypeError, match="documents must be a sequence of str"):
        text.bag_of_words("one document")
    with pytest.raises(ValueError, match="stop_words must be 'english'"):
        text.bag_of_words(DOCUMENTS, stop_words="french")


@pytest.fixture(scope="module")
def lee():
    pytest.importorskip("sklearn")
    try:
        return text.load_lee_corpus()
    except ImportError:
        pytest.skip("gensim is not installed")


def test_lee_corpus(lee):
    # 300 documents; 1,283 words in >= 5 documents (measured with scikit-learn's stop words).
    assert lee.x.shape == lee.counts.shape == (300, 1283) and len(lee.documents) == 300
    assert lee.vocabulary.size == 1283 and list(lee.vocabulary) == sorted(lee.vocabulary)
    np.testing.assert_allclose(lee.x.sum(axis=1), lee.num_words, rtol=1e-12)
    assert lee.num_words == pytest.approx(lee.counts.sum() / 300)
    assert (np.count_nonzero(lee.counts, axis=0) >= 5).all()
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    assert not set(lee.vocabulary) & ENGLISH_STOP_WORDS
    assert {"the", "and", "of"}.isdisjoint(lee.vocabulary) and "firefighters" in lee.vocabulary


def test_lee_min_documents_filter():
    pytest.importorskip("sklearn")
    loose = text.load_lee_corpus(min_documents=1)
    strict = text.load_lee_corpus(min_documents=20)
    assert strict.x.shape[1] < 1283 < loose.x.shape[1]
    assert set(strict.vocabulary) <= set(loose.vocabulary)
    assert (np.count_nonzero(strict.counts, axis=0) >= 20).all()
    assert np.count_nonzero(loose.counts, axis=0).min() == 1
