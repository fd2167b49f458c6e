"""mtad: multi-token joint decoding research suite."""
