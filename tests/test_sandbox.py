"""The math agent's Python tool: agentscope's tool as the model sees it, run in math_bots.python_tool.sandbox.

Hostile snippets each end within their limit, come back as a tool result the agent can read, and
leave nothing behind: no work dir, no process, no change to the parent's files.
"""

import asyncio
import itertools
import os
import re
import socket
import tempfile
import time

import pytest
from agentscope.tool import Toolkit
from agentscope.tool import execute_python_code as agentscope_tool

from math_bots.python_tool import make_toolkit, sandbox

ENFORCED = sandbox.enforced()  # what this machine allows; the first call chooses it
SECRET = "sk-test-0123456789abcdef"


def run(code, **limits):
    """The tool's text for `code` and the seconds it took."""
    start = time.monotonic()
    response = asyncio.run(sandbox.run(code, sandbox.Limits(**limits)))
    return response.content[0]["text"], time.monotonic() - start


def processes():
    """{pid: (ppid, argv)} of every process, read from /proc."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:  # it ended meanwhile
            continue
        found[int(pid)] = (ppid, argv)
    return found


@pytest.fixture
def machine(monkeypatch):
    """Yields the work dirs the sandbox makes; afterwards asserts that they, the test process's
    children and every process running one of the test's scripts (named tmp_<marker><n>.py) are gone.
    """
    made, names = [], itertools.count()
    marker = f"tmp_t{os.getpid()}x".encode()
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        made.append(real_mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, "mkdtemp", recording_mkdtemp)
    monkeypatch.setattr(sandbox.shortuuid, "uuid", lambda: f"t{os.getpid()}x{next(names)}")

    # children the test process had before (the fork server of tests/launches.py) are not the sandbox's
    earlier = {pid for pid, (ppid, _) in processes().items() if ppid == os.getpid()}

    def leftovers():
        return [(pid, argv[:6]) for pid, (ppid, argv) in processes().items()
                if (ppid == os.getpid() and pid not in earlier) or any(arg.startswith(marker) for arg in argv)]

    yield made
    assert made, "the sandbox ran"
    assert not [path for path in made if os.path.exists(path)], "work dirs removed"
    deadline = time.monotonic() + 3  # SIGKILLed processes need a moment to go
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers() == []


def test_the_model_sees_agentscopes_tool_schema():
    reference = Toolkit()
    reference.register_tool_function(agentscope_tool, preset_kwargs={"timeout": 10})
    toolkit = make_toolkit(code_timeout=10)
    assert toolkit.get_json_schemas() == reference.get_json_schemas()
    assert toolkit.tools["execute_python_code"].original_func is sandbox.execute_python_code


def test_results_read_exactly_as_agentscopes(machine):
    for code in ["print(25 + 49)", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"]:
        ours = asyncio.run(sandbox.execute_python_code(code, timeout=10))
        theirs = asyncio.run(agentscope_tool(code, timeout=10))
        assert ours.content == theirs.content
    assert ours.content[0]["text"] == "<returncode>3</returncode><stdout>out\n</stdout><stderr>err\n</stderr>"
    # A traceback names a tmp_<id>.py script in a temp dir, as agentscope's does.
    ours, theirs = (asyncio.run(tool("1 / 0", timeout=10)).content[0]["text"]
                    for tool in (sandbox.execute_python_code, agentscope_tool))
    script = re.compile(r'"/[^"]*/tmp\w+/tmp_\w+\.py"')
    assert script.sub("SCRIPT", ours) == script.sub("SCRIPT", theirs)
    assert "ZeroDivisionError" in ours


def test_enforced_reports_the_plan_in_use():
    report = ENFORCED
    assert report["wall_seconds"] == sandbox.WALL_SECONDS == 10
    assert report["clean_environment"] and report["own_work_directory"]
    if os.geteuid() != 0 or report["own_uid"]:
        assert report["processes"] == sandbox.MAX_PROCESSES
    else:
        assert report["processes"] is None, "the kernel never limits root's processes"
    assert report["no_network"] == report["read_only_outside_work_directory"] == report["proc_hidden"]


def test_infinite_loop_ends_at_the_wall_clock_limit(machine):
    text, seconds = run("while True:\n    pass", wall_seconds=1)
    assert seconds < 5
    assert text.startswith("<returncode>-1</returncode>")
    assert "TimeoutError: The code execution exceeded the timeout of 1 seconds." in text


def test_busy_code_is_killed_at_its_cpu_limit(machine):
    text, seconds = run("while True:\n    pass", cpu_seconds=1, wall_seconds=8)
    assert seconds < 6, "killed by the CPU limit, before the wall clock one"
    assert "<returncode>-9</returncode>" in text
    assert "it used up its CPU time limit of 1 s" in text


def test_memory_bomb_gets_a_memory_error(machine):
    text, seconds = run("blocks = []\nwhile True:\n    blocks.append(bytes(64 * 2**20))")
    assert seconds < 8
    assert "<returncode>1</returncode>" in text and "MemoryError" in text
    assert f"exceeded its memory limit of {sandbox.MEMORY_MIB} MiB" in text


def test_large_file_is_cut_at_the_file_size_limit(machine):
    code = "with open('big', 'wb') as f:\n    while True:\n        f.write(bytes(2**20))"
    text, seconds = run(code)
    assert seconds < 8
    assert "[Errno 27] File too large" in text
    assert f"file size limit of {sandbox.FILE_SIZE_MIB} MiB" in text


def test_endless_output_is_capped_too(machine):
    text, seconds = run("while True:\n    print('x' * 2**16)")
    assert seconds < 8
    assert len(text) < 2 * sandbox.FILE_SIZE_MIB * 2**20, "stdout is a file under the same limit"
    assert "file size limit" in text


@pytest.mark.skipif(ENFORCED["processes"] is None,
                    reason="no process limit here: the parent is root and cannot switch to another uid")
def test_fork_bomb_is_held_to_the_process_limit(machine):
    text, seconds = run("import os\nwhile True:\n    os.fork()", wall_seconds=2)
    assert seconds < 6
    assert "[Errno 11] Resource temporarily unavailable" in text
    assert f"reached its limit of {sandbox.MAX_PROCESSES} processes" in text


@pytest.mark.skipif(not ENFORCED["kills_detached_processes"],
                    reason="without a PID namespace or an own uid, a process that calls setsid() escapes")
def test_detached_processes_do_not_outlive_the_call(machine):
    code = ("import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n"
            "        os.setsid()\n        time.sleep(600)\nprint('started three')")
    text, seconds = run(code)
    assert seconds < 5
    assert "<returncode>0</returncode><stdout>started three\n</stdout>" in text
    # the machine fixture asserts that the sleepers are gone


def test_parent_environment_does_not_reach_the_code(machine, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    code = (f"import os\nprint(sorted(os.environ))\nprint(os.environ.get('OPENAI_API_KEY'))\n"
            f"print(open('/proc/{os.getpid()}/environ').read())")
    text, _ = run(code)
    assert "'HOME'" in text and "None" in text, "the code ran and has a clean environment"
    if ENFORCED["proc_hidden"] or ENFORCED["own_uid"]:
        assert SECRET not in text and "OPENAI_API_KEY" not in text
        unreadable = r"(PermissionError|FileNotFoundError): \[Errno (13|2)\]"
        assert re.search(unreadable, text), "the parent's /proc/<pid>/environ is out of reach"
    else:
        pytest.skip("/proc is visible and the code runs as the parent's user: it can read its environment")


@pytest.mark.skipif(not (ENFORCED["read_only_outside_work_directory"] or ENFORCED["own_uid"]),
                    reason="no mount namespace, and the code runs as the parent's user: it may write there")
def test_files_outside_the_work_dir_stay_as_they_were(machine, tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("checkpoint")
    before = precious.stat()
    code = f"""
import os
attempts = [
    lambda: open({str(precious)!r}, "w").write("gone"),
    lambda: open({str(precious)!r}, "a").write("more"),
    lambda: os.chmod({str(precious)!r}, 0o777),
    lambda: os.rename({str(precious)!r}, {str(tmp_path / "moved")!r}),
    lambda: os.remove({str(precious)!r}),
    lambda: open({str(tmp_path / "new.txt")!r}, "w").write("new"),
    lambda: os.rename(os.getcwd(), os.getcwd() + "-moved"),  # then a symlink could stand in for it
]
for attempt in attempts:
    try:
        attempt()
        print("done")
    except OSError as error:
        print("refused", error.errno)
open("mine.txt", "w").write("the work dir is writable")
print(open("mine.txt").read())
"""
    text, _ = run(code)
    assert "done" not in text
    assert text.count("refused") == 7
    assert "the work dir is writable" in text
    assert precious.read_text() == "checkpoint"
    after = precious.stat()
    for field in ("st_mode", "st_mtime_ns", "st_ino"):
        assert getattr(after, field) == getattr(before, field), field
    assert sorted(p.name for p in tmp_path.iterdir()) == ["precious.txt"]


@pytest.mark.skipif(not ENFORCED["no_network"], reason="no network namespace here: the code has the network")
def test_code_cannot_reach_a_local_server(machine):
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0)
        port = server.getsockname()[1]
        text, _ = run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    assert "[Errno 101] Network is unreachable" in text
    assert "The code has no network access." in text


def test_read_only_paths_are_still_readable(machine):
    text, _ = run(f"import numpy, sympy\nprint(numpy.arange(4).sum(), sympy.sqrt(8))\n"
                  f"print(open({os.path.abspath(sandbox.__file__)!r}).read(10))")
    assert "<stdout>6 2*sqrt(2)\n\"\"\"Run mod\n</stdout>" in text


def test_mode_bits_the_code_set_do_not_block_cleanup(machine):
    text, _ = run("import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nos.chmod('a/b', 0)\n"
                  "os.chmod('a', 0)\nprint('locked')")
    assert "<stdout>locked\n</stdout>" in text  # and the machine fixture checks the dir is gone


def test_a_cancelled_call_leaves_nothing_behind(machine):
    async def cancel_after_a_second():
        call = asyncio.create_task(sandbox.run("import time\ntime.sleep(60)"))
        await asyncio.sleep(1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

    start = time.monotonic()
    asyncio.run(cancel_after_a_second())
    assert time.monotonic() - start < 5  # and the machine fixture checks nothing is left running
