"""`nanlens eval`: score NaN Lens on a corpus of small NaN bug programs (the zoo).

Each program marks the line a user must fix with one ``# ORIGIN`` comment. The evaluation runs every program
(under NanGuard when it trains with it, else with a tfdbg2 dump), locates the origin with the product's own
engines, and compares the line found with the line marked. TensorFlow's ``enable_check_numerics`` serves as a
second opinion on the op type.

Modules: ``corpus`` (finding programs and their markers), ``runner`` (running one program, bounded by timeouts),
``checknumerics`` (the second opinion), ``scoring`` (rows and the summary), ``worker`` (the subprocess that calls
``locate_bundle`` / ``scan_dump``). Nothing here imports TensorFlow at import time.
"""
