"""Evaluation results: the resumable store, reports, held-out accuracy, evidence
plots and the GRPO-vs-C-GRPO shortcut report."""
