"""tools/env_peers.py's pure parts: the ratios, the table, what is missing (no peer is installed here)."""

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("env_peers", Path(__file__).resolve().parent.parent / "tools" / "env_peers.py")
env_peers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(env_peers)


def test_ratios_divide_ours_by_each_measured_peer():
    puffer, jumanji = env_peers.PEERS
    results = {puffer: 8e6, jumanji: 1e6, "VecSnake features (1 thread)": 4e6, "VecSnake grid (1 thread)": None}
    assert env_peers.ratios(results) == {"VecSnake features (1 thread)": {puffer: 0.5, jumanji: 4.0}}
    assert env_peers.ratios({jumanji: None, "VecSnake grid (2 threads)": 3.0}) == {"VecSnake grid (2 threads)": {}}
    text = env_peers.table(results, {puffer: 1e5})
    assert "0.50x" in text and "4.00x" in text and "not measured" in text


def test_missing_names_absent_packages():
    assert env_peers.missing(("torch", "surely-not-a-package-xyz")) == ["surely-not-a-package-xyz"]
