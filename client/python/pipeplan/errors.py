"""Typed errors of the pipeplan client: one exception class per gRPC status code,
all subclasses of PipeplanError, each carrying the planner's message (which names
the offending field, e.g. `options.num_stages must be >= 0, got -1`).

Decide by class (or by `.code`), never by matching the message text:

    try:
        plan = client.plan(graph, cluster, ranks=4)
    except pipeplan.InvalidArgument as e:   # a bad request: fix it, do not retry
        print("bad request:", e.message)
    except pipeplan.Unavailable:            # planner down or draining: retry later
        ...

Errors the client finds before sending anything (an unknown schedule name, a graph
file that is not a ModelGraph) are InvalidArgument too.
"""

import grpc


class PipeplanError(Exception):
    """A failed pipeplan call. `code` is the grpc.StatusCode, `message` the
    planner's (or the client's) explanation."""

    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return "%s: %s" % (self.code.name, self.message)


class Cancelled(PipeplanError):
    code = grpc.StatusCode.CANCELLED


class Unknown(PipeplanError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(PipeplanError, ValueError):
    """A bad request whatever the planner's state; the message names the field."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(PipeplanError, TimeoutError):
    """The call's timeout passed (e.g. no plan within it)."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class NotFound(PipeplanError, LookupError):
    """No such job (or worker)."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(PipeplanError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(PipeplanError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(PipeplanError):
    """Too large (graph, message) or too many solves queued; the message says which."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(PipeplanError):
    """The planner's state must change first (e.g. a report for an old plan
    version: switch plans and report again)."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(PipeplanError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(PipeplanError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(PipeplanError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(PipeplanError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(PipeplanError, ConnectionError):
    """The planner cannot be reached or is draining: the same call may be retried."""
    code = grpc.StatusCode.UNAVAILABLE


class DataLoss(PipeplanError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(PipeplanError):
    """Missing or wrong bearer token (Client(token=...) / token_file=...)."""
    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
    PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
    Unimplemented, Internal, Unavailable, DataLoss, Unauthenticated)}


def error_for(code, message):
    """The PipeplanError subclass instance for a grpc.StatusCode."""
    return _BY_CODE.get(code, PipeplanError)(message, code)


def from_rpc_error(error):
    """The typed error for a grpc.RpcError raised by a call or a stream."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else None
    return error_for(code, details or str(error))
