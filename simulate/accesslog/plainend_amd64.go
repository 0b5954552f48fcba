//go:build !purego

package accesslog

// plainBlocks returns the index of the first byte of s from i on that ends a plain run of a
// JSON string (as plainEnd), looking at whole 16-byte blocks only: when none of the blocks that
// fit in s from i has one, it returns the start of the first block that does not fit, for
// plainEnd to finish. It is plainend_amd64.s, with SSE2, which every amd64 processor has: a
// block costs about a third of the instructions of two eight-byte words in Go (stringSpecials),
// whose constants the compiler loads again for every word.
//
//go:noescape
func plainBlocks(s string, i int) int
