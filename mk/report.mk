# `make doctor` before a run, `make report` / `make logs` / `make tail` after (or during) one.
# `make submit ... DOCTOR=1` runs the doctor as the job's first step (jobs/train.sbatch) and
# trains only when every check passed.

# RUN: jobs/knobs.md (make submit MODE=predict reads it too).
# make report: runs to compare side by side, by id under runs/ or by directory ('7 8'): one table and compare.png
RUNS ?=
# make tensorboard: the port TensorBoard listens on, on this node (localhost; the ssh -L line it prints reaches it)
TB_PORT ?= 6006
# DOCTOR and DOCTOR_TIMEOUT: jobs/knobs.md.

# NODES or GPUS given by the user (not mk/jobs.mk's defaults): the doctor runs as a SLURM job, through make submit,
# whose messages then begin "make doctor:" (PYG_PROG).
DOCTOR_ON_SLURM = $(filter command line environment,$(origin NODES) $(origin GPUS))

.PHONY: doctor report predict tensorboard logs tail

doctor: $(if $(DOCTOR_ON_SLURM),,check-doctor setup) ## Check ranks, GPUs, network, data, all-reduce: NPROC local processes, or a job with NODES= GPUS=
ifneq ($(DOCTOR_ON_SLURM),)
	@PYG_PROG="make doctor" $(MAKE) --no-print-directory submit DOCTOR=only JOB_NAME=pyg-doctor
else
	@$(call split,args,ARGS); \
	"$$VENV/bin/python" -m login.launch --nproc "$$NPROC" --code-dir "$$CODE_DIR" doctor $(config_args) \
		--timeout "$$DOCTOR_TIMEOUT" "$${args[@]}"
endif

report: check-report setup ## Draw RUN/curves.png and print the run's summary (default: the newest run); RUNS='a b': side by side; SWEEP=<array id>: a sweep's table
	@$(call split,runs,RUNS); run=(); [[ -z $$RUN ]] || run=("$$RUN"); sweep=(); \
	[[ -z $$SWEEP ]] || sweep=(--sweep "$$SWEEP" --log-dir "$${LOG_DIR:-logs}"); \
	"$$VENV/bin/python" -m train report "$${sweep[@]}" -- "$${run[@]}" "$${runs[@]}"

predict: check-predict setup ## Write every node's prediction and embedding of RUN (default: the newest run) on NPROC local ranks
	@$(call split,args,ARGS); run=(); [[ -z $$RUN ]] || run=(--run-dir "$$RUN"); \
	"$$VENV/bin/python" -m login.launch --nproc "$$NPROC" --code-dir "$$CODE_DIR" predict "$${run[@]}" "$${args[@]}"

tensorboard: check-tensorboard setup ## Serve the runs' TensorBoard event files (runs/) on this node; prints the ssh -L line to reach it
	@"$$VENV/bin/python" -m login.tensorboard --port "$$TB_PORT"

logs: check-logs ## Print the newest job's log (the last job make submit submitted, else the newest log under LOG_DIR)
	@dir=$${LOG_DIR:-logs}; [[ $$dir == /* ]] || dir=./$$dir; \
	log=$$(bash jobs/lib/latest_log.sh "$$dir") || { echo "make logs: no log under $$dir/ yet (make submit writes one per job)" >&2; exit 2; }; \
	[[ -f $$log ]] || { echo "make logs: $$log does not exist yet: the job has not started (squeue --me); make tail waits for it" >&2; exit 2; }; \
	echo "==> $$log <==" >&2; \
	cat -- "$$log"

tail: check-tail ## Follow the newest job's log as it grows, waiting for it while the job is pending (Ctrl-C to stop)
	@dir=$${LOG_DIR:-logs}; [[ $$dir == /* ]] || dir=./$$dir; \
	log=$$(bash jobs/lib/latest_log.sh "$$dir") || { echo "make tail: no log under $$dir/ yet (make submit writes one per job)" >&2; exit 2; }; \
	[[ -f $$log ]] || echo "make tail: waiting for $$log: the job has not started yet (squeue --me)" >&2; \
	echo "==> $$log <==" >&2; \
	exec tail -n 50 -F -- "$$log"
