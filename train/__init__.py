"""Multi-node PyG training of any GNN on SLURM, inside NVIDIA's PyG container (pyxis/enroot)."""

__version__ = "0.1.0"
