"""The processes of an MPI job started in a session of its own (subprocess start_new_session=True): mpirun's session,
which its ranks keep (Open MPI 4 gives every rank a process group of its own, so killpg(mpirun) misses them). Shared by
the scripts that signal or kill whole jobs (tests/integration/check_dp_ckpt.py, validation/gpu_layouts.py); standard
library only, so that it runs from the GPU bundle too."""
import os


def session_pids(sid):
    """The live (not zombie) processes of session sid."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(pid))
    return pids
