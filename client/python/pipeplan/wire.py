"""Python values -> pipeplan.v1 messages: graphs and clusters given as the JSON
file's dict, a path or a message; plan options by name; training specs as dicts;
and the names of the wire's enums as users write them.

Client-side mistakes raise pipeplan.InvalidArgument naming the argument; a file
that cannot be read raises the OSError.
"""

import json
import os

from google.protobuf import json_format
from google.protobuf.message import Message

from pipeplan.errors import InvalidArgument
from pipeplan.proto import cluster_pb2, graph_pb2, plan_pb2, planner_service_pb2

# PyTorch's spelling (torch.distributed.pipelining), as the CLI prints them.
SCHEDULES = {
    "auto": plan_pb2.SCHEDULE_AUTO,
    "GPipe": plan_pb2.SCHEDULE_GPIPE,
    "1F1B": plan_pb2.SCHEDULE_1F1B,
    "Interleaved1F1B": plan_pb2.SCHEDULE_INTERLEAVED_1F1B,
    "LoopedBFS": plan_pb2.SCHEDULE_LOOPED_BFS,
    "InterleavedZeroBubble": plan_pb2.SCHEDULE_INTERLEAVED_ZERO_BUBBLE,
    "ZBVZeroBubble": plan_pb2.SCHEDULE_ZBV_ZERO_BUBBLE,
    "DualPipeV": plan_pb2.SCHEDULE_DUALPIPE_V,
}
METHODS = {
    "auto": plan_pb2.METHOD_AUTO,
    "dp": plan_pb2.METHOD_DP,
    "milp": plan_pb2.METHOD_MILP,
    "uniform": plan_pb2.METHOD_UNIFORM,
    "params": plan_pb2.METHOD_PARAMS,
    "time": plan_pb2.METHOD_TIME,
    "ideal_dp": plan_pb2.METHOD_IDEAL_DP,
}
COMM_MODELS = {"direct": plan_pb2.COMM_DIRECT, "relay": plan_pb2.COMM_RELAY}

# The wire's num_stages has always counted ranks (pipeline devices); newer
# protos name it num_ranks and keep num_stages as a deprecated alias.
_RANKS_FIELD = ("num_ranks" if "num_ranks" in plan_pb2.PlanOptions.DESCRIPTOR.fields_by_name
                else "num_stages")

# PlanOptions fields by the keyword the client takes.
OPTION_FIELDS = {
    "ranks": _RANKS_FIELD,
    "microbatches": "microbatches",
    "global_batch": "global_batch",
    "allreduce_bucket_bytes": "allreduce_bucket_bytes",
    "chunks_per_rank": "chunks_per_rank",
    "optimizer_state_multiplier": "optimizer_state_multiplier",
    "time_limit_seconds": "time_limit_seconds",
    "relative_gap": "relative_gap",
    "schedule": "schedule",
    "method": "method",
    "comm_model": "comm_model",
}


def _enum(argument, value, names, enum_type):
    """A wire enum value from a name (any case), the enum's own name
    (SCHEDULE_1F1B) or its number."""
    if isinstance(value, bool):
        raise InvalidArgument("%s: want a name, got %r" % (argument, value))
    if isinstance(value, int):
        if value not in enum_type.values():
            raise InvalidArgument("%s: %d is not a %s" % (argument, value, enum_type.DESCRIPTOR.name))
        return value
    if isinstance(value, str):
        for name, number in names.items():
            if value.strip().lower() == name.lower():
                return number
        if value in enum_type.keys():
            return enum_type.Value(value)
    raise InvalidArgument("%s: unknown %s %r; valid names are %s"
                          % (argument, argument, value, ", ".join(names)))


def schedule_value(name):
    return _enum("schedule", name, SCHEDULES, plan_pb2.Schedule)


def schedule_name(value):
    """PyTorch's name of a wire Schedule value: SCHEDULE_1F1B -> "1F1B"."""
    for name, number in SCHEDULES.items():
        if number == value:
            return name
    return plan_pb2.Schedule.Name(value)


def method_value(name):
    return _enum("method", name, METHODS, plan_pb2.PartitionMethod)


def comm_model_value(name):
    return _enum("comm_model", name, COMM_MODELS, plan_pb2.CommModel)


_ENUMS = {"schedule": schedule_value, "method": method_value, "comm_model": comm_model_value}


def plan_options(base=None, **values):
    """PlanOptions with the given client keywords (see OPTION_FIELDS) set; None
    leaves a field as in `base` (or unset). Unknown keywords raise TypeError."""
    options = plan_pb2.PlanOptions()
    if base is not None:
        options.CopyFrom(base)
    for key, value in values.items():
        if key not in OPTION_FIELDS:
            raise TypeError("unknown plan option %r (use %s)" % (key, ", ".join(OPTION_FIELDS)))
        if value is None:
            continue
        if key in _ENUMS:
            value = _ENUMS[key](value)
        field = OPTION_FIELDS[key]
        try:
            setattr(options, field, value)
        except (TypeError, ValueError) as e:
            raise InvalidArgument("%s: %s" % (key, e)) from e
        if field == "num_ranks":  # a base's deprecated alias must not contradict it
            options.num_stages = 0
    return options


def _message(argument, value, message_type):
    """message_type from a message, a dict (the JSON file's content) or a path."""
    if isinstance(value, message_type):
        return value
    if isinstance(value, Message):
        raise InvalidArgument("%s: want a %s, got a %s" % (
            argument, message_type.DESCRIPTOR.full_name, value.DESCRIPTOR.full_name))
    if isinstance(value, (str, os.PathLike)):
        with open(value) as f:
            text = f.read()
        try:
            return json_format.Parse(text, message_type())
        except json_format.ParseError as e:
            raise InvalidArgument("%s: %s: %s" % (argument, os.fspath(value), e)) from e
    if isinstance(value, dict):
        try:
            return json_format.ParseDict(value, message_type())
        except json_format.ParseError as e:
            raise InvalidArgument("%s: %s" % (argument, e)) from e
    raise InvalidArgument("%s: want a dict, a path or a %s, got %s"
                          % (argument, message_type.DESCRIPTOR.full_name, type(value).__name__))


def graph_message(graph):
    return _message("graph", graph, graph_pb2.ModelGraph)


def cluster_message(cluster):
    return _message("cluster", cluster, cluster_pb2.ClusterTopology)


def plan_request(graph, cluster, **options):
    return plan_pb2.PlanRequest(graph=graph_message(graph), cluster=cluster_message(cluster),
                                options=plan_options(**options))


def training_spec(training):
    """TrainingSpec from a dict of its fields (snake_case, as in the proto) or a
    message; None gives None."""
    if training is None:
        return None
    return _message("training", training, planner_service_pb2.TrainingSpec)


def to_dict(message):
    """A message as a dict with the proto's field names (what --json prints)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def to_json(message):
    return json.dumps(to_dict(message), indent=1)
