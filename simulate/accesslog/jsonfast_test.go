package accesslog

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// fastTakes reports whether p's fast path parses line, leaving the walk nothing to do.
func fastTakes(p *jsonParser, line string) bool {
	var rec Record
	rec.reset()
	return p.fast(line, &rec)
}

// flatCompact reports whether line is a JSON object of scalars without white space between
// tokens or escapes in strings, which parses without error: a line the fast path must take.
func flatCompact(line string, opts Options) bool {
	var obj map[string]any
	var compact bytes.Buffer
	if json.Unmarshal([]byte(line), &obj) != nil || json.Compact(&compact, []byte(line)) != nil ||
		compact.String() != line || strings.ContainsRune(line, '\\') {
		return false
	}
	for _, v := range obj {
		switch v.(type) {
		case map[string]any, []any:
			return false
		}
	}
	var rec Record
	rec.reset()
	return newTestParser(opts).walk(line, &rec) == nil
}

// The fast path takes the compact lines of a log and the others the walk would parse alike
// (long keys, keys near the line's end, keys that change between lines, literals), and leaves
// every other line to the walk: white space, escapes, control characters, nested values, lines
// of 4 KB or more, trailing data, malformed lines and values the record does not take. Either
// way every line parses as the oracle parses it, under every key table. Key tables 1 and 2 map
// dotted keys into nested objects, which turns the fast path off: it takes no line under them.
func TestJSONFast(t *testing.T) {
	const ts = `"start_time":"2024-05-01T12:00:00.001Z"`
	long := strings.Repeat("k", 45)
	var logged []string
	for _, line := range logLines(t, "envoy-json.log") {
		if flatCompact(line, jsonOptions[0]) {
			logged = append(logged, line)
		}
	}
	if len(logged) < 90 {
		t.Fatalf("%d flat compact lines in testdata/envoy-json.log, want most of its 106", len(logged))
	}
	taken := append(logged,
		`{`+ts+`,"path":"/a","response_code":200,"x-tenant-id":"acme"}`,
		`{`+ts+`,"patx":"/a","response_code":200,"x-tenant-id":"acme"}`, // one byte of a predicted key differs
		`{`+ts+`,"path":"/b","response_code":200,"x-tenant-id":"acmf"}`,
		`{`+ts+`,"path":null,"response_code":404,"x-api-key":true,"bytes":-1.5e3}`,
		`{`+ts+`,"`+long+`":"v","downstream_remote_address":"10.0.0.1:9","p":1}`,
		`{`+ts+`,"x":1,"y":"","z":2}`,
		`{`+ts+`,"bytes_sent":1234567890123456789,"duration":007,"response_code":200}`,
		`{`+ts+`,"response_code":200,"n":-0,"f":false,"g":1.}`, // literal's leniency, as the walk's
		`{`+ts+`}`,
	)
	declined := []string{
		`{"start_time": "2024-05-01T12:00:00.001Z","path":"/a"}`,
		`{` + ts + `,"path":"/a\"b"}`,
		`{` + ts + `,"path":"/a\u0041"}`,
		"{" + ts + ",\"path\":\"/a\tb\"}",
		`{` + ts + `,"n":{"path":"/a"},"path":"/b"}`,
		`{` + ts + `,"n":[1,2],"path":"/b"}`,
		`{}`,
		`{` + ts + `,"path":"/a"}}`,
		`{` + ts + `,"response_code":200"path":"/a"}`,
		`{` + ts + `,"path""/a"}`,
		`{` + ts + `,"path":"/a}`,
		`{` + ts + `,"bytes_sent":12x}`,
		`{` + ts + `,"upstream_host":nullx}`,
		`{` + ts + `,"upstream_host":nul}`,
		`{` + ts + `,"bytes_sent":12}` + ` `,
		`{` + ts + `,"response_code":1234567890123456789}`,
		`{"start_time":"yesterday","path":"/a"}`,
		`{` + ts + `,"response_code":"two hundred"}`,
		`{` + ts + `,"path":"/` + strings.Repeat("a", 4096) + `"}`,
		`{` + ts + `,"path":"/a",}`,
		`{` + ts + `,:"/a"}`,
	}
	for i, opts := range jsonOptions {
		p := newTestParser(opts)
		for _, line := range taken {
			if got := fastTakes(p, line); got == p.nested {
				t.Errorf("key table %d: %.60q: fast path taken %v, want %v", i, line, got, !p.nested)
			}
		}
		for _, line := range declined {
			if fastTakes(p, line) {
				t.Errorf("key table %d: %.60q: fast path taken", i, line)
			}
		}
		// Each line after the one before and after itself, so that its keys are predicted both
		// right and wrong.
		all := append(taken, declined...)
		for j, line := range all {
			checkJSONOracle(t, i, []string{line, all[(j+1)%len(all)], line, line}, opts)
		}
	}
}

// quoteBits marks a line's quotes, and only its own, whatever line it marked before, longer or
// shorter; and says whether a line has a backslash or a control character anywhere, in its
// 16-byte blocks or after them. Under -tags purego, and off amd64, the bytes are all marked one
// at a time.
func TestQuoteBits(t *testing.T) {
	var q quoteBits
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		n := rng.IntN(64 * len(q))
		if rng.IntN(2) == 0 {
			n = rng.IntN(300)
		}
		b := make([]byte, n)
		for i := range b {
			if rng.IntN(8) == 0 {
				b[i] = '"'
			} else {
				b[i] = 'a' + byte(rng.IntN(26))
			}
		}
		line := string(b)
		if !q.fill(line) {
			t.Fatalf("length %d: fill found a special byte", n)
		}
		var want quoteBits
		for i := range n {
			if line[i] == '"' {
				want[i/64] |= 1 << (i % 64)
			}
		}
		for w := 0; w*64 < n; w++ {
			if q[w] != want[w] {
				t.Fatalf("length %d: word %d is %#x, want %#x", n, w, q[w], want[w])
			}
		}
		for _, i := range []int{0, rng.IntN(n + 1), n - 1, n} {
			want := strings.IndexByte(line[min(max(i, 0), n):], '"')
			if want < 0 {
				want = n
			} else {
				want += max(i, 0)
			}
			if i >= 0 {
				if got := q.next(i, n); got != want {
					t.Fatalf("length %d: next(%d) = %d, want %d", n, i, got, want)
				}
			}
		}
		if n == 0 {
			continue
		}
		for _, special := range []byte{'\\', 0, '\n', 0x1f} {
			for _, at := range []int{0, rng.IntN(n), n - 1} {
				s := line[:at] + string(special) + line[at+1:]
				if q.fill(s) {
					t.Fatalf("length %d: fill missed %q at %d", n, special, at)
				}
			}
		}
	}
}

// A predicted key is found exactly where a line has it, quoted and followed by ':', whatever
// its length (one word, two, three with the middle one, up to five, longer) and however near
// the line's end; and not where any one of its bytes differs.
func TestKeyAt(t *testing.T) {
	for n := 1; n <= 45; n++ {
		key := strings.Repeat("k", n-1) + "z"
		e := newKeyTarget(key, target{})
		for _, pad := range []int{0, 1, 7, 8, 30} {
			line := `{"a":1,` + e.quoted + strings.Repeat("1", pad)
			at := strings.Index(line, e.quoted)
			for i := range len(line) {
				want := strings.HasPrefix(line[i:], e.quoted)
				if got := e.atShort(line, i) || e.atLong(line, i); got != want {
					t.Fatalf("key of %d bytes, %d after it: at %d: %v, want %v", n, pad, i, got, want)
				}
			}
			for j := range len(e.quoted) {
				b := []byte(line)
				b[at+j] ^= 0x20
				if changed := string(b); e.atShort(changed, at) || e.atLong(changed, at) {
					t.Fatalf("key of %d bytes, %d after it: found with byte %d changed", n, pad, j)
				}
			}
		}
	}
}
