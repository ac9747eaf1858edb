"""A sweep's runs as jobs of a scheduler, through submitit: SLURM job arrays on a cluster, or submitit's local
executor (the same path on one machine, as the tests take it). Each job is the command the sweep would run
itself (`train.py ARM.py ... --init_from=auto`, under --launcher), its console appended to the run's
train.log, its exit status written beside the job's submitit files; the sweep submits the runs not finished
as one array, waits for them, and reads what became of each from the run directories alone (no job's
pickled result is read). The job ids are kept in OUT_ROOT/submitit/jobs.json: a sweep run again while its
jobs are still queued or running waits for them instead of submitting them twice.
"""

import json
import shlex
import time
from pathlib import Path

from nlq.common.atomic import atomic_write_json
from nlq.common.errors import UserError

EXECUTORS = ("slurm", "submitit_local")
ACTIVE = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING"}


def make_executor(kind: str, folder: Path, partition, gpus: int, minutes: int, parallelism):
    """A submitit executor for kind: SLURM with the partition, GPUs per job (one task of that many GPUs on one
    node), time limit and array parallelism given, or submitit's local executor."""
    try:
        import submitit
    except ImportError:
        raise UserError(f"--executor={kind} needs submitit: pip install submitit") from None
    if kind == "slurm":
        ex = submitit.SlurmExecutor(folder=folder)
        params = dict(time=minutes, gpus_per_node=gpus, ntasks_per_node=1, nodes=1, job_name="nlq-sweep")
        if partition:
            params["partition"] = partition
        if parallelism:
            params["array_parallelism"] = parallelism
        ex.update_parameters(**params)
        return ex
    ex = submitit.LocalExecutor(folder=folder)
    ex.update_parameters(timeout_min=minutes)
    return ex


def job_script(cmd: list[str], log: Path, status: Path) -> list[str]:
    """The job's command line: cmd with its console appended to log and its exit status written to status."""
    line = f"{shlex.join(cmd)} >> {shlex.quote(str(log))} 2>&1"
    return ["bash", "-c", f"{line}; code=$?; echo $code > {shlex.quote(str(status))}; exit $code"]


def run_jobs(todo, commands: dict, ex, folder: Path, every: float, progress, last_error) -> dict:
    """Each (run, state) of todo as a job of ex, waited for: {run's name: (exit status, error line)} of the
    failures, as the sweep's own runner returns them. commands: {run's out_dir: its command}. progress and
    last_error: the sweep's progress line and a log's last error line."""
    import submitit

    record_path = folder / "jobs.json"
    record = read_record(record_path)
    jobs, submit = {}, []
    for run, _ in todo:
        job = attach(ex, folder, record.get(key(run, folder)))
        if job is not None:
            print(f"waiting for job {job.job_id}: {key(run, folder)} (submitted by an earlier sweep)")
            jobs[run.out_dir] = (run, job)
        else:
            submit.append(run)
    if submit:
        for r in submit:
            paths(r, folder)[1].unlink(missing_ok=True)  # an earlier attempt's exit status
        with ex.batch():
            submitted = [
                ex.submit(submitit.helpers.CommandFunction(job_script(commands[r.out_dir], *paths(r, folder))))
                for r in submit
            ]
        for run, job in zip(submit, submitted):
            print(f"submitted job {job.job_id}: {key(run, folder)}")
            jobs[run.out_dir] = (run, job)
            record[key(run, folder)] = job.job_id
        atomic_write_json(record_path, record)
    return wait(jobs, folder, every, progress, last_error)


def read_record(path: Path) -> dict:
    """{run's name: job id} of jobs.json; {} if there is none."""
    if not path.exists():
        return {}
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"{path} cannot be read ({e}): remove it once no job of this sweep is queued") from None
    if not isinstance(record, dict) or not all(isinstance(v, str) for v in record.values()):
        raise UserError(f"{path} is not a record of job ids: remove it once no job of this sweep is queued")
    return record


def attach(ex, folder: Path, job_id):
    """The job job_id of an earlier sweep if it is still queued or running, else None."""
    if not job_id:
        return None
    job = ex.job_class(folder=folder, job_id=job_id)
    return job if job.state.upper() in ACTIVE else None


def key(run, folder: Path) -> str:
    """The run's name in jobs.json and its status file: its out_dir below the sweep's out_root (folder's
    parent), its name alone for a sweep's runs, SETTING--name for a screen's."""
    return "--".join(run.out_dir.resolve().relative_to(folder.resolve().parent).parts)


def paths(run, folder: Path) -> tuple[Path, Path]:
    return run.out_dir / "train.log", folder / f"{key(run, folder)}.status"


def wait(jobs: dict, folder: Path, every: float, progress, last_error) -> dict:
    """Poll every job until none is queued or running, with a progress line every `every` seconds."""
    started, due = {}, time.monotonic() + every
    while True:
        states = {d: job.state.upper() for d, (_, job) in jobs.items()}
        for d, state in states.items():
            if state == "RUNNING":
                started.setdefault(d, time.monotonic())
        if not any(s in ACTIVE for s in states.values()):
            break
        if time.monotonic() >= due:
            due += every
            running = [(jobs[d][0], t) for d, t in started.items() if states[d] == "RUNNING"]
            waiting = sum(s != "RUNNING" and s in ACTIVE for s in states.values())
            print(progress(running, waiting, max(len(running), 1), time.monotonic()))
        time.sleep(min(every, 5))
    failures = {}
    for d, (run, job) in jobs.items():
        log, status = paths(run, folder)
        code = int(status.read_text()) if status.exists() and status.read_text().strip().isdigit() else None
        if code != 0:
            error = (
                last_error(log) if code is not None else f"job {job.job_id} ended {states[d]} without an exit status"
            )
            failures[str(run.out_dir)] = (1 if code is None else code, error)
        print(f"{'done' if code == 0 else 'FAILED'}: job {job.job_id} {key(run, folder)}")
    return failures
