"""Reading hpctrain checkpoints in the test drivers (tests/integration/check_*.py import it from their own directory):
the newest step directory of a run, and an index.h5's tensors (the whole tensors, through HDF5's virtual datasets) and
root attributes. h5py and numpy are imported on first use (Debian's python3-h5py, through /usr/bin/python3)."""
import os


def latest_step_dir(out):
    """The step_XXXXXXXX directory `<out>/checkpoints/latest` names."""
    with open(os.path.join(out, "checkpoints", "latest")) as f:
        return os.path.join(out, "checkpoints", f.read().strip())


def read_checkpoint(step_dir, prefixes=None):
    """(tensors, attrs) of step_dir/index.h5: {dataset path: numpy array} for every dataset, or only those whose path
    starts with one of `prefixes` (e.g. ("model/", "optim/")), and {attribute: value} of the root group."""
    import h5py
    import numpy as np
    tensors = {}
    with h5py.File(os.path.join(step_dir, "index.h5"), "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset) and (prefixes is None or name.startswith(tuple(prefixes))):
                tensors[name] = np.array(obj)
        f.visititems(visit)
        attrs = dict(f.attrs)
    return tensors, attrs
