"""Every size threshold, limit and count chosen by measurement, in one place, each with
the measurement behind it (2-core AMD EPYC VM unless said otherwise).

The modules that use a constant import it by name; a test that changes one sets it on
the module that reads it. The numba tier compiles some of them into its kernels, so
this module is part of the kernel cache's digest (kernels/cache.py): changing a value
recompiles the kernels, as changing a kernel would.
"""

# ---- recording (tape.py) -------------------------------------------------------------

# When a tape holds this much, the next op whose operands are all leaves or constants
# (where a new iteration of a loop usually starts) opens a new tape; no value needs to
# be imported there, so the old tape dies with its results.
MAX_ROWS = 1 << 18
MAX_ARRAY_BYTES = 1 << 28
# ... or this many of its largest rows, if more: one expression on large arrays stays on
# one tape (a graph split over tapes sweeps each apart, its adjoints copied between them:
# a 10^7-element expression peaked at twice the memory)
ROWS_OF_THE_LARGEST = 16
# A single expression that keeps growing is split here (with an IMPORT row).
HARD_ROWS_FACTOR = 4
# rows staged as Python ints before they move into an int64 chunk (a sweep converts at
# most this many)
FLUSH_ROWS = 4096
# elements: a captured constant this small is compared with its recorded value by bytes
# (a copy and a memcmp, ~150-650 ns at 16-1024 elements) rather than by bits_equal's
# kernel (~450-770 ns: its dispatch); larger, the kernel (4096: 2.0 us against 2.3)
BYTES_COMPARE_MAX = 1024

# ---- eager sweeps (engine.py, executor.py, parallel.py, memory.py) --------------------

RECYCLE_MIN = 1 << 19            # adjoint elements: below this (4 MiB) no space is reused
OWN_BUFFER_MIN = 4096            # elements: a leaf this large gets its gradient in place
KEEP_SWEEP_SCRATCH_BYTES = 16 << 20   # sweep scratch kept between sweeps
# elements: a run of elementwise rows this large is swept tile by tile (kernels/sweep.py
# segment_vjp): below it the adjoints already stay in cache, and the stop costs more
FUSE_MIN = 1 << 16
# elements: from here a replay leaves an elementwise row or a sum to the eager forward's
# functions (numpy's, on threads), and a compiled function runs its recording like eager
# code rather than as a lean program (per element: measured 2.5x faster at 4000 elements,
# 7x at 64,000, level at 1000; compile.py)
NUMPY_ROW_MIN = 1 << 11
PARALLEL_MIN = 1 << 18           # elements: below this an op runs on the calling thread
KEEP_BYTES = 512 << 20           # freed memory the allocator may keep while busy
MMAP_BYTES = 32 << 20            # glibc's largest mmap threshold on 64-bit systems
IDLE_SECONDS = 1.0               # idle time after which freed memory goes back
# points: from here an FFT runs as the four-step algorithm (n1 transforms of length n2,
# twiddles, a transpose; the short ones fit the cache and run on autotape's threads):
# 2^20 points took 26 ms rather than 30 on one thread, 14 rather than 30 on two
FOUR_STEP_MIN = 1 << 16
BLAS_MIN_FLOPS = 4096            # a matmul below this runs as loops, not a library call
SPARSE_LANES_RATIO = 8           # a tangent block sparser than 1 in this runs lane-sparse

# ---- compiled programs (compile.py, program.py, kernels/program.py) -------------------

WARN_AFTER_RECORDINGS = 8        # recordings forced by guards before the warning
# elements: a recording with a time-stepping loop runs like eager code from rows this
# large: a 1-D heat loop, value + gradient, lean with its body compiled against
# eager-like, was 20.6 vs 36.4 ms at 4096 cells x 500 steps, level at 16,384 x 200,
# 35.1 vs 27.5 ms at 65,536 x 50
LOOP_WIDE_MIN = 1 << 15
KEEP_LIVE_BYTES = 16 << 20       # reach marks (outputs x instructions) kept between calls
KEEP_PROGRAM_SCRATCH_BYTES = 64 << 20   # a thread's scratch for one-thread runs
# runs: a loop body's gather or scatter whose index array repeats a pattern of at most
# this many runs (of consecutive or repeated elements) is written as plain loops over
# them (kernels/index_runs.py): the 2-D reaction-diffusion's reverse, its two rolls'
# gathers and scatters by index array ~545 us of 1380
INDEX_PATTERN_MAX = 4
# elements: ... and whose runs average this many or more: shorter ones (a stiff solve's
# 2 x 2 pieces) save no indexed load worth a loop's nesting, in bodies numba already
# takes minutes to compile (the Rodas4 test's chunk driver: over 13 minutes, either way)
INDEX_RUN_MEAN_MIN = 8
# A loop's body is compiled (a few seconds, beside the calls; then cached on disk) once a
# program has run this many times: a function called once needs no compiler.
COMPILE_LOOP_AFTER = 2
# A loop settles (kernels/settling.py) only where the instructions before it number at
# most this many: their active slots are marked in Python (~3 us an instruction), once
SETTLE_BEFORE_MAX = 20000
# seconds between a call's looks for code compiling beside the calls (a look costs ~30
# us: the cache's paths and marks; the epidemic's interpreted call ~55 us)
LOOK_EVERY = 0.02
# points a chunk of a compiled loop body needs, or its points run one at a time (vmap of an
# adaptive solve, 2 points a chunk: 325 us a point, every point running all 300 attempts;
# one at a time, each stopping once settled: ~100 us)
POINTS_CHUNK_MIN = 4
# instructions a repetition, at most, of a loop body whose points go through it in chunks;
# a larger body's points go one at a time, and its chunk-of-points kernels are never
# compiled: numba took 151 s for a Rodas4 body's (372 instructions) chunk forward against
# 23 s for its one-point forward, and its chunk driver over 13 minutes. The zoo's bodies
# have up to 56; the adaptive solvers' 270 and more (they settle at their own attempts,
# which a chunk waits for: one at a time suits them anyway)
POINTS_BODY_MAX = 128
GENERATED_SLICE = 64             # points per thread, at least, in generated kernels
GENERATED_SCRATCH_BYTES = 4 << 20   # states a thread keeps for a generated reverse sweep
# an elementwise operand that is a gather is read at its sources in up to this many
# contiguous pieces (a roll: 2); more, and the gather runs first
MAX_PIECES = 4
# A broadcast operand's adjoint over LANES_MIN cells or more is summed in LANES partial
# sums by every runner (the same bits everywhere); over fewer (an ODE's 2 states), one
# after another: lanes there cost the Lotka-Volterra gradient ~10%. 8 lanes, not 4:
# a sum over 126 cells 1.5x faster (kernels/program.py, lane_sum, written out for 8)
LANES, LANES_MIN = 8, 16

# A Jacobian by forward mode (jacfwd, hessian) takes a lane per colour of the inputs
# (sparsity.py) from this many inputs, where the colours are at most half of them, and
# where the program is short enough to analyse at its first use (~15 us an instruction)
COMPRESS_MIN_INPUTS = 8
COMPRESS_MAX_INSTRUCTIONS = 4000

# ---- loops found in a program and generated code (kernels/loops.py, codegen.py) -------

MIN_REPEATS = 4                  # repetitions a loop needs
MIN_COVERED = 256                # instructions a loop must cover to be worth compiling
CANDIDATES = 64                  # periods tried
MAX_PERIOD = 512                 # instructions in a body: longer ones (at.jit of array
                                 # code written element by element) take minutes to compile
# at.jit's cells written one by one rolled back into array instructions (reroll.py):
MIN_CELLS = 8                    # like groups of instructions a run needs
MAX_GROUP = 256                  # instructions a group (one cell's) may hold
PERIODS = 64                     # group sizes tried
MIN_RUN = 2                      # instructions a fused run needs (benchmarks set it past
                                 # any body's length to time the unfused code beside)
# elementwise instructions over fewer cells are never cut like a stencil's boundary
# pieces (kernels/pieces.py): a 16-cell spring chain cut so took 7% longer (a boundary
# line an instruction in each direction against a short loop saved), a 96-cell heat
# step 6% less
PIECES_MIN_CELLS = 32
# Past these sizes a program runs on the interpreter kernel: numba's compile time grows
# faster than the code (a body of 207 element operations 19 s, of ~1000 (n-body) 413 s,
# with spills), and a thread's values spill out of registers.
MAX_STRAIGHT = 2000              # element operations outside a loop
MAX_BODY = 600                   # element operations in a loop body
MAX_CARRIED = 128                # values a repetition hands the next
MAX_LINES = 6000                 # lines of one generated module (numba takes ~3-5 ms a
                                 # line: Lorenz-96's 4700 lines 15-27 s, beside the calls)
MAX_LANES = 32                   # forward-mode lanes kept in registers
# bytes a point: up to this, the GPU's reverse sweep keeps every repetition's state (its
# forward steps run twice, as a hand-written adjoint's; checkpointed: three times). The
# 200-step pendulum keeps 3200 bytes: 65,536 points take 210 MB.
KEEP_ALL_BYTES = 4096
# a loop body whose instructions average this many cells or more runs on the CPU as its
# element loops (kernels/loops.py), not as generated scalar code (codegen.py), whose
# every cell is a statement: cubic oscillators' gradients (15 instructions a step, 400
# steps), generated against element loops, 16 cells 31 us against 36, 24 cells 51
# against 44, 32 cells 69 against 49; Lorenz-96 (40 cells cut into pieces by its rolls:
# 11.8 on average) 38 against 89, the neural ODE (16.2) 39 against 79. A body with a
# gather or a scatter stays generated (program.py ``_wide_body``). A GPU's thread a
# point runs generated code all the same.
GENERATED_CELLS_MAX = 20
# doubles: a one-output program's one-point kernel (codegen.py run_one) allocates its
# scratch up to this itself (the epidemic's 11 kB: ~0.2 us less than the thread's)
OWN_SCRATCH_MAX = 8192

# ---- the GPU (gpu.py, codegen.py, kernels/gpu.py, device_kernels.py) ------------------

GENERATED_THREADS = 128          # threads per block of a generated program kernel
INTERPRETER_THREADS = 128        # threads per block of the interpreter kernel
DEVICE_THREADS = 256             # threads per block of a device tensor's kernels
SCRATCH_BYTES = 4 << 30          # device memory for the points' slots, per launch

# ---- at.jit (jit.py, jit_python.py) ---------------------------------------------------

START_ROWS = 1 << 12             # rows a recording buffer starts with
KEEP_PROGRAMS = 64               # recordings kept per function (per shapes and data)
# rows: a recording this long is swept compiled even before a helper has compiled the
# sweep (Python sweeps ~5 us a row; compiling it takes ~2 s)
PYTHON_SWEEP_MAX = 200_000
KEEP_TAPE_BYTES = 16 << 20       # a thread keeps tape buffers up to this for its next call
PYTHON_ROWS_MAX = 1_000_000      # rows the Python recorder takes before it gives up

# ---- the simulation toolkit (implicit.py, integrate.py, sparse.py) --------------------

DENSE_MAX = 2000                 # unknowns: above this, df/dx is applied matrix-free
UNROLLED_MAX = 12                # states up to which a compiled Rosenbrock step factorises
                                 # W with elementwise ops (lean code); above, the dense solve
MAX_DEPENDENCIES = 512           # inputs one element may depend on before the sparsity
                                 # pattern is taken as dense (colouring gains nothing)

# ---- the compiler (kernels/cache.py, warmup.py) ----------------------------------------

NOTICE_AFTER = 1.0               # seconds of compiling before the one line on stderr
WAIT_FOR_OTHERS = 300.0          # longest wait for another process's compile
BACKGROUND_MIN_CORES = 2         # cores a machine needs for the background warmup
