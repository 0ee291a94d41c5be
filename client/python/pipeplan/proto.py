"""The generated pipeplan.v1 modules (protoc --python_out and grpc_python_plugin
output for proto/pipeplan/v1/*.proto), imported in one place so a missing build
says what to do.

They are generated at build time into <build>/python/pipeplan/v1/ (CMake target
pipeplan_python_stubs) and installed next to this package by python3-pipeplan;
pipeplan/__init__.py extends the package path so that `pipeplan.v1` is found in
any `pipeplan/` folder on sys.path.

    from pipeplan.proto import plan_pb2, planner_service_pb2
    request = plan_pb2.PlanRequest()
"""

try:
    from pipeplan.v1 import cluster_pb2
    from pipeplan.v1 import graph_pb2
    from pipeplan.v1 import plan_pb2
    from pipeplan.v1 import planner_service_pb2
    from pipeplan.v1 import planner_service_pb2_grpc
except ImportError as e:  # pragma: no cover - a packaging problem, reported as such
    raise ImportError(
        "pipeplan: the generated protobuf modules pipeplan.v1.*_pb2 are not importable "
        "(%s). Build them (cmake --build BUILD --target pipeplan_python_stubs) and put "
        "BUILD/python on PYTHONPATH, or install python3-pipeplan." % e) from e

__all__ = ["cluster_pb2", "graph_pb2", "plan_pb2", "planner_service_pb2",
           "planner_service_pb2_grpc"]
