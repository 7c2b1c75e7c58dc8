"""`python -m train model --config NAME|PATH [section.key=value ...]`: check the model as `fit` will build it.

Imports model.name (a user's `package.module:ClassName` from the working directory and PYTHONPATH),
checks model.kwargs, builds the model for a stand-in graph and runs a sampled batch through it as the
training step does (train/models/contract.py), then says which trimming and which evaluation a run
will use. Nothing is written. `make submit` runs it where the job will (CODE_DIR on PYTHONPATH, in the
image where it can: jobs/lib/code_dir.sh); exit status 2 with a message naming what is wrong.
"""

from __future__ import annotations

from train.cli.fit import add_config_arguments, config_of
from train.config import check_layer_fanouts

add_arguments = add_config_arguments


def main(args) -> int:
    from train.models import layerwise, resolve  # torch and PyG: `python -m train --help` imports this module
    from train.models.contract import check_model

    config = config_of(args)
    step = check_model(config.model)
    check_layer_fanouts(config, step.uses_graph)  # the user's model: one fanout per layer if it reads the graph
    spec = resolve(config.model)
    params = sum(p.numel() for p in step.model.parameters())
    print(f"model.name={config.model.name}: {spec.class_path} builds and answers a sampled batch as training "
          f"calls it ({params:,} parameters on a stand-in graph)")
    print(f"model.trim: {step.trim_mode if config.model.trim else 'off'}")
    _api, note = layerwise(step)
    if config.eval.mode == "full":
        print(note or "evaluation: exact, layer by layer over full neighbourhoods (eval.mode=full)")
    return 0
