"""The README's first code block is the two set-up commands, and its tour runs."""

import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_first_code_block_is_the_two_setup_commands():
    first = re.search(r"```[a-z]*\n(.*?)```", README, re.S).group(1).strip().splitlines()
    assert first == ['pip install -e ".[examples]" && ppl-zoo compare gvq',
                     'pip install -e ".[test]" && pytest']


def test_python_tour_runs(capsys):
    tour = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    namespace = {}
    exec(compile(tour, "README.md", "exec"), namespace)
    result, exact, peer = namespace["result"], namespace["exact"], namespace["peer"]
    assert (exact.states == peer.states).all()
    assert float(result.error) < 0.2  # the noise floor is 16 * 0.1^2 = 0.16
