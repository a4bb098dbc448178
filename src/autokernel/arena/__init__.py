"""The arena: KernelBench levels end to end (``autokernel arena``).

discovery.py  which problem files, which solution file for each
judge.py      judge one solution: at the file's sizes (timed on a GPU) and at held-out sizes
scoring.py    correctness and fast_p from the results (pure arithmetic)
store.py      one results JSON per problem in the output directory (resumable)
report.py     the 80-column table, report.md and the sorted speedup plot
run.py        the whole run: judge (or optimize, then judge) every problem, resumably
"""
