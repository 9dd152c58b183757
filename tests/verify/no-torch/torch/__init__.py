# Stands in for a Python without torch in tests/verify.rs: on PYTHONPATH it shadows any
# installed torch, whatever the machine has.
raise ImportError("No module named 'torch' (tests/verify/no-torch)")
