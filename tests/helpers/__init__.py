"""What the tests share: the test oracles (reference.py), runs made for tests (runs.py), loading a script as a module
(script_loader.py), a checkpoint as a graphed CUDA run saves it (gpu_saved.py)."""
