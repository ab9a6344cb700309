"""The papers the zoo's models and algorithms come from, with full citations.

One place for the references that docstrings, printed reports, figures and the
documentation cite: :data:`REFERENCES` maps a short key to a :class:`Reference`
(authors, title, venue, year), :func:`cite` gives the one-line citation used in
text, and :func:`bibtex` the BibTeX entries.

Examples
--------
>>> from ppl_models.references import cite, REFERENCES
>>> print(cite("gvq"))  # doctest: +NORMALIZE_WHITESPACE
M. Westerdijk, D. Barber and W. Wiegerinck, "Deterministic generative models for fast
feature discovery", Data Mining and Knowledge Discovery 5(4), 2001.
>>> REFERENCES["mcvq"].short
'Ross and Zemel (2003)'
>>> print(cite("clipped", "sec. 3"))  # doctest: +NORMALIZE_WHITESPACE
D. D. Lee and H. Sompolinsky, "Learning a continuous hidden variable model for binary
data", Advances in Neural Information Processing Systems 11 (NIPS 1998), 1999, sec. 3.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Reference", "REFERENCES", "cite", "bibtex"]


@dataclass(frozen=True)
class Reference:
    """One paper.

    Attributes
    ----------
    key : str
        The short key (``"gvq"``, ``"clipped"``, ...).
    authors : tuple of str
        Authors as printed ("M. Westerdijk").
    title : str
    venue : str
        Journal or proceedings, with volume where known.
    year : int
    kind : str
        BibTeX entry type (``"article"``, ``"inproceedings"``, ``"book"``, ``"misc"``).
    """

    key: str
    authors: tuple
    title: str
    venue: str
    year: int
    kind: str = "inproceedings"

    @property
    def author_text(self) -> str:
        """The authors joined for text: "A, B and C"."""
        if len(self.authors) == 1:
            return self.authors[0]
        return ", ".join(self.authors[:-1]) + " and " + self.authors[-1]

    @property
    def short(self) -> str:
        """Surnames and year: "Ross and Zemel (2003)"."""
        surnames = [name.split()[-1] for name in self.authors]
        if len(surnames) > 2:
            text = ", ".join(surnames[:-1]) + " and " + surnames[-1]
        else:
            text = " and ".join(surnames)
        return f"{text} ({self.year})"

    def citation(self, where: str | None = None) -> str:
        """The full one-line citation, with an optional place in the paper."""
        text = f'{self.author_text}, "{self.title}", {self.venue}, {self.year}'
        return f"{text}, {where}." if where else f"{text}."


REFERENCES = {ref.key: ref for ref in (
    Reference("gvq", ("M. Westerdijk", "D. Barber", "W. Wiegerinck"),
              "Deterministic generative models for fast feature discovery",
              "Data Mining and Knowledge Discovery 5(4)", 2001, kind="article"),
    Reference("clipped", ("D. D. Lee", "H. Sompolinsky"),
              "Learning a continuous hidden variable model for binary data",
              "Advances in Neural Information Processing Systems 11 (NIPS 1998)", 1999),
    Reference("yingyang", ("L. Xu",),
              "YING-YANG machine: a Bayesian-Kullback scheme for unified learnings and new "
              "results on vector quantization",
              "Proceedings of the International Conference on Neural Information Processing "
              "(ICONIP'95), Beijing, pp. 977-988", 1995),
    Reference("mcvq", ("D. A. Ross", "R. S. Zemel"), "Multiple cause vector quantization",
              "Advances in Neural Information Processing Systems 15 (NIPS 2002)", 2003),
    Reference("mcvq_slides", ("D. A. Ross", "R. S. Zemel"),
              "Multiple cause vector quantization (presentation slides)",
              "University of Toronto", 2002, kind="misc"),
    Reference("ppca", ("M. E. Tipping", "C. M. Bishop"),
              "Probabilistic principal component analysis",
              "Journal of the Royal Statistical Society, Series B 61(3)", 1999,
              kind="article"),
    Reference("ppca_em", ("S. Roweis",), "EM algorithms for PCA and SPCA",
              "Advances in Neural Information Processing Systems 10 (NIPS 1997)", 1998),
    Reference("vb_mixture", ("A. Corduneanu", "C. M. Bishop"),
              "Variational Bayesian model selection for mixture distributions",
              "Proceedings of the Eighth International Conference on Artificial "
              "Intelligence and Statistics (AISTATS)", 2001),
    Reference("prml", ("C. M. Bishop",), "Pattern recognition and machine learning",
              "Springer", 2006, kind="book"),
    Reference("minka_pca", ("T. P. Minka",), "Automatic choice of dimensionality for PCA",
              "Advances in Neural Information Processing Systems 13 (NIPS 2000)", 2001),
    Reference("smc_samplers", ("P. Del Moral", "A. Doucet", "A. Jasra"),
              "Sequential Monte Carlo samplers",
              "Journal of the Royal Statistical Society, Series B 68(3)", 2006, kind="article"),
    Reference("psis_loo", ("A. Vehtari", "A. Gelman", "J. Gabry"),
              "Practical Bayesian model evaluation using leave-one-out cross-validation and "
              "WAIC", "Statistics and Computing 27(5)", 2017, kind="article"),
)}


def cite(key: str, where: str | None = None) -> str:
    """The citation of paper ``key`` (see :data:`REFERENCES`).

    ``where`` optionally names a place in it (``"sec. 5.1"``, ``"Fig. 4"``).
    """
    if key not in REFERENCES:
        raise KeyError(f"no reference {key!r}; known: {sorted(REFERENCES)}")
    return REFERENCES[key].citation(where)


def bibtex() -> str:
    """Every reference as a BibTeX entry."""
    entries = []
    for ref in REFERENCES.values():
        field = {"article": "journal", "inproceedings": "booktitle",
                 "book": "publisher"}.get(ref.kind, "howpublished")
        entries.append(
            f"@{ref.kind}{{{ref.key},\n"
            f"  author = {{{' and '.join(ref.authors)}}},\n"
            f"  title = {{{ref.title}}},\n"
            f"  {field} = {{{ref.venue}}},\n"
            f"  year = {{{ref.year}}}\n}}")
    return "\n\n".join(entries) + "\n"
