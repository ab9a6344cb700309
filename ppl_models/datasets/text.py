"""Bag-of-words counts of a bundled corpus, normalised to equal length.

The MCVQ text experiment (Ross and Zemel (2003), sec. 5.3) used the NIPS
proceedings: common words removed, words appearing in fewer than five documents
removed, and each document's vector of word counts "normalized so that each
contained the same number of words". The NIPS corpus is not available offline; this module applies
the same preprocessing to any list of documents (:func:`bag_of_words`) and to the
Lee background corpus that gensim ships in its test data (:func:`load_lee_corpus`):
300 short Australian news articles (Lee, Pincombe and Welsh 2005), one per line
of ``gensim/test/test_data/lee_background.cor``. The file is located with
``importlib.util.find_spec("gensim")`` without importing gensim (which is slow
to import and not needed to read a text file).

Preprocessing, step by step:

1. lower-case, and split into tokens of letters ``a-z`` (digits and punctuation
   separate tokens and are dropped; "people's" gives "people" and "s");
2. drop tokens of one letter, and stop words (default: scikit-learn's
   ``ENGLISH_STOP_WORDS``, 318 words; any collection of words may be given);
3. drop words that appear in fewer than ``min_documents`` documents (sec. 5.3: 5);
4. count, and scale each document's counts to ``num_words`` words in total
   (default: the mean number of kept words per document, so the scale of the
   counts stays that of the corpus). The scaled counts are not integers.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 5.3.
Lee, Pincombe and Welsh, "An empirical evaluation of models of text document
similarity", CogSci 2005 (the Lee corpus).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["BagOfWords", "bag_of_words", "load_lee_corpus", "lee_corpus_path", "tokenize"]

_TOKEN = re.compile(r"[a-z]+")


class BagOfWords(NamedTuple):
    """Word counts of a corpus.

    Attributes
    ----------
    x : float64 array (num_documents, num_words_in_vocabulary)
        Counts scaled so that every row sums to ``num_words``.
    counts : int64 array (num_documents, num_words_in_vocabulary)
        The raw counts of the kept words.
    vocabulary : str array (num_words_in_vocabulary,)
        The kept words, in alphabetical order (the columns).
    documents : tuple of str
        The documents' texts, as given.
    num_words : float
        The common length every row of ``x`` sums to.
    """

    x: np.ndarray
    counts: np.ndarray
    vocabulary: np.ndarray
    documents: tuple
    num_words: float


def tokenize(text: str, stop_words=frozenset()) -> list[str]:
    """Lower-cased tokens of letters, without one-letter tokens and ``stop_words``.

    >>> tokenize("The fire-fighters' 2 trucks arrived.", {"the"})
    ['fire', 'fighters', 'trucks', 'arrived']
    """
    return [w for w in _TOKEN.findall(text.lower()) if len(w) > 1 and w not in stop_words]


def _stop_words(stop_words):
    if stop_words is None:
        return frozenset()
    if isinstance(stop_words, str):
        if stop_words != "english":
            raise ValueError(f"stop_words must be 'english', None or a collection of words; "
                             f"got {stop_words!r}")
        try:
            from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
        except ImportError as err:
            raise ImportError("stop_words='english' uses scikit-learn's ENGLISH_STOP_WORDS: "
                              "pip install scikit-learn, or pass your own list") from err
        return frozenset(ENGLISH_STOP_WORDS)
    if not isinstance(stop_words, Iterable) or not all(isinstance(w, str) for w in stop_words):
        raise TypeError(f"stop_words must be 'english', None or a collection of str; got "
                        f"{type(stop_words).__name__}")
    return frozenset(w.lower() for w in stop_words)


def bag_of_words(documents: Sequence[str], *, min_documents: int = 5, stop_words="english",
                 num_words: float | None = None) -> BagOfWords:
    """Counts of the documents' words after the preprocessing of the module docstring.

    Parameters
    ----------
    documents : sequence of str
        The texts.
    min_documents : int
        Keep only words that appear in at least this many documents (sec. 5.3: 5).
    stop_words : "english", None or collection of str
        Words to drop; "english" is scikit-learn's list.
    num_words : float, optional
        The common document length after normalisation (sec. 5.3); default the
        mean number of kept words per document.

    Returns
    -------
    BagOfWords

    Raises
    ------
    ValueError
        No documents, ``min_documents`` < 1, ``num_words`` not positive, an
        empty vocabulary, or a document with no kept word (it cannot be scaled
        to a positive length: drop it, or lower ``min_documents``).
    """
    if isinstance(documents, str) or not isinstance(documents, Sequence):
        raise TypeError(f"documents must be a sequence of str; got {type(documents).__name__}")
    if not all(isinstance(d, str) for d in documents):
        raise TypeError("documents must be a sequence of str; some entries are not str")
    if len(documents) == 0:
        raise ValueError("documents must hold at least one document; got none")
    if isinstance(min_documents, bool) or not isinstance(min_documents, int | np.integer) or (
            min_documents < 1):
        raise ValueError(f"min_documents must be an int >= 1; got {min_documents!r}")
    if num_words is not None and not (np.isfinite(num_words) and num_words > 0):
        raise ValueError(f"num_words must be a positive number; got {num_words!r}")
    stop = _stop_words(stop_words)
    tokens = [tokenize(d, stop) for d in documents]
    words, word_of_token = np.unique(np.concatenate([np.asarray(t, dtype=str) for t in tokens]
                                                   + [np.array([], dtype=str)]),
                                    return_inverse=True)
    if words.size == 0:
        raise ValueError("the documents hold no word after tokenising and removing stop words")
    doc_index = np.repeat(np.arange(len(tokens)), [len(t) for t in tokens])
    counts = np.zeros((len(tokens), words.size), np.int64)
    np.add.at(counts, (doc_index, word_of_token), 1)
    kept = np.sum(counts > 0, axis=0) >= min_documents
    if not np.any(kept):
        raise ValueError(f"no word appears in {min_documents} or more documents; lower "
                         "min_documents")
    counts, vocabulary = counts[:, kept], words[kept]
    lengths = counts.sum(axis=1)
    empty = np.flatnonzero(lengths == 0)
    if empty.size:
        raise ValueError(f"document(s) {empty[:10].tolist()} keep no word of the vocabulary, so "
                         "they cannot be normalised to equal length; drop them or lower "
                         "min_documents")
    total = float(np.mean(lengths)) if num_words is None else float(num_words)
    x = counts * (total / lengths[:, None])
    return BagOfWords(x=x, counts=counts, vocabulary=vocabulary, documents=tuple(documents),
                      num_words=total)


def lee_corpus_path() -> str:
    """Path of gensim's ``lee_background.cor``, found without importing gensim.

    Raises
    ------
    ImportError
        gensim is not installed.
    FileNotFoundError
        gensim is installed without its test data.
    """
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the Lee corpus ships with gensim's test data: pip install gensim "
                          "(or pip install -e '.[examples]')")
    for root in spec.submodule_search_locations:
        path = os.path.join(root, "test", "test_data", "lee_background.cor")
        if os.path.isfile(path):
            return path
    raise FileNotFoundError("gensim is installed but test/test_data/lee_background.cor is "
                            f"missing under {list(spec.submodule_search_locations)}")


def load_lee_corpus(*, min_documents: int = 5, stop_words="english",
                    num_words: float | None = None) -> BagOfWords:
    """Bag-of-words of gensim's Lee background corpus (300 documents; module docstring).

    Arguments as in :func:`bag_of_words`.
    """
    with open(lee_corpus_path(), encoding="utf-8") as handle:
        documents = [line.strip() for line in handle if line.strip()]
    return bag_of_words(documents, min_documents=min_documents, stop_words=stop_words,
                        num_words=num_words)
