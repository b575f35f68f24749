# triton_python_backend_utils, continued (the server sends this file after
# triton_python_backend_utils.py as one module): Triton's logger,
# pb_utils.Logger and its levels, each line written for the server to log
# at its level. It uses the utilities' imports (`enum`, `sys`) and `_typed`.

class LogLevel(enum.Enum):
    """Triton's log levels: `Logger.log(message, LogLevel.WARNING)`."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Triton's logger: each line goes to the server's log at its level
    (VERBOSE as the server's debug level, shown with `--log-verbose`), with
    the model's name and the file and line that logged it, as Triton logs
    `model.py:12] message`. Triton's levels are `Logger.LogLevel` and, as
    pybind11 exports them, `Logger.INFO`, `Logger.WARNING`, ..."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message, level=LogLevel.INFO):
        # Typed as Triton's (pybind11): a level is a LogLevel, not an int.
        _typed("message", message, str)
        if not isinstance(level, LogLevel):
            raise TypeError("incompatible argument 'level': %s" % type(level).__name__)
        _log(message, level)

    @staticmethod
    def log_info(message):
        _typed("message", message, str)
        _log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        _typed("message", message, str)
        _log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        _typed("message", message, str)
        _log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        _typed("message", message, str)
        _log(message, LogLevel.VERBOSE)


# How a Logger line begins on the worker's stderr, for the server to read
# its level (`process.rs` `relay`): a record separator, then the level's
# letter. What a model prints itself is logged as it is, at INFO.
_LOG_MARK = {LogLevel.INFO: "\x1eI", LogLevel.WARNING: "\x1eW", LogLevel.ERROR: "\x1eE",
             LogLevel.VERBOSE: "\x1eV"}


def _log(message, level):
    """`message` at `level`, from the code that called Logger's method."""
    import os

    frame = sys._getframe(2)
    where = "%s:%d" % (os.path.basename(frame.f_code.co_filename), frame.f_lineno)
    mark = _LOG_MARK[level]
    sys.stderr.write("".join("%s %s] %s\n" % (mark, where, line) for line in message.split("\n")))
    sys.stderr.flush()


# The stub's C extension's classes in Triton, as for the utilities' others.
for _class in (Logger, LogLevel):
    _class.__module__ = "c_python_backend_utils"
del _class
