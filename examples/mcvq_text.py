"""MCVQ on bag-of-words text, vocabulary segments and words: Ross and Zemel (2003), sec. 5.3.
==========================================================================================

**Data.** The paper used the NIPS proceedings (1,740 papers, 14,265 words); here
gensim's bundled Lee background corpus, 300 short news articles
(``ppl_models.datasets.text.load_lee_corpus``), with the paper's preprocessing:
stop words removed (scikit-learn's English list), words in fewer than 5
documents removed (1,283 words remain), and every document's counts scaled to
the same number of words (the mean, 71.5). Each document is one example, each
word one dimension; the Gaussian MCVQ program models the scaled counts.

**Model.** K = 8 VQs of J = 8 states (the paper's sizes), fitted by the annealed
variational EM (``inference.fit_mcvq``; the paper converged after 15 iterations,
here 60 with the default schedule: T falls from N - 1 to 1 over the first 30).
The (N, D, K, J) likelihood terms are 300 x 1,283 x 64 floats = 99 MB.

**What is reported (sec. 5.3, Fig. 7).**

* The vocabulary segments: g_dk = Q(r_d = k) assigns each word to the VQ that
  explains it; each word goes to argmax_k g_dk. How binary g is: the mean of
  max_k g_dk, the fraction of words with max_k g_dk above 0.9 and 0.99, and the
  mean entropy of g_d in bits (0 for a hard assignment, log2 8 = 3 for uniform).
  Each segment is shown by its words that the VQ's states set most apart
  (largest max_j mu_dkj - min_j mu_dkj).
* For a few documents, the states selected for them (j* = argmax_j m_kj) by the
  4 VQs whose selection is the most certain; for each state the most
  conspicuous words of its segment above (marked ``+``, the paper's bold) and
  below (``-``, plain) the word's average predicted frequency, which is taken
  as the word's mean scaled count over the corpus; conspicuousness is
  mu_dkj* minus that average.
* A sanity check: root-mean-square error of the reconstruction
  x_hat = sum_k g_dk sum_j m_kj mu_dkj against predicting every document by the
  corpus mean.

**Measured** (seed 0, 2 CPU cores). Full run (about 65 s, 45 iterations to
convergence): g is nearly binary (mean max_k g = 0.992; 98% of the words above
0.9, 96% above 0.99; mean entropy 0.024 bits of 3) and splits the 1,283 words
into 8 segments of 110-231 words; the reconstruction's RMS is 0.325 against
0.337 for the corpus mean. The segments mix topics more than the paper's NIPS
segments seem to (e.g. one holds "palestinian, israeli, arafat" with "reserve,
banks, japan"), as expected from 300 short documents; states do pick out
topics ("hih, report, collapse, insurance" for a document on the HIH insurance
collapse). ``--quick`` (about 7 s): 169 words, g fully binary, RMS 0.602
against 0.637.

Run: ``python examples/mcvq_text.py [--quick] [--output-dir DIR] [--seed S]``.
Writes ``mcvq_text.json`` and ``mcvq_text.png`` into ``--output-dir`` (default
``zoo-results``). ``--quick``: words in at least 20 documents (169 words),
J = 4 states, 30 iterations.

References
----------
D. A. Ross and R. S. Zemel, "Multiple cause vector quantization", Advances in Neural
Information Processing Systems 15 (NIPS 2002), 2003, sec. 5.3 and Fig. 7.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import numpy as np

import inference
from inference.engine.figures import new_figure, save_figure
from inference.engine.reporting import jsonable
from ppl_models.datasets import text
from ppl_models.diagnostics import ConvergenceWarning

#: The paper's model sizes for text (sec. 5.3).
NUM_VQS, NUM_STATES = 8, 8


def g_binariness(g):
    """How close g (D, K) is to a hard assignment of words to VQs (module docstring)."""
    g = np.asarray(g, float)
    top = g.max(axis=1)
    entropy = -np.sum(np.where(g > 0, g * np.log2(np.where(g > 0, g, 1.0)), 0.0), axis=1)
    return {"mean_max_g": float(top.mean()), "fraction_above_0.9": float(np.mean(top > 0.9)),
            "fraction_above_0.99": float(np.mean(top > 0.99)),
            "mean_entropy_bits": float(entropy.mean()),
            "max_entropy_bits": float(np.log2(g.shape[1]))}


def segments(g, mu, vocabulary, top=10):
    """Per VQ: its words (argmax_k g_dk = k) ranked by the spread of its states' means."""
    g, mu = np.asarray(g), np.asarray(mu)
    owner = np.argmax(g, axis=1)
    rows = []
    for k in range(g.shape[1]):
        words = np.flatnonzero(owner == k)
        spread = mu[words, k].max(axis=1) - mu[words, k].min(axis=1)
        rows.append({"vq": k, "num_words": int(words.size),
                     "words": [str(vocabulary[d]) for d in words[np.argsort(-spread)][:top]]})
    return rows


def conspicuous_words(g, m_doc, mu, average, vocabulary, vqs, top_above=5, top_below=3):
    """Fig. 7 for one document: per VQ, its selected state's words above and below average."""
    g, mu = np.asarray(g), np.asarray(mu)
    owner = np.argmax(g, axis=1)
    rows = []
    for k in vqs:
        state = int(np.argmax(m_doc[k]))
        words = np.flatnonzero(owner == k)
        deviation = mu[words, k, state] - average[words]
        order = np.argsort(-deviation)
        above = [str(vocabulary[words[i]]) for i in order[:top_above] if deviation[i] > 0]
        below = [str(vocabulary[words[i]]) for i in order[::-1][:top_below] if deviation[i] < 0]
        rows.append({"vq": int(k), "state": state, "m": float(m_doc[k, state]),
                     "above": above, "below": below})
    return rows


def _fit(x, key, num_states, num_iterations):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded as result.converged
        return inference.fit_mcvq(x, NUM_VQS, num_states, rng_key=key,
                                  max_iterations=num_iterations)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="words in >= 20 documents, J = 4, 30 iterations")
    parser.add_argument("--min-documents", type=int, default=None,
                        help="drop words in fewer documents (default 5, the paper's; 20 quick)")
    parser.add_argument("--iterations", type=int, default=None)
    parser.add_argument("--num-documents-shown", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", default="zoo-results", help="folder for PNG and JSON")
    args = parser.parse_args(argv)
    min_documents = args.min_documents or (20 if args.quick else 5)
    num_states = 4 if args.quick else NUM_STATES
    num_iterations = args.iterations or (30 if args.quick else 60)

    start = time.perf_counter()
    corpus = text.load_lee_corpus(min_documents=min_documents)
    x = corpus.x.astype(np.float32)
    load_time = time.perf_counter() - start
    start = time.perf_counter()
    result = _fit(x, jax.random.key(args.seed), num_states, num_iterations)
    jax.block_until_ready(result.mu)
    fit_time = time.perf_counter() - start

    g, m, mu = np.asarray(result.g), np.asarray(result.m), np.asarray(result.mu)
    average = x.mean(axis=0)
    binary = g_binariness(g)
    segs = segments(g, mu, corpus.vocabulary)
    reconstruction = np.asarray(inference.reconstruct(result.g, result.m, result.mu))
    rms_mcvq = float(np.sqrt(np.mean((reconstruction - x) ** 2)))
    rms_mean = float(np.sqrt(np.mean((average - x) ** 2)))
    documents = []
    for c in range(min(args.num_documents_shown, x.shape[0])):
        vqs = np.argsort(-m[c].max(axis=1))[:4]
        documents.append({"document": c, "text": corpus.documents[c][:90],
                          "states": conspicuous_words(g, m[c], mu, average, corpus.vocabulary,
                                                      vqs)})

    print(f"MCVQ on the Lee background corpus (gensim): {x.shape[0]} documents, "
          f"{x.shape[1]} words in >= {min_documents} documents, counts scaled to "
          f"{corpus.num_words:.1f} words per document")
    print(f"K = {NUM_VQS}, J = {num_states}: {result.num_iterations} iterations, converged="
          f"{result.converged}, {fit_time:.1f} s; RMS of the reconstruction {rms_mcvq:.4f} "
          f"(corpus mean: {rms_mean:.4f})")
    print(f"g: mean max_k g = {binary['mean_max_g']:.3f}, max_k g > 0.9 for "
          f"{binary['fraction_above_0.9']:.0%} and > 0.99 for "
          f"{binary['fraction_above_0.99']:.0%} of the words, mean entropy "
          f"{binary['mean_entropy_bits']:.3f} bits (uniform: {binary['max_entropy_bits']:.0f})")
    print("")
    print("Vocabulary segments (words by argmax_k g; shown: the words its states set most apart)")
    for row in segs:
        print(f"  VQ {row['vq']} ({row['num_words']} words): {', '.join(row['words'])}")
    print("")
    print("Fig. 7: states selected for a document by its 4 most certain VQs "
          "(+ above, - below the word's average frequency)")
    for doc in documents:
        print(f"  document {doc['document']}: {doc['text']}...")
        for row in doc["states"]:
            words = [f"+{w}" for w in row["above"]] + [f"-{w}" for w in row["below"]]
            print(f"    VQ {row['vq']} state {row['state']} (m = {row['m']:.2f}): "
                  f"{' '.join(words)}")

    results = {"num_documents": int(x.shape[0]), "num_words": int(x.shape[1]),
               "document_length": corpus.num_words, "num_states": num_states,
               "num_iterations": result.num_iterations, "converged": result.converged,
               "fit_seconds": fit_time, "load_seconds": load_time, "g": binary,
               "segments": segs, "documents": documents,
               "rms": {"mcvq": rms_mcvq, "corpus_mean": rms_mean},
               "free_energy_trace": np.asarray(result.trace.objective).tolist(),
               "settings": {"quick": args.quick, "seed": args.seed,
                            "min_documents": min_documents}}
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mcvq_text.json").write_text(json.dumps(jsonable(results), indent=1))
    _plot(g, results, out)
    return results


def _plot(g, results, out):
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        print('matplotlib is not installed (pip install -e ".[examples]"): no figure')
        return
    fig, axes = new_figure(1, 2, figsize=(12, 4), width_ratios=[1.3, 1.0])
    order = np.lexsort((-g.max(axis=1), np.argmax(g, axis=1)))
    image = axes[0].imshow(g[order].T, aspect="auto", interpolation="nearest", cmap="viridis",
                           vmin=0.0, vmax=1.0)
    axes[0].set_xlabel("word d (sorted by segment)")
    axes[0].set_ylabel("VQ k")
    axes[0].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].set_title("g_dk: the segmentation of the vocabulary")
    fig.colorbar(image, ax=axes[0], label="g_dk = Q(r_d = k)")
    axes[1].plot(results["free_energy_trace"])
    axes[1].set_xlabel("EM iteration")
    axes[1].set_ylabel("free energy F_T (nats)")
    axes[1].set_title("training (T annealed to 1)")
    path = save_figure(fig, out / "mcvq_text.png")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
