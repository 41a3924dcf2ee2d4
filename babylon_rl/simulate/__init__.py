"""`cli.py simulate`: a deterministic, realistic game history in the production schema."""
