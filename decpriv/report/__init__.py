"""Run folders, tables, plots and comparisons."""
