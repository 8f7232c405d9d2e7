"""Log lines for a terminal (timestamped) and for journald (its priority first, no timestamp)."""

from __future__ import annotations

import logging
import os

import pytest

from atoll.observe.log_format import LOG_FORMAT_ENV, configure_logging, default_log_format, formatter


def record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("atoll.supervisor.supervisor", level, __file__, 1, message, None, None)


def test_journal_lines_carry_their_syslog_priority_and_no_timestamp():
    f = formatter("journal", who="fe0 ")
    warning = f.format(record(logging.WARNING, "front end 1 died"))
    assert warning == "<4>fe0 atoll.supervisor.supervisor: front end 1 died"
    assert f.format(record(logging.INFO, "stopped")) == "<6>fe0 atoll.supervisor.supervisor: stopped"
    assert f.format(record(logging.ERROR, "x")).startswith("<3>")


def test_plain_lines_start_with_the_time():
    r = record(logging.INFO, "stopped")
    r.created = 0.0
    text = formatter("plain").format(r)
    assert text.endswith(" atoll.supervisor.supervisor: stopped")
    assert text.startswith(logging.Formatter().formatTime(r))


def test_the_journal_is_the_default_only_where_standard_error_is_the_stream_it_names(tmp_path):
    with open(tmp_path / "err", "w") as err:
        st = os.fstat(err.fileno())
        assert default_log_format({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}, err.fileno()) == "journal"
        assert default_log_format({"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"}, err.fileno()) == "plain"
        assert default_log_format({}, err.fileno()) == "plain"


def test_a_child_takes_the_format_its_server_chose(monkeypatch):
    monkeypatch.setenv(LOG_FORMAT_ENV, "journal")  # as the supervisor left it for its children
    assert configure_logging(who="fe0 ") == "journal"
    assert configure_logging("plain") == "plain" and os.environ[LOG_FORMAT_ENV] == "plain"  # passed on
    with pytest.raises(ValueError, match="plain, journal"):
        configure_logging("json")
