"""Network interfaces from netlink (collector.py) and nicstat's arithmetic (model.py)."""
