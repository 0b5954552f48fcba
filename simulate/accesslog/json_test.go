package accesslog

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// jsonOptions are the key tables FuzzParseJSON parses each line with: the default keys with
// captured headers (matched in any case), mappings into nested objects and of the timestamp,
// a mapped header whose key differs from its name only in case, and some fields left unread
// (Options.Fields), one of them read from a mapped key all the same.
var jsonOptions = []Options{
	{Headers: []string{"x-tenant-id", "authorization", "x-api-key"}},
	{Mapping: Mapping{"x-tenant-id": "a.b", "start_time": "ts", "x-plan": "plan"}, Headers: []string{"user-agent"}},
	{Mapping: Mapping{"path": "req.path.raw", "x-org": "Org", "method": "m"}, Headers: []string{"x-api-key"}},
	{Fields: []string{"start_time", "path", "response_code"}, Mapping: Mapping{"request_id": "rid"}, Headers: []string{"user-agent", "x-tenant-id"}},
}

// FuzzParseJSON checks the JSON parser against the one before it was made faster (oracle_test.go),
// which is the specification: for every line and key table, the same record, seen flags and
// error. It also checks the parser against encoding/json where they must agree: a valid JSON
// object nested no deeper than the parser allows is not malformed, and a JSON string (of valid
// UTF-8) captured as a header decodes to what encoding/json makes of it.
func FuzzParseJSON(f *testing.F) {
	// The seed corpus is testdata/fuzz/FuzzParseJSON and the lines of testdata/envoy-json.log.
	logged := logLines(f, "envoy-json.log")
	for _, line := range logged {
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line string) {
		// The line again, after a line of a log and after itself: the parser predicts each line's
		// keys from the last's (jsonParser.key).
		lines := []string{line, line, logged[0], line, logged[1], logged[1]}
		for i, opts := range jsonOptions {
			checkJSONOracle(t, i, lines, opts)
		}
		if json.Valid([]byte(line)) && strings.HasPrefix(strings.TrimLeft(line, " \t\r\n"), "{") && jsonDepth(line) <= 32 {
			var rec Record
			rec.reset()
			if err := newTestParser(jsonOptions[0]).parse(line, &rec); errors.Is(err, errJSON) {
				t.Fatalf("%q is valid JSON; the parser says %v", line, err)
			}
		}
		var want string
		if utf8.ValidString(line) && json.Unmarshal([]byte(line), &want) == nil && want != "" && want != "-" {
			obj := `{"start_time":1,"x-tenant-id":` + line + `}`
			var rec Record
			rec.reset()
			if err := newTestParser(jsonOptions[0]).parse(obj, &rec); err != nil {
				t.Fatalf("%s: %v", obj, err)
			}
			if got, _ := rec.Header("x-tenant-id"); got != want {
				t.Fatalf("%s: header %q, encoding/json decodes %q", obj, got, want)
			}
		}
	})
}

func newTestParser(opts Options) *jsonParser {
	return newJSONParser(newKeyIndex(testKeyTable(opts)), len(opts.Mapping))
}

// testKeyTable is the key table of a reader with opts, whose Fields must be valid.
func testKeyTable(opts Options) map[string]target {
	read, err := readFields(opts.Fields)
	if err != nil {
		panic(err)
	}
	return keyTable(opts.Mapping, opts.Headers, read)
}

// checkJSONOracle parses lines in turn with one parser and with the oracle, under key table
// number i.
func checkJSONOracle(t *testing.T, i int, lines []string, opts Options) {
	t.Helper()
	keys := testKeyTable(opts)
	p := newJSONParser(newKeyIndex(keys), len(opts.Mapping))
	o := newOracleParser(newOracleIndex(keys), len(opts.Mapping))
	var got, want Record
	for _, line := range lines {
		got.reset()
		want.reset()
		gerr, werr := p.parse(line, &got), o.parse(line, &want)
		if (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("key table %d: %q: error %v, want %v", i, line, gerr, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("key table %d: %q:\n got %+v\nwant %+v", i, line, got, want)
		}
		if !slices.Equal(p.seen, o.seen) {
			t.Fatalf("key table %d: %q: seen %v, want %v", i, line, p.seen, o.seen)
		}
	}
}

// jsonDepth is the deepest nesting of the valid JSON text s.
func jsonDepth(s string) int {
	d := json.NewDecoder(strings.NewReader(s))
	depth, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// logLines returns the lines of testdata/name.
func logLines(t testing.TB, name string) []string {
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	if err := s.Err(); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return lines
}

// The parser allocates nothing per line once it has seen a log's keys, even when the lines
// have them in different orders, or have more keys than it keeps predictions for.
func TestParseJSONNoAllocs(t *testing.T) {
	logged := logLines(t, "envoy-json.log")
	lines := []string{logged[0], `{"path":"/b","extra":1,"start_time":"2024-05-01T12:00:00Z","method":"GET"}`}
	for n := 0; n < maxUnknown; n += maxPredicted {
		var many strings.Builder
		many.WriteString(`{"start_time":1`)
		for i := range maxPredicted + 10 {
			fmt.Fprintf(&many, `,"k%d_%d":"v"`, n, i)
		}
		lines = append(lines, many.String()+`,"path":"/last"}`)
	}
	lines = append(lines, logged[1])
	p := newTestParser(jsonOptions[0])
	var rec Record
	allocs := testing.AllocsPerRun(20, func() {
		for _, line := range lines {
			rec.reset()
			if err := p.parse(line, &rec); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations for %d lines, want 0", allocs, len(lines))
	}
	if rec.Path == "" || len(p.unknown) != maxUnknown {
		t.Errorf("path %q, %d unknown keys kept; want a path and %d", rec.Path, len(p.unknown), maxUnknown)
	}
}

// Fields the caller does not read are left empty, their values skipped but still checked; their
// keys stay theirs, so a captured header of the same name does not take them; a mapped key is
// read whatever Fields says; and a name that is no well-known field is refused.
func TestFieldsLeavesOthersEmpty(t *testing.T) {
	const line = `{"start_time":"2024-05-01T12:00:00.001Z","method":"GET","path":"/a","protocol":"HTTP/2",` +
		`"user_agent":"curl/8","request_id":"r-1","upstream_host":"10.0.0.1:80","rid":"mapped","x-tenant-id":"acme"}`
	opts := Options{Fields: []string{"start_time", "path"}, Mapping: Mapping{"upstream_host": "rid"}, Headers: []string{"user-agent", "x-tenant-id"}}
	rd, err := NewReader("t.log", strings.NewReader(line+"\n"), opts)
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := rd.Read(&rec); err != nil {
		t.Fatal(err)
	}
	want := Record{File: "t.log", Line: 1, TimeMs: rec.TimeMs, Path: "/a", Upstream: "mapped",
		Headers: []Header{{Name: "x-tenant-id", Value: "acme"}}}
	if rec.TimeMs <= 0 || !reflect.DeepEqual(rec, want) {
		t.Errorf("got %+v, want %+v", rec, want)
	}
	// An unread value is checked as a read one is.
	bad := strings.Replace(line, `"r-1"`, `"r\x-1"`, 1)
	rd, err = NewReader("t.log", strings.NewReader(bad+"\n"), opts)
	if err != nil {
		t.Fatal(err)
	}
	var le *LineError
	if err := rd.Read(&rec); !errors.As(err, &le) || !errors.Is(err, errJSON) {
		t.Errorf("a bad escape in an unread field: got %v, want a bad line", err)
	}
	for _, name := range []string{"client_ip", "x-tenant-id", "Path"} {
		if _, err := NewReader("t.log", strings.NewReader(line+"\n"), Options{Fields: []string{name}}); err == nil {
			t.Errorf("Fields %q: no error", name)
		}
	}
}

// White space wherever JSON allows it, and control characters where it does not, parse as the
// oracle parses them (the parser only skips white space where it finds it instead of a token).
func TestParseJSONWhiteSpace(t *testing.T) {
	lines := []string{
		" {\t\"start_time\" :\r\n \"2024-05-01T12:00:00.001Z\" , \"path\":\"/a\" ,\"response_code\" : 200 ,\n\"x-tenant-id\": \"acme\"\t} ",
		`{"start_time":"2024-05-01T12:00:00.001Z","path": "/a","response_code":200 }`,
		`{ "start_time":"2024-05-01T12:00:00.001Z" , "nested" : { "a" : [ 1 , 2 ] } , "path" :"/b"}`,
		"{\"start_time\":\"2024-05-01T12:00:00.001Z\",\"path\":\x01\"/a\"}",
		"{\"start_time\":\"2024-05-01T12:00:00.001Z\",\"path\":\"/a\"\x01}",
		"{\"start_time\":\"2024-05-01T12:00:00.001Z\" \x0b,\"path\":\"/a\"}",
		`{"start_time":"2024-05-01T12:00:00.001Z","path":"/a" `,
		`{"start_time":"2024-05-01T12:00:00.001Z","path":   `,
	}
	for i, opts := range jsonOptions {
		// Each line twice, and after a compact line: the second parse and the third predict the
		// keys from the line before.
		for _, line := range lines {
			checkJSONOracle(t, i, []string{line, line, lines[1], line}, opts)
		}
	}
}
