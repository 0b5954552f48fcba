//go:build !purego

package accesslog

import (
	"math/rand/v2"
	"testing"
	"unsafe"
)

// Both assembly versions of quoteBlocks, SSE2 and AVX2 (where the processor has it), mark every
// quote of every whole 16-byte block and nothing else, cover the blocks and no more, and find a
// backslash or a control character in any of them, at any place, but not in the bytes after.
func TestQuoteBlocks(t *testing.T) {
	impls := map[string]func(string, *uint16) (int, bool){"sse2": quoteBlocks}
	if hasAVX2 {
		impls["avx2"] = quoteBlocksAVX2
	} else {
		t.Log("no AVX2 here: only the SSE2 version is tested")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for name, blocks := range impls {
		for n := range 300 {
			b := make([]byte, n)
			for i := range b {
				b[i] = "a \"\x7f\xff"[rng.IntN(5)] // a space, DEL and a high byte are plain
			}
			var q quoteBits
			masks := (*[4 * len(quoteBits{})]uint16)(unsafe.Pointer(&q))
			covered, special := blocks(string(b), &masks[0])
			if covered != n/16*16 || special {
				t.Fatalf("%s: length %d: covered %d, special %v; want %d, false", name, n, covered, special, n/16*16)
			}
			for i := range covered {
				if got, want := masks[i/16]>>(i%16)&1 == 1, b[i] == '"'; got != want {
					t.Fatalf("%s: length %d: byte %d (%q) marked %v", name, n, i, b[i], got)
				}
			}
			for _, c := range []byte{'\\', 0, '\t', 0x1f} {
				for at := range n {
					s := string(b[:at]) + string(c) + string(b[at+1:])
					if _, special := blocks(s, &masks[0]); special != (at < covered) {
						t.Fatalf("%s: length %d: %q at %d: special %v", name, n, c, at, special)
					}
				}
			}
		}
	}
}
