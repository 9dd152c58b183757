# Stands in for a Python without transformers in tests/verify.rs: on PYTHONPATH it shadows any
# installed transformers, whatever the machine has.
raise ImportError("No module named 'transformers' (tests/verify/no-transformers)")
