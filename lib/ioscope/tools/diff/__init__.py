"""ioscope diff: two captures side by side (collector: summary.py, model: model.py, view: view.py, cmd.py)."""
