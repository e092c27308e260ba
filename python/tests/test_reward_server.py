"""caprl.reward_server, the Python side of `py:<function>` rewards, from the installed wheel:
the protocol a reward worker speaks with it, and each way a reward function can be wrong."""

import json
import subprocess
import sys

BATCH = {
    "task": "task-7", "image_ids": ["a", "b"], "rows": [0, 1],
    "captions": ["a red ball", "two dogs"], "tokens": [[4, 5, 6], [7, 8]],
    "finished": [True, False], "references": [["a red ball"], ["two brown dogs"]],
}

MODULE = '''
import numpy as np
def words(batch):
    print("printed by the reward")          # goes to stderr, not into the protocol
    return np.array([len(c.split()) for c in batch.captions], dtype=np.float32)
def short(batch):
    return [1.0]
def inf(batch):
    return [float("inf")] * len(batch)
def none(batch):
    return [None] * len(batch)
def raises(batch):
    raise RuntimeError("model not loaded")
'''


def serve(tmp_path, *requests):
    module = tmp_path / "rewards.py"
    module.write_text(MODULE)
    lines = "".join(json.dumps(r) + "\n" for r in requests)
    out = subprocess.run([sys.executable, "-m", "caprl.reward_server", str(module)], input=lines,
                         capture_output=True, text=True, check=True)
    return [json.loads(l) for l in out.stdout.splitlines()], out.stderr


def call(tmp_path, function):
    replies, _ = serve(tmp_path, {"functions": [function], "data": ""},
                       {"function": function, "batch": BATCH})
    assert replies[0] == {"ok": True}
    return replies[1]


def test_values_come_back_as_floats_and_prints_go_to_stderr(tmp_path):
    replies, err = serve(tmp_path, {"functions": ["words"], "data": ""},
                         {"function": "words", "batch": BATCH})
    assert replies == [{"ok": True}, {"values": [3.0, 2.0]}]
    assert "printed by the reward" in err


def test_a_missing_function_or_module_is_refused_at_the_handshake(tmp_path):
    replies, _ = serve(tmp_path, {"functions": ["words", "nowhere"], "data": ""})
    assert replies[0]["kind"] == "import" and "has no function nowhere" in replies[0]["error"]
    out = subprocess.run([sys.executable, "-m", "caprl.reward_server", "/nonexistent/r.py"],
                         input=json.dumps({"functions": ["f"]}) + "\n", capture_output=True,
                         text=True, check=True)
    reply = json.loads(out.stdout)
    assert reply["kind"] == "import" and "/nonexistent/r.py" in reply["error"]


def test_each_wrong_return_says_what_was_wrong(tmp_path):
    assert call(tmp_path, "short") == {
        "error": "short returned 1 values for 2 captions", "kind": "values"}
    assert call(tmp_path, "inf")["error"] == "inf returned inf for caption 0; rewards must be finite"
    assert call(tmp_path, "none")["error"].startswith("none returned NoneType None for caption 0")
    raised = call(tmp_path, "raises")
    assert raised["kind"] == "raised" and "RuntimeError: model not loaded" in raised["error"]
