#!/bin/sh
# stand-in scontrol for tests/test_jobs.py: `scontrol show hostnames` of a two-node job
printf 'gpu07\ngpu08\n'
