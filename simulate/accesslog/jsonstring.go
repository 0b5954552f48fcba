package accesslog

// JSON strings: the scan that finds their ends, a block of 8, 16 or 32 bytes at a time, and
// their escapes.

import (
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// str parses a string at sc.i. Strings without escapes are substrings of the line.
func (sc *jsonScan) str() (string, error) {
	if sc.i >= len(sc.s) || sc.s[sc.i] != '"' {
		return "", sc.errAt("want a string")
	}
	start := sc.i + 1
	j := plainEnd(sc.s, start)
	switch {
	case j == len(sc.s):
		sc.i = j
		return "", sc.errAt("unterminated string")
	case sc.s[j] == '"':
		sc.i = j + 1
		return sc.s[start:j], nil
	case sc.s[j] == '\\':
		return sc.escaped(start)
	}
	sc.i = j
	return "", sc.errAt("control character in string")
}

// skipStr skips a string at sc.i (which is '"') that the parser does not store: it checks it
// as str does, failing with str's errors, but decodes no escape.
func (sc *jsonScan) skipStr() error {
	j := sc.i + 1
	for {
		j = plainEnd(sc.s, j)
		switch {
		case j == len(sc.s) || (sc.s[j] == '\\' && j+1 == len(sc.s)):
			sc.i = len(sc.s)
			return sc.errAt("unterminated string")
		case sc.s[j] == '"':
			sc.i = j + 1
			return nil
		case sc.s[j] != '\\':
			sc.i = j
			return sc.errAt("control character in string")
		}
		switch sc.s[j+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j += 2
		case 'u':
			// A surrogate pair is two escapes that each pass alone, as escaped finds.
			if _, ok := hex4(sc.s, j+2); !ok {
				sc.i = j + 2
				return sc.errAt(`bad \u escape`)
			}
			j += 6
		default:
			sc.i = j + 1
			return sc.errAt("bad escape")
		}
	}
}

// plainEnd returns the index of the first byte of s from i on that ends a plain run of a JSON
// string (a quote, a backslash or a control character), or len(s). It tests sixteen bytes at a
// time where it can (plainBlocks), else eight: a line's strings (tokens, IDs, paths) are most of
// its bytes. A string's end is mostly well before the line's, so the blocks seldom stop short.
func plainEnd(s string, i int) int {
	if i = plainBlocks(s, i); i < len(s) && isSpecial(s[i]) {
		return i
	}
	for ; i+8 <= len(s); i += 8 {
		if m := stringSpecials(stringWord(s, i)); m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(s); i++ {
		if isSpecial(s[i]) {
			return i
		}
	}
	return i
}

// isSpecial reports whether c ends a plain run of a JSON string: a quote, a backslash or a
// control character.
func isSpecial(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }

// stringWord is the eight bytes of s from i, little-endian; the compiler makes it one load.
func stringWord(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// stringSpecials marks the bytes of v, a word of a JSON string, that end a plain run: a
// quote, a backslash or a control character. It tests all eight bytes at once with the bit
// tricks for "has a zero byte" and "has a byte less than n" (Hacker's Delight): the result
// is 0 exactly when no byte qualifies, and otherwise its lowest set bit is the high bit of
// the first qualifying byte (higher bits may be wrong, so only the lowest is used). Flipping
// bit 1 of every byte turns the quote (0x22) into 0x20 and keeps control characters below it,
// so one "less than 0x21" test finds both.
func stringSpecials(v uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quoteOrControl, backslash := v^(ones*0x02), v^(ones*'\\')
	return ((quoteOrControl-ones*0x21)&^quoteOrControl | (backslash-ones)&^backslash) & highs
}

// escaped decodes a string with escapes, starting after its opening quote.
func (sc *jsonScan) escaped(start int) (string, error) {
	var b strings.Builder
	j := start
	for j < len(sc.s) {
		c := sc.s[j]
		switch {
		case c == '"':
			sc.i = j + 1
			return b.String(), nil
		case c < 0x20:
			sc.i = j
			return "", sc.errAt("control character in string")
		case c != '\\':
			b.WriteByte(c)
			j++
			continue
		}
		if j+1 >= len(sc.s) {
			break
		}
		e := sc.s[j+1]
		j += 2
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := hex4(sc.s, j)
			if !ok {
				sc.i = j
				return "", sc.errAt(`bad \u escape`)
			}
			j += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(sc.s, j+2); ok && j+1 < len(sc.s) && sc.s[j] == '\\' && sc.s[j+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						j += 6
					}
				}
			}
			b.WriteRune(r)
		default:
			sc.i = j - 1
			return "", sc.errAt("bad escape")
		}
	}
	sc.i = len(sc.s)
	return "", sc.errAt("unterminated string")
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s[i:i+4], 16, 32)
	return rune(v), err == nil
}

// quoteBits marks where a line's quotes are, a bit a byte (bit j of word k for byte 64k+j), for
// lines shorter than 64 words of 64 bytes, 4,096 bytes: longer than nearly any access log's line.
type quoteBits [64]uint64

// fill marks the quotes of s, which must be shorter than 4,096 bytes, and reports whether s has
// neither a backslash nor a control character: only then do its quotes alone end its strings.
// quoteBlocksOf marks the whole 16-byte blocks from the start, where it has a SIMD version
// (amd64, little-endian: its 16-bit masks are the words' bits in order), and covers nothing
// elsewhere; the bytes after the blocks are marked one at a time here. Every bit of the words s
// spans is written, so that next finds no quote of an earlier, longer line.
func (q *quoteBits) fill(s string) bool {
	n, special := quoteBlocksOf(s, (*uint16)(unsafe.Pointer(q)))
	if special {
		return false
	}
	// Bits of the blocks' last word past them, and the words after it, are an earlier line's.
	w := n / 64
	q[w] &= 1<<(n%64) - 1
	for k := w + 1; k <= (len(s)-1)/64; k++ {
		q[k] = 0
	}
	for i := n; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			q[uint(i)/64] |= 1 << (uint(i) % 64)
		case c == '\\' || c < 0x20:
			return false
		}
	}
	return true
}

// next returns the index of the first quote at or after i in the line of n bytes that q was
// filled with, or n if there is none.
func (q *quoteBits) next(i, n int) int {
	if i >= n {
		return n
	}
	w := uint(i) / 64
	if x := q[w] >> (uint(i) % 64); x != 0 {
		return i + bits.TrailingZeros64(x)
	}
	for w++; int(w*64) < n; w++ {
		if q[w] != 0 {
			return int(w*64) + bits.TrailingZeros64(q[w])
		}
	}
	return n
}
