"""Comparing methods on compute: run methods × seeds on one budget (`compare.py`), analyse the
curves with bootstrap intervals on count-based and measured bases (`analysis.py`), archive runs
so a comparison resumes anywhere (`archive.py`), and draw the table and plots (`report.py`,
`comparison_table.py`). Torch-free: an experiment is read and reported without loading a model."""
