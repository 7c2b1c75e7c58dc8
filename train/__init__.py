"""Multi-node PyG training of any GNN on SLURM, inside NVIDIA's PyG container (pyxis/enroot)."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`train.load_run`, imported on first use: `import train` stays torch-free (the login node's checks)."""
    if name == "load_run":
        from train.loop.finished_run import load_run

        return load_run
    raise AttributeError(f"module 'train' has no attribute {name!r}")
