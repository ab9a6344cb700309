"""What a family provides to model selection: a :class:`Scorer` of one candidate size.

``inference.model_selection`` (and ``ppl-zoo select``) score a family's candidate
sizes -- mixture k, MCVQ (K, J), GVQ features, clipped-Gaussian P, PPCA q -- under
several criteria. The criteria's rules (one-SE choice, ties, tables) live in the
application layer; what a criterion needs from a family is one method of its
scorer, each returning values on the log scale, per example, higher is better:

========== ============================================================================
criterion  scorer method
========== ============================================================================
vb         :meth:`Scorer.vb`: the VB lower bound per example and the size that survives
cv         :meth:`Scorer.heldout`: log p(x_test | fit on the training rows), per row
train      :meth:`Scorer.train`: mean log-likelihood of the full-data fit
bic, aic   :meth:`Scorer.train` and :meth:`Scorer.num_parameters`
loo, waic  :meth:`Scorer.loo`: NUTS draws with their pointwise log-likelihood
evidence   :meth:`Scorer.evidence_program`: the Bayesian program whose log marginal
           likelihood adaptive tempered SMC estimates (``inference.program.evidence``)
laplace    :meth:`Scorer.laplace`: a closed-form approximation of the log evidence
pca_mle    :meth:`Scorer.pca_mle`: scikit-learn's ``PCA(n_components="mle")`` choice
J, L_map,  :meth:`Scorer.yingyang`: the YING-YANG criteria (mixture), each on its own
L_stocha,  scale, *lower* is better, with the fits, choice and degenerate candidates of
yy_bic,    the family's own routine
yy_aic,
yy_loo
========== ============================================================================

A family registers its scorer in its plug-in (``ppl_models.registry.Selection``);
methods it does not support keep the defaults below, which raise or give the reason
why the criterion is skipped.
"""

from __future__ import annotations

__all__ = ["Scorer", "check_candidate_list"]


def check_candidate_list(candidates, what: str, check_one) -> tuple:
    """A family's candidates as a tuple, each one through ``check_one`` (which raises,
    naming ``candidates``, for a bad one and returns it checked), none repeated.

    Raises
    ------
    TypeError
        For a string or anything not iterable (``what``: what the sequence must hold).
    ValueError
        For an empty sequence or a candidate given twice.
    """
    if isinstance(candidates, str | bytes) or not hasattr(candidates, "__iter__"):
        raise TypeError(f"candidates must be a sequence of {what}; got {candidates!r}")
    given = tuple(candidates)
    if not given:
        raise ValueError("candidates must hold at least one candidate model; got an empty "
                         "sequence")
    checked = tuple(check_one(c) for c in given)
    if len(set(checked)) != len(checked):
        raise ValueError(f"candidates must not repeat; got {given}")
    return checked


class Scorer:
    """One family's fits and scores of candidate sizes (subclass per family).

    Parameters
    ----------
    x : array (N, D)
        The data, already checked by the subclass.
    num_restarts : int
        Starts of every fit (the best by the family's objective is kept).
    fit_options, vb_options : dict
        Keyword arguments of the family's fit and of its VB fit.

    Attributes
    ----------
    x, num, dim, num_restarts, fit_options, vb_options
    """

    def __init__(self, x, *, num_restarts: int = 3, fit_options=None, vb_options=None):
        self.x = x
        self.num, self.dim = x.shape
        self.num_restarts = num_restarts
        self.fit_options = dict(fit_options or {})
        self.vb_options = dict(vb_options or {})

    def check_criteria(self, criteria) -> None:
        """Raise ``ValueError`` naming ``criteria`` where the data or options rule one out."""

    def set_candidates(self, candidates) -> None:
        """Called once with every candidate before ``cv``, ``train`` or ``bic`` runs."""

    def train(self, candidate, rng_key) -> float:
        """Mean log-likelihood per example of the full-data fit (latent variables summed
        out; cache the fit: ``bic``, ``aic`` and ``loo`` may reuse it)."""
        raise NotImplementedError

    def heldout(self, candidate, train, test, rng_key):
        """(len(test),) log predictive density of the rows ``test`` under a fit on the
        rows ``train`` (index arrays)."""
        raise NotImplementedError

    def num_parameters(self, candidate) -> int:
        """Free parameters of the fitted model (BIC's and AIC's p)."""
        raise NotImplementedError

    def order(self, candidates):
        """Sort keys of the candidates for ties and the one-SE rule ("smallest" first);
        None: the candidates' own order (K, then J; k; ...)."""
        return None

    def degenerate(self, candidate, criterion: str) -> str | None:
        """Why the fit behind ``criterion``'s value of ``candidate`` is degenerate (then it
        is excluded from that criterion's choice), or None.

        The default reads what the family's scorer keeps: for ``"cv"``, a candidate
        listed in its ``collapsed`` (every restart of a fold's fit collapsed a
        component; cv runs before the full-data fits); otherwise its cached full-data
        fit (``cache[candidate]``): None (every restart collapsed), or one whose
        ``collapsed`` flag is set or whose full ``covariances`` are not positive definite
        (:func:`inference.app.selection_checks.covariance_reason`'s test, applied here).
        """
        import numpy as np

        collapsed = candidate in tuple(getattr(self, "collapsed", ()) or ())
        if criterion == "cv":  # cv runs first: the collapses so far are the folds' fits
            return ("collapsed: every restart of a fold's fit collapsed a component"
                    if collapsed else None)
        cache = getattr(self, "cache", None) or {}
        if candidate not in cache:
            return "collapsed: every restart collapsed a component" if collapsed else None
        fit = cache[candidate]
        if fit is None:
            return "collapsed: every restart collapsed a component"
        if getattr(fit, "collapsed", ()):
            return f"collapsed: component(s) {list(fit.collapsed)}"
        covariances = getattr(fit, "covariances", None)
        if covariances is not None and np.ndim(covariances) >= 3:
            c = np.asarray(covariances, dtype=float)
            c = c.reshape(-1, c.shape[-1], c.shape[-1])
            if not np.all(np.isfinite(c)):
                return "covariance not finite"
            eig = np.linalg.eigvalsh(0.5 * (c + np.swapaxes(c, -1, -2)))
            if np.any(eig[:, 0] <= 1e-7 * np.maximum(eig[:, -1], 0.0)):
                return (f"covariance not positive definite (smallest eigenvalue "
                        f"{float(eig[:, 0].min()):.3g})")
        return None

    def vb(self, candidate, rng_key):
        """(bound per example, surviving size, fit) of the best VB run started at
        ``candidate``."""
        raise NotImplementedError

    def loo_reason(self, candidate, limit: int) -> str | None:
        """Why NUTS is not run for ``candidate`` (too large for ``limit``), or None."""
        return None

    def loo(self, candidate, rng_key, num_warmup: int, num_samples: int, progress_bar: bool):
        """(``InferenceData`` with a ``log_likelihood`` group, extra note) of NUTS on the
        candidate's program: PSIS-LOO and WAIC read it."""
        raise NotImplementedError

    def evidence_reason(self, candidate, limit: int) -> str | None:
        """Why the reference evidence is not computed for ``candidate``, or None."""
        return None

    def evidence_program(self, candidate):
        """(model, args, kwargs): the Bayesian program with the data whose log marginal
        likelihood is the candidate's reference evidence."""
        raise NotImplementedError

    def evidence(self, candidate, rng_key, options):
        """:class:`inference.program.evidence.EvidenceResult` of the candidate's program
        (total nats; ``options`` go to ``log_evidence``)."""
        from inference.program.evidence import log_evidence

        model, args, kwargs = self.evidence_program(candidate)
        return log_evidence(model, *args, rng_key=rng_key, **options, **kwargs)

    def laplace(self, candidate) -> float:
        """A closed-form approximation of the log evidence, per example."""
        raise NotImplementedError

    def pca_mle(self, candidates):
        """(values per example or NaN per candidate, the chosen candidate) of
        scikit-learn's ``PCA(n_components="mle")``."""
        raise NotImplementedError

    def yingyang(self, candidates, criteria, rng_key, nuts, step) -> dict:
        """criterion -> :class:`inference.mixture.selection.SelectionResult` of the
        YING-YANG criteria ``criteria`` (lower is better; ``degenerate`` lists the
        candidates excluded from the choice), fitted from ``rng_key`` itself; ``nuts`` is
        (num_warmup, num_samples, progress_bar), ``step`` a progress callback."""
        raise NotImplementedError

    def notes(self, scored: bool) -> list[str]:
        """How the values were obtained (for the result's ``notes``)."""
        return []
