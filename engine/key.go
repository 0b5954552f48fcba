package engine

// KeyPrefix starts every store key the engine builds.
const KeyPrefix = "rl:"

// AppendKey appends to dst the store key for parts (for example a domain, a
// rule name and descriptor entries) and returns the extended slice. The key is
// KeyPrefix followed by the parts joined with ':', each part escaped so that
// '%', ':', '{' and '}' become %25, %3A, %7B and %7D. Hence distinct part lists
// give distinct keys, and no descriptor value can open a Redis Cluster hash tag
// and so choose the key's slot: the slot is a hash of the whole key. All the
// limits of one key live in its one hash, so they share a slot by
// construction. AppendKey does not allocate when dst has room.
func AppendKey(dst []byte, parts ...string) []byte {
	dst = append(dst, KeyPrefix...)
	for i, p := range parts {
		if i > 0 {
			dst = append(dst, ':')
		}
		dst = appendEscaped(dst, p)
	}
	return dst
}

// Key returns AppendKey(nil, parts...) as a string.
func Key(parts ...string) string {
	var buf [128]byte
	return string(AppendKey(buf[:0], parts...))
}

func appendEscaped(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	last := 0
	for i := 0; ; i++ {
		i = skipPlain(s, i)
		for i < len(s) && !escapes(s[i]) {
			i++
		}
		if i == len(s) {
			return append(dst, s[last:]...)
		}
		c := s[i]
		dst = append(dst, s[last:i]...)
		dst = append(dst, '%', hex[c>>4], hex[c&15])
		last = i + 1
	}
}

// escapes reports whether AppendKey escapes byte c: one load, where four comparisons were a
// fifth of the cost of building a key.
func escapes(c byte) bool { return escapedBytes[c] }

var escapedBytes = [256]bool{'%': true, ':': true, '{': true, '}': true}

// skipPlain returns i advanced by eight bytes at a time over s while none of the eight is
// one AppendKey escapes: keys are built for every decision, and most of their bytes need no
// escape. It tests eight bytes at once with the "has a zero byte" trick (Hacker's Delight) on
// the word xor each escaped byte.
func skipPlain(s string, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		w := s[i : i+8] // of known length, so the compiler makes the eight loads one
		v := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		a, b, c, d := v^(ones*'%'), v^(ones*':'), v^(ones*'{'), v^(ones*'}')
		if ((a-ones)&^a|(b-ones)&^b|(c-ones)&^c|(d-ones)&^d)&highs != 0 {
			return i
		}
	}
	return i
}
