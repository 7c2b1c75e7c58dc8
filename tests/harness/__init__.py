"""The test harness, apart from the tests: the real SLURM cluster (slurm_cluster, its pure text in
slurm_conf, what it needs of the machine in machine, its pytest fixtures in conftest_slurm), enroot
and pyxis for it (pyxis_setup), the NGC stand-in image (ngc_standin), local multi-process jobs
(localjob), work on the ranks of one gloo group spawned from a test (gloo_ranks), OGB-format files
(ogb_files); workers/ holds the Python programs tests start, standins/
the shell stand-ins for sbatch, srun, docker, enroot (real files, checked by shellcheck)."""
