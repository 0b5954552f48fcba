package accesslog

// This file is the JSON parser as it was before it was made faster (json.go at c83dddd), its
// names prefixed with oracle, and frozen: FuzzParseJSON checks that the parser returns exactly
// what it does, records, seen flags and errors alike. It shares only target.set and errJSON.

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// oracleParser reads one JSON object per line without reflection: it walks the object, decodes
// only the values whose keys it maps and skips the rest. Nested objects are entered only when a
// mapped key is a dotted path into them.
type oracleParser struct {
	keys *oracleIndex // shared by a reader's parsers, read only
	// nested records whether any mapped key is dotted, so plain logs skip objects quickly.
	nested bool
	ranks  fieldRanks // the current line's (target.set)
	// seen[i] says a line had a value for the mapped key of target.mapped i+1 (Reader.Unseen).
	seen []bool
}

// newOracleParser returns a parser of the keys of ix, of which mapped are --field mappings.
func newOracleParser(ix *oracleIndex, mapped int) *oracleParser {
	p := &oracleParser{keys: ix, seen: make([]bool, mapped)}
	for _, b := range ix.buckets {
		for _, e := range b {
			if strings.Contains(e.key, ".") {
				p.nested = true
			}
		}
	}
	return p
}

// oracleIndex finds the target of a log key. Every key of every line is looked up, most of them
// unmapped, so it avoids hashing the whole key as a map would: keys are bucketed by their length
// and first and last bytes, and a lookup compares the key with the bucket's few candidates.
// Header names also match in any case: folded holds them (oracleLower case) bucketed by the same
// rule, and a key that misses the exact lookup is compared with its folded bucket's candidates
// byte by byte, so a oracleLower-case log pays one more bucket look per unmapped key and no allocation.
type oracleIndex struct {
	buckets [128][]oracleTarget
	folded  [128][]oracleTarget
}

type oracleTarget struct {
	key string
	tg  target
}

func newOracleIndex(keys map[string]target) *oracleIndex {
	ix := new(oracleIndex)
	for k, tg := range keys {
		b := &ix.buckets[oracleKeyBucket(k)]
		*b = append(*b, oracleTarget{k, tg})
		if tg.fold {
			b := &ix.folded[oracleKeyBucket(k)]
			*b = append(*b, oracleTarget{k, tg})
		}
	}
	return ix
}

func oracleKeyBucket(k string) int {
	if k == "" {
		return 0
	}
	return oracleBucketOf(len(k), k[0], k[len(k)-1])
}

// oracleBucketOf is the bucket of a key of length n whose first and last bytes are first and last.
func oracleBucketOf(n int, first, last byte) int {
	return (n*31 + int(first)*7 + int(last)) & 127
}

func (ix *oracleIndex) find(k string) (target, bool) {
	for _, e := range ix.buckets[oracleKeyBucket(k)] {
		if e.key == k {
			return e.tg, true
		}
	}
	if k == "" {
		return target{}, false
	}
	// The bucket of k in oracleLower case.
	for _, e := range ix.folded[oracleBucketOf(len(k), oracleLower(k[0]), oracleLower(k[len(k)-1]))] {
		if oracleEqualLower(k, e.key) {
			return e.tg, true
		}
	}
	return target{}, false
}

func oracleLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// oracleEqualLower reports whether s in ASCII oracleLower case is l.
func oracleEqualLower(s, l string) bool {
	if len(s) != len(l) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if oracleLower(s[i]) != l[i] {
			return false
		}
	}
	return true
}

type oracleScan struct {
	s string
	i int
}

func (p *oracleParser) parse(line string, rec *Record) error {
	p.ranks.reset()
	sc := oracleScan{s: line}
	sc.ws()
	if sc.i >= len(sc.s) || sc.s[sc.i] != '{' {
		return fmt.Errorf("%w: want an object", errJSON)
	}
	if err := p.object(&sc, "", rec, 0); err != nil {
		return err
	}
	sc.ws()
	if sc.i != len(sc.s) {
		return fmt.Errorf("%w: trailing data at column %d", errJSON, sc.i+1)
	}
	return nil
}

// object parses an object at sc.i (which is '{'), storing mapped values. prefix is the dotted
// path of the object ("" at the top).
func (p *oracleParser) object(sc *oracleScan, prefix string, rec *Record, depth int) error {
	if depth > 32 {
		return fmt.Errorf("%w: nested too deeply", errJSON)
	}
	sc.i++ // '{'
	sc.ws()
	if sc.i < len(sc.s) && sc.s[sc.i] == '}' {
		sc.i++
		return nil
	}
	for {
		sc.ws()
		key, err := sc.str()
		if err != nil {
			return err
		}
		sc.ws()
		if sc.i >= len(sc.s) || sc.s[sc.i] != ':' {
			return sc.errAt("want ':'")
		}
		sc.i++
		sc.ws()
		if sc.i >= len(sc.s) {
			return sc.errAt("want a value")
		}
		path := key
		if prefix != "" {
			path = prefix + "." + key
		}
		switch c := sc.s[sc.i]; {
		case c == '"':
			v, err := sc.str()
			if err != nil {
				return err
			}
			if tg, ok := p.keys.find(path); ok {
				if tg.mapped > 0 {
					p.seen[tg.mapped-1] = true
				}
				if err := tg.set(rec, v, &p.ranks); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
			}
		case c == '{' && p.nested:
			if err := p.object(sc, path, rec, depth+1); err != nil {
				return err
			}
		case c == '{' || c == '[':
			if err := sc.skipComposite(); err != nil {
				return err
			}
		default:
			start := sc.i
			if err := sc.literal(); err != nil {
				return err
			}
			if tg, ok := p.keys.find(path); ok && sc.s[start] != 'n' {
				if tg.mapped > 0 {
					p.seen[tg.mapped-1] = true
				}
				if err := tg.set(rec, sc.s[start:sc.i], &p.ranks); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
			}
		}
		sc.ws()
		if sc.i >= len(sc.s) {
			return sc.errAt("unterminated object")
		}
		switch sc.s[sc.i] {
		case ',':
			sc.i++
		case '}':
			sc.i++
			return nil
		default:
			return sc.errAt("want ',' or '}'")
		}
	}
}

func (sc *oracleScan) errAt(msg string) error {
	return fmt.Errorf("%w at column %d: %s", errJSON, sc.i+1, msg)
}

func (sc *oracleScan) ws() {
	// Compact logs have no whitespace between tokens, so the first test usually ends it.
	for sc.i < len(sc.s) && sc.s[sc.i] <= ' ' {
		switch sc.s[sc.i] {
		case ' ', '\t', '\r', '\n':
			sc.i++
		default:
			return
		}
	}
}

// str parses a string at sc.i. Strings without escapes are substrings of the line.
func (sc *oracleScan) str() (string, error) {
	if sc.i >= len(sc.s) || sc.s[sc.i] != '"' {
		return "", sc.errAt("want a string")
	}
	start := sc.i + 1
	j := start
	// Skip eight plain bytes at a time: a line's strings (tokens, IDs, paths) are most of its
	// bytes, and this loop was the parser's largest cost.
	for j+8 <= len(sc.s) {
		if m := oracleSpecials(oracleWord(sc.s, j)); m != 0 {
			j += bits.TrailingZeros64(m) / 8 // the byte loop below starts at it
			break
		}
		j += 8
	}
	for ; j < len(sc.s); j++ {
		switch c := sc.s[j]; {
		case c == '"':
			sc.i = j + 1
			return sc.s[start:j], nil
		case c == '\\':
			return sc.escaped(start)
		case c < 0x20:
			sc.i = j
			return "", sc.errAt("control character in string")
		}
	}
	sc.i = len(sc.s)
	return "", sc.errAt("unterminated string")
}

// oracleWord is the eight bytes of s from i, little-endian; the compiler makes it one load.
func oracleWord(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// oracleSpecials marks the bytes of v, a word of a JSON string, that end a plain run: a
// quote, a backslash or a control character. It tests all eight bytes at once with the bit
// tricks for "has a zero byte" and "has a byte less than n" (Hacker's Delight): the result
// is 0 exactly when no byte qualifies, and otherwise its lowest set bit is the high bit of
// the first qualifying byte (higher bits may be wrong, so only the lowest is used).
func oracleSpecials(v uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := v^(ones*'"'), v^(ones*'\\')
	return ((quote-ones)&^quote | (backslash-ones)&^backslash | (v-ones*0x20)&^v) & highs
}

// escaped decodes a string with escapes, starting after its opening quote.
func (sc *oracleScan) escaped(start int) (string, error) {
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
			r, ok := oracleHex4(sc.s, j)
			if !ok {
				sc.i = j
				return "", sc.errAt(`bad \u escape`)
			}
			j += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := oracleHex4(sc.s, j+2); ok && j+1 < len(sc.s) && sc.s[j] == '\\' && sc.s[j+1] == 'u' {
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

func oracleHex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	v, err := strconv.ParseUint(s[i:i+4], 16, 32)
	return rune(v), err == nil
}

// literal skips a number, true, false or null, checking its characters loosely.
func (sc *oracleScan) literal() error {
	start := sc.i
	for sc.i < len(sc.s) {
		c := sc.s[sc.i]
		if (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '+' || c == '.' || c == 'E' {
			sc.i++
			continue
		}
		break
	}
	switch lit := sc.s[start:sc.i]; {
	case lit == "":
		return sc.errAt("want a value")
	case lit == "true", lit == "false", lit == "null":
		return nil
	case oracleIsSmallInt(lit):
		return nil // what ParseFloat would accept, without its cost: most numbers in logs
	case lit[0] == '-' || (lit[0] >= '0' && lit[0] <= '9'):
		if _, err := strconv.ParseFloat(lit, 64); err != nil {
			sc.i = start
			return sc.errAt("bad number")
		}
		return nil
	}
	sc.i = start
	return sc.errAt("want a value")
}

// oracleIsSmallInt reports whether lit is an optional '-' and 1 to 18 digits, a number ParseFloat
// accepts.
func oracleIsSmallInt(lit string) bool {
	digits := strings.TrimPrefix(lit, "-")
	if digits == "" || len(digits) > 18 {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// skipComposite skips an object or array, minding strings.
func (sc *oracleScan) skipComposite() error {
	depth := 0
	for sc.i < len(sc.s) {
		switch sc.s[sc.i] {
		case '{', '[':
			depth++
			if depth > 64 {
				return sc.errAt("nested too deeply")
			}
			sc.i++
		case '}', ']':
			depth--
			sc.i++
			if depth == 0 {
				return nil
			}
		case '"':
			if _, err := sc.str(); err != nil {
				return err
			}
		default:
			sc.i++
		}
	}
	return sc.errAt("unterminated value")
}

// oracleRFC3339UTC is fastRFC3339UTC before it read a field's digits two at a time
// (FuzzFastRFC3339UTC).
func oracleRFC3339UTC(s string) (int64, bool) {
	if len(s) < 20 || s[len(s)-1] != 'Z' || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':' {
		return 0, false
	}
	num := func(a, b int) int {
		n := 0
		for i := a; i < b; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	y, mo, d, h, mi, se := num(0, 4), num(5, 7), num(8, 10), num(11, 13), num(14, 16), num(17, 19)
	if y < 0 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 59 {
		return 0, false
	}
	if d > time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day() { // the month's last day
		return 0, false
	}
	ms := 0
	if s[19] == '.' {
		frac := s[20 : len(s)-1]
		if frac == "" {
			return 0, false
		}
		for i := 0; i < 3; i++ {
			ms *= 10
			if i < len(frac) {
				c := frac[i]
				if c < '0' || c > '9' {
					return 0, false
				}
				ms += int(c - '0')
			}
		}
		for i := 3; i < len(frac); i++ {
			if frac[i] < '0' || frac[i] > '9' {
				return 0, false
			}
		}
	} else if len(s) != 20 {
		return 0, false
	}
	days := daysFromCivil(y, mo, d)
	return ((days*24+int64(h))*60+int64(mi))*60_000 + int64(se)*1000 + int64(ms), true
}

// FuzzFastRFC3339UTC checks fastRFC3339UTC against oracleRFC3339UTC: the same time, or the same
// refusal, for any text; and what it reads, the slow path (time.Parse) reads as the same time,
// so that a record's time does not depend on which path read it (the fast path took 2025-02-30
// and second 60, which the slow one refuses).
func FuzzFastRFC3339UTC(f *testing.F) {
	for _, s := range []string{"2024-05-01T12:00:00.001Z", "2024-05-01T12:00:00Z", "1999-12-31T23:59:60.999999Z", "2025-02-30T00:00:00Z", "2024-02-29T00:00:00Z", "1900-02-29T00:00:00Z",
		"2024-05-01T12:00:00.Z", "2024-13-01T12:00:00Z", "2024-05-01T24:00:00Z", "20a4-05-01T12:00:00Z",
		"2024-05-01T12:00:00.0a1Z", "0000-01-01T00:00:00Z", "2024-05-01T12:0/:00Z", "2024-05-01T12:00:00+00:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := fastRFC3339UTC(s)
		want, wantOK := oracleRFC3339UTC(s)
		if got != want || ok != wantOK {
			t.Fatalf("%q: got %d, %v; the oracle %d, %v", s, got, ok, want, wantOK)
		}
		if ok && got >= 0 && got <= maxTimeMs { // the years parseTime keeps
			if slow, err := parseTimeSlow(s); err != nil || slow != got {
				t.Fatalf("%q: fast %d; slow %d, %v", s, got, slow, err)
			}
		}
	})
}
