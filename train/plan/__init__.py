"""The memory plan of a run: what each rank and node will hold, from the config and the graph's sizes alone.

terms: the plan's terms, each calibrated against real ranks (`make bench BENCH=plan`); `python -m train plan`
(train/cli/plan.py) and the submit's memory check print them.
"""
