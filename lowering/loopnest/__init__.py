"""What the loop-nest back ends (Numba CPU, numba.cuda) share: the schedule that decides fusion
and tiling (``schedule.py``), buffer planning (``buffers.py``), the scalar templates and
literals of generated code (``templates.py``), and the arrangement of a ``dot_general`` as a
batch of matrix products (``products.py``, which MLX uses too)."""
