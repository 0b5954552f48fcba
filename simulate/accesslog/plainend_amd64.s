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
