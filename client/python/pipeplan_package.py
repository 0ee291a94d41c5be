"""The model package's reader and writer under their old module name: what
pipeplan.export.package holds (docs/model-package.md), for the scripts, tests and
users that import pipeplan_package, and for packages written before the exporter
became a package, whose graph_module.pt names pipeplan_package.ReloadTracer.
"""

from pipeplan.export.package import (  # noqa: F401 (re-exported)
    DTYPE_NAMES, FORMAT, GRAPH_MODULE, MANIFEST, PARAMS, Package, PackageError, ReloadTracer,
    canonical_parameters, default_loss, dtype_name, dtype_of, get_attr, install_dir,
    load_package, parameter_paths, read_manifest, sha256_files, write_package)
