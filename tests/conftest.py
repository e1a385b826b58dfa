"""Shared pytest configuration."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cuda: runs on the numba.cuda back end (its simulator unless "
        "NUMBA_ENABLE_CUDASIM is set; `pytest -m cuda` alone on a GPU machine)")
