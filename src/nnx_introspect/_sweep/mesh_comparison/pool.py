"""The default executor: a local pool of spawned processes, and stopping it.

Each worker leads its own process group and compiles on the CPU platform (its
initializer is code run by ``exec``, so that JAX's first import there is
filtered); stopping the pool (Ctrl-C, a compile that timed out) stops every
worker and the child compiles they started.
"""

import concurrent.futures
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import os
import signal

import jax

from nnx_introspect._xla import native_stderr_filtered

_WORKER_START = (
    "from nnx_introspect._xla.native_log import native_stderr_filtered\n"
    "with native_stderr_filtered():\n"
    "    from nnx_introspect._sweep.mesh_comparison.pool import _start_worker\n"
    "_start_worker({devices!r})\n"
)
"""The default pool's initializer, run by ``exec`` in each new worker.

Code, not a function: unpickling a function of this package would import JAX
before the filter is in place, and the CUDA plugin writes its ``Could not find
cuda drivers`` lines to the user's stderr from every worker."""


def default_pool(
    workers: int, devices: int | None
) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``workers`` processes started with ``"spawn"``.

    Each worker runs :func:`_start_worker` first (through :data:`_WORKER_START`,
    so JAX's first import there is filtered): the CPU platform with
    ``devices`` virtual devices, so a CPU mesh compiles in the worker itself.
    """
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=exec,
        initargs=(_WORKER_START.format(devices=devices), {}),
    )


def _start_worker(devices: int | None) -> None:
    """Set up a worker of the default pool, before its first compile.

    Its own process group (POSIX), so stopping the pool stops the child
    compiles it started too (and Ctrl-C reaches only the parent, which stops
    the pool); the CPU platform (a worker needs no accelerator: a named
    topology compiles in a child process), with ``devices`` virtual devices.
    The plugins' start-up noise stays off stderr.
    """
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    with native_stderr_filtered():
        jax.config.update("jax_platforms", "cpu")
        if devices is not None:
            jax.config.update("jax_num_cpu_devices", devices)
        jax.devices()


def stop_pool(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Shut ``pool`` down now: pending calls cancelled, every worker stopped.

    A worker leads its own process group (:func:`_start_worker`): the group is
    sent SIGTERM, which stops the child compile it may be waiting on too; a
    worker still starting is terminated alone, and one that outlives 5 s is
    killed.

    The pool's own manager thread reaps the workers (it joins them as it shuts
    down): this waits for the workers' exit through their sentinels, then for
    that thread. Joining a worker here as well would race it for the same
    ``waitpid``, and the loser would see the worker alive forever.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        pid = process.pid
        try:
            if pid is not None and hasattr(os, "killpg") and os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGTERM)
                continue
        except OSError:  # gone already, or never started
            continue
        process.terminate()
    running = [p for p in processes if not _exited(p, 5.0)]
    for process in running:
        process.kill()
    for process in running:
        _exited(process, 5.0)
    if manager is not None:
        manager.join(timeout=10)
    if manager is None or not manager.is_alive():
        for process in processes:  # reaped already by the manager, or ours to reap
            process.join(timeout=5)


def _exited(process: multiprocessing.process.BaseProcess, timeout: float) -> bool:
    """Whether ``process`` exits within ``timeout`` s (by its sentinel, not reaped)."""
    try:
        sentinel = process.sentinel
    except ValueError:  # not started
        return True
    return bool(multiprocessing.connection.wait([sentinel], timeout))


def cpus() -> int:
    """The CPUs this process may use (its affinity where the OS tells it)."""
    count = getattr(os, "process_cpu_count", None)
    if count is not None:
        return int(count() or 1)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
