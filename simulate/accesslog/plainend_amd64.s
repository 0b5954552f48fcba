//go:build !purego

#include "textflag.h"

// Sixteen copies of a byte each, loaded whole: '"', '\\' and 0x1f, the last control character.
DATA quotes<>+0(SB)/8, $0x2222222222222222
DATA quotes<>+8(SB)/8, $0x2222222222222222
GLOBL quotes<>(SB), RODATA|NOPTR, $16
DATA backslashes<>+0(SB)/8, $0x5c5c5c5c5c5c5c5c
DATA backslashes<>+8(SB)/8, $0x5c5c5c5c5c5c5c5c
GLOBL backslashes<>(SB), RODATA|NOPTR, $16
DATA controls<>+0(SB)/8, $0x1f1f1f1f1f1f1f1f
DATA controls<>+8(SB)/8, $0x1f1f1f1f1f1f1f1f
GLOBL controls<>(SB), RODATA|NOPTR, $16

// func plainBlocks(s string, i int) int
//
// For each 16-byte block of s from i: X4 marks its quotes, backslashes and control characters
// (bytes of at most 0x1f, those whose maximum with 0x1f is 0x1f), PMOVMSKB gathers the marks
// into a bit a byte, and the lowest set bit is the first such byte.
TEXT ·plainBlocks(SB), NOSPLIT, $0-32
	MOVQ	s_base+0(FP), SI
	MOVQ	s_len+8(FP), BX
	MOVQ	i+16(FP), CX
	MOVOU	quotes<>(SB), X1
	MOVOU	backslashes<>(SB), X2
	MOVOU	controls<>(SB), X3

block:
	LEAQ	16(CX), DX
	CMPQ	DX, BX
	JHI	short // the block does not fit (or i is past len(s)): plainEnd goes on from i
	MOVOU	(SI)(CX*1), X0
	MOVOU	X0, X4
	PCMPEQB	X1, X4
	MOVOU	X0, X5
	PCMPEQB	X2, X5
	POR	X5, X4
	PMAXUB	X3, X0
	PCMPEQB	X3, X0
	POR	X0, X4
	PMOVMSKB	X4, AX
	TESTL	AX, AX
	JNZ	found
	MOVQ	DX, CX
	JMP	block

found:
	BSFL	AX, AX
	ADDQ	AX, CX

short:
	MOVQ	CX, ret+24(FP)
	RET

// func quoteBlocks(s string, bits *uint16) (n int, special bool)
//
// For each whole 16-byte block of s, from its start: PMOVMSKB gathers the block's quotes into a
// 16-bit mask, stored at bits and on, a mask a block; the block's backslashes and control
// characters are ORed into X6, which says at the end whether any block had one. n is the bytes
// the blocks cover.
TEXT ·quoteBlocks(SB), NOSPLIT, $0-33
	MOVQ	s_base+0(FP), SI
	MOVQ	s_len+8(FP), BX
	MOVQ	bits+16(FP), DI
	MOVOU	quotes<>(SB), X1
	MOVOU	backslashes<>(SB), X2
	MOVOU	controls<>(SB), X3
	PXOR	X6, X6
	XORQ	CX, CX

qblock:
	LEAQ	16(CX), DX
	CMPQ	DX, BX
	JHI	qdone
	MOVOU	(SI)(CX*1), X0
	MOVOU	X0, X4
	PCMPEQB	X1, X4
	PMOVMSKB	X4, AX
	MOVW	AX, (DI)
	ADDQ	$2, DI
	MOVOU	X0, X5
	PCMPEQB	X2, X5
	POR	X5, X6
	PMAXUB	X3, X0
	PCMPEQB	X3, X0
	POR	X0, X6
	MOVQ	DX, CX
	JMP	qblock

qdone:
	PMOVMSKB	X6, AX
	TESTL	AX, AX
	SETNE	special+32(FP)
	MOVQ	CX, n+24(FP)
	RET

// func quoteBlocksAVX2(s string, bits *uint16) (n int, special bool)
//
// quoteBlocks with AVX2: 32 bytes a step, their two masks stored as one 32-bit word, and a last
// 16-byte block, if there is one, with the same instructions on the lower half of the registers.
TEXT ·quoteBlocksAVX2(SB), NOSPLIT, $0-33
	MOVQ	s_base+0(FP), SI
	MOVQ	s_len+8(FP), BX
	MOVQ	bits+16(FP), DI
	VPBROADCASTB	quotes<>(SB), Y1
	VPBROADCASTB	backslashes<>(SB), Y2
	VPBROADCASTB	controls<>(SB), Y3
	VPXOR	Y6, Y6, Y6
	VPXOR	X8, X8, X8
	XORQ	CX, CX

pair:
	LEAQ	32(CX), DX
	CMPQ	DX, BX
	JHI	half
	VMOVDQU	(SI)(CX*1), Y0
	VPCMPEQB	Y1, Y0, Y4
	VPMOVMSKB	Y4, AX
	MOVL	AX, (DI)
	ADDQ	$4, DI
	VPCMPEQB	Y2, Y0, Y5
	VPOR	Y5, Y6, Y6
	VPMAXUB	Y3, Y0, Y7
	VPCMPEQB	Y3, Y7, Y7
	VPOR	Y7, Y6, Y6
	MOVQ	DX, CX
	JMP	pair

half:
	LEAQ	16(CX), DX
	CMPQ	DX, BX
	JHI	adone
	VMOVDQU	(SI)(CX*1), X0
	VPCMPEQB	X1, X0, X4
	VPMOVMSKB	X4, AX
	MOVW	AX, (DI)
	VPCMPEQB	X2, X0, X5
	VPOR	X5, X8, X8
	VPMAXUB	X3, X0, X7
	VPCMPEQB	X3, X7, X7
	VPOR	X7, X8, X8
	MOVQ	DX, CX

adone:
	VPMOVMSKB	Y6, AX
	VPMOVMSKB	X8, DX
	ORL	DX, AX
	TESTL	AX, AX
	SETNE	special+32(FP)
	MOVQ	CX, n+24(FP)
	VZEROUPPER
	RET
