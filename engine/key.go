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
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%', ':', '{', '}':
			dst = append(dst, s[last:i]...)
			dst = append(dst, '%', hex[c>>4], hex[c&15])
			last = i + 1
		}
	}
	return append(dst, s[last:]...)
}
