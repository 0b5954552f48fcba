//go:build !purego

package accesslog

import "golang.org/x/sys/cpu"

// plainBlocks returns the index of the first byte of s from i on that ends a plain run of a
// JSON string (as plainEnd), looking at whole 16-byte blocks only: when none of the blocks that
// fit in s from i has one, it returns the start of the first block that does not fit, for
// plainEnd to finish. It is plainend_amd64.s, with SSE2, which every amd64 processor has: a
// block costs about a third of the instructions of two eight-byte words in Go (stringSpecials),
// whose constants the compiler loads again for every word.
//
//go:noescape
func plainBlocks(s string, i int) int

// quoteBlocks marks the quotes of each whole 16-byte block of s, from its start, in a 16-bit
// mask a block stored at bits and on (bit j of the k-th mask for byte 16k+j), and reports the
// bytes the blocks cover and whether any of them is a backslash or a control character. It is
// plainend_amd64.s, with SSE2; quoteBits finishes the line.
//
//go:noescape
func quoteBlocks(s string, bits *uint16) (n int, special bool)

// quoteBlocksAVX2 is quoteBlocks 32 bytes at a time, with AVX2 (plainend_amd64.s).
//
//go:noescape
func quoteBlocksAVX2(s string, bits *uint16) (n int, special bool)

// hasAVX2 says quoteBlocksOf may use quoteBlocksAVX2.
var hasAVX2 = cpu.X86.HasAVX2

// quoteBlocksOf is quoteBlocksAVX2 where the processor has AVX2, else quoteBlocks.
func quoteBlocksOf(s string, bits *uint16) (n int, special bool) {
	if hasAVX2 {
		return quoteBlocksAVX2(s, bits)
	}
	return quoteBlocks(s, bits)
}
