"""The public import path of the env contract, kept for other projects: `train.distenv` is `train.cluster.distenv`.

The contract lives in train/cluster/distenv.py; this alias makes both names one module object, so
`from train.distenv import resolve` and a monkeypatch of either name behave the same.
"""

import sys

from train.cluster import distenv as _contract

sys.modules[__name__] = _contract
