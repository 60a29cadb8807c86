"""`testbed reproduce`: one figure of a paper, end to end and resumable (reproductions/<name>.yaml)."""
