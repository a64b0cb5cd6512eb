"""Speed benchmarks (``make bench``): each ``bench_*.py`` module times decpriv against a baseline in the
same process and prints its figures."""
