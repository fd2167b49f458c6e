"""Experiments that are more than one cell after another: the paper's claims, run with every
method interleaved within each prompt (``interleaved``), and the checks of C5 and C6 on
enumerable tiny models (``theory``); ``claims`` runs both and then writes the claims report.
Their outputs are files that ``mtad.report`` only reads."""
