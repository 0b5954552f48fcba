//go:build !amd64 || purego

package accesslog

// plainBlocks skips nothing where there is no assembly version: plainEnd tests every word.
func plainBlocks(s string, i int) int { return i }

// quoteBlocksOf covers nothing where there is no assembly version: quoteBits.fill tests every
// byte.
func quoteBlocksOf(s string, bits *uint16) (n int, special bool) { return 0, false }
