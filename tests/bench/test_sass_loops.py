"""bench/experiments/sass_loops.py reads `cuobjdump -sass` text: its parser and loop
finder on a hand-written listing (no cuobjdump needed)."""

from __future__ import annotations

from bench.experiments.sass_loops import describe, mma_loops, parse_sass

LISTING = """
	code for sm_90
		Function : kernel_a
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                       /* 0x00000a00ff017b82 */
                                                                                /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                           /* 0x0000000000007919 */
        /*0020*/                   HMMA.16816.F32 R4, R8.reuse, R12, R4 ;       /* 0x0000000c0804723c */
        /*0030*/                   LDSM.16.M88.4 R8, [R2+0x100] ;               /* 0x000100000208783b */
        /*0040*/              @!P0 BRA 0x70 ;                                   /* 0x0000000000088947 */
        /*0050*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R6.64] ; /* 0x0000000006037fae */
        /*0060*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                /* 0x0000000000007b1d */
        /*0070*/               @P1 BRA 0x20 ;                                   /* 0xfffffffc00e81947 */
        /*0080*/                   IADD3 R0, R0, 0x1, RZ ;                      /* 0x0000000100007810 */
        /*0090*/               @P2 BRA 0x80 ;                                   /* 0xfffffffc00f82947 */
        /*00a0*/                   EXIT ;                                       /* 0x000000000000794d */
		Function : kernel_b
        /*0000*/                   HGMMA.64x64x16.F32 R24, R56, gdesc[UR16], R24 ; /* 0x00e0001038187df0 */
        /*0010*/                   BRA 0x0 ;                                    /* 0xfffffffc00fc7947 */
"""


def test_the_listing_parses_into_functions_and_opcodes():
    functions = parse_sass(LISTING)
    assert list(functions) == ["kernel_a", "kernel_b"]
    a = functions["kernel_a"]
    assert [i.address for i in a] == list(range(0, 0xB0, 0x10))
    assert [i.opcode for i in a][:5] == ["LDC", "S2R", "HMMA", "LDSM", "BRA"]
    assert a[4].text == "@!P0 BRA 0x70"  # the guard stays in the text, not in the opcode


def test_only_backward_branches_around_an_mma_are_loops():
    functions = parse_sass(LISTING)
    loops = mma_loops(functions["kernel_a"])
    # 0x70 -> 0x20 holds an HMMA; 0x90 -> 0x80 does not; 0x40 -> 0x70 goes forward.
    assert [(loop.start, len(loop.body)) for loop in loops] == [(0x20, 6)]
    loop = loops[0]
    assert loop.mmas() == 1 and loop.counts()["BRA"] == 2
    assert loop.order() == "MLbG|b"
    text = describe(loop, order=True)
    assert "6 instructions, 1 MMA, 2 branches" in text and text.splitlines()[-1].strip() == "MLbG|b"
    (hgmma,) = mma_loops(functions["kernel_b"])
    assert hgmma.start == 0 and hgmma.order() == "Mb"


def test_min_body_reports_loops_without_an_mma_too():
    """--min-body: every loop of at least that many instructions, MMA or not (a variant
    built without its MMAs, e.g. decode_variants' no_tensor_ops, has none to find)."""
    functions = parse_sass(LISTING)
    assert [(loop.start, len(loop.body)) for loop in mma_loops(functions["kernel_a"], min_body=2)] == [
        (0x20, 6), (0x80, 2)]  # fmt: skip
    assert [loop.start for loop in mma_loops(functions["kernel_a"], min_body=3)] == [0x20]
