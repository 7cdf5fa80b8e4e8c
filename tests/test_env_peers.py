"""tools/env_peers.py's pure parts: the ratios, the table, what is missing (no peer is installed here)."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("env_peers", Path(__file__).resolve().parent.parent / "tools" / "env_peers.py")
env_peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(env_peers)


def test_ratios_divide_ours_by_each_measured_peer():
    puffer, board, jumanji = env_peers.PEERS
    results = {puffer: 8e6, board: None, jumanji: 1e6, "VecSnake features (1 thread)": 4e6,
               "VecSnake grid (1 thread)": None}
    assert env_peers.ratios(results) == {"VecSnake features (1 thread)": {puffer: 0.5, jumanji: 4.0}}
    assert env_peers.ratios({jumanji: None, "VecSnake grid (2 threads)": 3.0}) == {"VecSnake grid (2 threads)": {}}
    text = env_peers.table(results, {puffer: 1e5})
    assert "0.50x" in text and "4.00x" in text and "not measured" in text


def test_pufferlib_settings_read_its_ini_and_the_course_board(tmp_path):
    (tmp_path / "snake.ini").write_text("[env]\nnum_envs = 4\nwidth = 640\nheight = 360\nnum_snakes = 256\n"
                                        "num_food = 4096\nvision = 5\nleave_corpse_on_death = True\n"
                                        "reward_food = 0.1\nreward_corpse = 0.1\nreward_death = -1.0\n")
    default = env_peers.puffer_settings(tmp_path, "default", 16384)
    assert default == dict(n=4, snakes=256, width=640, height=360, food=4096, vision=5, corpses=1, max_len=1024,
                           reward_food=0.1, reward_corpse=0.1, reward_death=-1.0)
    board = env_peers.puffer_settings(tmp_path, "10 x 10", 16384)
    assert (board["n"], board["snakes"], board["width"] - 2 * board["vision"], board["max_len"]) == (16384, 1, 10, 100)


def test_missing_names_absent_packages():
    assert env_peers.missing(("torch", "surely-not-a-package-xyz")) == ["surely-not-a-package-xyz"]
