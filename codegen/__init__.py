"""YAML kernel sets -> validated KernelSpecs -> rendered .cu files (``python -m codegen``)."""
