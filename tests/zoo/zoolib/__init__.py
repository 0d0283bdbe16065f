"""Helper modules imported by zoo programs (not programs themselves)."""
