"""The checks, one module each, each with its `run` (Context -> data), `plan` (what it runs, in one
line) and `section` (its data as Markdown): `exactness`, `decode_paths`, `energy`, `cost_curve`,
`embedded_pair`. Their records, in the order they run, are `check_records.CHECKS`."""
