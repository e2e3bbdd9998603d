"""ioscope report: btt's analysis of a capture and more (model.py, view.py)."""
