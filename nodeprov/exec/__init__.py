"""The exec kit: what a provider whose processes run over a platform's exec channel shares.

- :mod:`~nodeprov.exec.shell`: POSIX sh building blocks (arguments an exec channel cannot
  carry, environment names, ``printf`` escapes, a process's start time).
- :mod:`~nodeprov.exec.preamble`: the preamble that starts a process over a channel that
  carries only a command and the standard streams, and the report every preamble gives.
- :mod:`~nodeprov.exec.prepared`: a spawn's channel opened ahead of its command.
- :mod:`~nodeprov.exec.demux`: stdout and stderr of one channel kept apart, and the byte
  streams a process hands out.
- :mod:`~nodeprov.exec.released`: stdout ended once nothing on the node holds its pipe.
- :mod:`~nodeprov.exec.process`: a process that leads its group, signalled over a side channel.
"""

from .demux import QUEUE_LIMIT, STDERR, STDOUT, Demux, Input, Output
from .preamble import (
    END_RELAY,
    PREAMBLE,
    PREPARED_PREAMBLE,
    RELAYED_PREAMBLE,
    REPORT_GONE,
    REPORT_NO_CWD,
    REPORT_NO_PERL,
    REPORT_NO_RELAY,
    REPORT_NOT_FOUND,
    REPORT_OK,
    REPORT_READY,
    SENTINEL,
    SIGNAL_GROUP,
    SIGNAL_GROUP_FUNCTION,
    Explain,
    Report,
    environment_block,
    read_report,
)
from .prepared import PreparedChannel, prepared_request, start_prepared
from .process import KILLED, GroupArgs, GroupProcess, SignalGroup
from .released import HOLDS_PIPE_SCRIPT, Held, ReleasedStdout
from .shell import DECODE_ARGUMENTS_SCRIPT, SHELL_NAME, START_TIME_FUNCTION, encode_arguments, printf_escapes

__all__ = [
    "DECODE_ARGUMENTS_SCRIPT",
    "END_RELAY",
    "HOLDS_PIPE_SCRIPT",
    "KILLED",
    "PREAMBLE",
    "PREPARED_PREAMBLE",
    "QUEUE_LIMIT",
    "RELAYED_PREAMBLE",
    "REPORT_GONE",
    "REPORT_NOT_FOUND",
    "REPORT_NO_CWD",
    "REPORT_NO_PERL",
    "REPORT_NO_RELAY",
    "REPORT_OK",
    "REPORT_READY",
    "SENTINEL",
    "SHELL_NAME",
    "SIGNAL_GROUP",
    "SIGNAL_GROUP_FUNCTION",
    "START_TIME_FUNCTION",
    "STDERR",
    "STDOUT",
    "Demux",
    "Explain",
    "GroupArgs",
    "GroupProcess",
    "Held",
    "Input",
    "Output",
    "PreparedChannel",
    "ReleasedStdout",
    "Report",
    "SignalGroup",
    "encode_arguments",
    "environment_block",
    "prepared_request",
    "printf_escapes",
    "read_report",
    "start_prepared",
]
