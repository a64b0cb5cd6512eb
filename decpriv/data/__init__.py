"""Datasets (generated, shipped with scikit-learn, or local files) and their partition over nodes."""
