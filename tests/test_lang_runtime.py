"""sgl_lang.Runtime's process handling, with a stand-in `sgl_runtime.launch_server` (no model):
flags passed through, health wait, start failures reported with the log, stop at exit."""

import os
import subprocess
import sys
import textwrap

import pytest

FAKE_LAUNCH_SERVER = textwrap.dedent("""
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    argv = sys.argv[1:]
    if "--fail" in argv:
        print("boom: cannot load the model", flush=True)
        sys.exit(3)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = json.dumps({"model_path": "fake", "chat_template": None, "argv": argv}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    HTTPServer((argv[argv.index("--host") + 1], int(argv[argv.index("--port") + 1])), Handler).serve_forever()
""")


@pytest.fixture
def fake_runtime_path(tmp_path):
    package = tmp_path / "sgl_runtime"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(FAKE_LAUNCH_SERVER)
    return str(tmp_path)


def run_python(code: str, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=path, capture_output=True, text=True, timeout=60
    )


def test_runtime_passes_flags_and_stops_the_server_at_exit(fake_runtime_path):
    result = run_python(
        """
        import sgl_lang as sgl
        rt = sgl.Runtime(model_path="/models/x", max_total_tokens=4096, disable_radix_cache=True)
        print(rt.process.pid)
        print(rt.endpoint.model_info["argv"])
        print(rt.url)
    """,
        fake_runtime_path,
    )  # exits without shutdown(): atexit must stop the server
    assert result.returncode == 0, result.stderr
    pid, argv, url = result.stdout.strip().splitlines()
    assert "'--model-path', '/models/x'" in argv and "'--max-total-tokens', '4096'" in argv
    assert "'--disable-radix-cache'" in argv and f"'--port', '{url.rsplit(':', 1)[1]}'" in argv
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid), 0)


def test_runtime_start_failure_reports_the_server_log(fake_runtime_path):
    result = run_python(
        """
        import sgl_lang as sgl
        try:
            sgl.Runtime(fail=True)
        except RuntimeError as e:
            print("ERROR", e)
    """,
        fake_runtime_path,
    )
    assert "ERROR sgl_runtime server exited with code 3" in result.stdout
    assert "boom: cannot load the model" in result.stdout
