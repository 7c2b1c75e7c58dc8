"""Multi-node PyG GraphSAGE training on SLURM, inside NVIDIA's PyG container."""

__version__ = "0.1.0"
