package accesslog

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func readAll(t *testing.T, input string, opts Options) ([]Record, []*LineError) {
	t.Helper()
	r, err := NewReader("log", strings.NewReader(input), opts)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	var recs []Record
	var bad []*LineError
	for {
		var rec Record
		err := r.Read(&rec)
		if err == io.EOF {
			return recs, bad
		}
		var le *LineError
		if errors.As(err, &le) {
			bad = append(bad, le)
			continue
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		recs = append(recs, rec)
	}
}

func TestReadFormats(t *testing.T) {
	hdrs := []string{"x-tenant-id", "authorization", "x-api-key", "x-ja4"}
	tests := []struct {
		name  string
		input string
		opts  Options
		want  Record
	}{
		{
			name: "envoy-json",
			input: `{"start_time":"2024-05-01T12:00:00.123Z","method":"POST","path":"/v1/payments/charge","protocol":"HTTP/1.1",` +
				`"response_code":200,"x_forwarded_for":"198.51.100.7, 10.0.0.1","downstream_remote_address":"10.0.0.9:5000",` +
				`"user_agent":"curl/8","authority":"api.example.com","x-tenant-id":"acme","x_api_key":"k1","duration":3,"extra":{"a":[1,2]}}`,
			opts: Options{Headers: hdrs},
			want: Record{File: "log", Line: 1, TimeMs: 1714564800123, Method: "POST", Path: "/v1/payments/charge", Protocol: "HTTP/1.1",
				Status: 200, XFF: "198.51.100.7, 10.0.0.1", RemoteAddr: "10.0.0.9:5000", UserAgent: "curl/8", Authority: "api.example.com",
				Headers: []Header{{"x-tenant-id", "acme"}, {"x-api-key", "k1"}}},
		},
		{
			name:  "json escapes and dashes",
			input: `{"path":"/a\"b\u00e9","user_agent":"-","response_code":"429","start_time":1714564800.5}`,
			want:  Record{File: "log", Line: 1, TimeMs: 1714564800500, Path: "/a\"bé", Status: 429},
		},
		{
			name:  "jsonl mapping nested",
			input: `{"ts":1714564800123,"req":{"tenant":"acme","ip":"203.0.113.9"}}`,
			opts:  Options{Format: FormatJSONL, Mapping: Mapping{"start_time": "ts", "x-tenant-id": "req.tenant", "downstream_remote_address": "req.ip"}},
			want:  Record{File: "log", Line: 1, TimeMs: 1714564800123, RemoteAddr: "203.0.113.9", Headers: []Header{{"x-tenant-id", "acme"}}},
		},
		{
			name: "envoy-text",
			input: `[2016-04-15T20:17:00.310Z] "POST /api/v1/locations HTTP/2" 204 - 154 0 226 100 "10.0.35.28" ` +
				`"nsq2http" "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2" "locations" "tcp://10.0.2.1:80"`,
			want: Record{File: "log", Line: 1, TimeMs: 1460751420310, Method: "POST", Path: "/api/v1/locations", Protocol: "HTTP/2",
				Status: 204, XFF: "10.0.35.28", UserAgent: "nsq2http", RequestID: "cc21d9b0-cf5c-432b-8c7e-98aeb7988cd2",
				Authority: "locations", Upstream: "tcp://10.0.2.1:80"},
		},
		{
			name: "envoy-text quote in user agent",
			input: `[2016-04-15T20:17:00.310Z] "GET / HTTP/1.1" 429 RL 0 18 0 - "-" ` +
				`"Mozilla "x" 5" "id" "h" "-"`,
			want: Record{File: "log", Line: 1, TimeMs: 1460751420310, Method: "GET", Path: "/", Protocol: "HTTP/1.1",
				Status: 429, UserAgent: `Mozilla "x" 5`, RequestID: "id", Authority: "h"},
		},
		{
			name:  "csv",
			input: "time,method,path,status,client_ip,tenant\n2024-05-01T12:00:00Z,GET,/x,200,192.0.2.1,acme\n",
			opts:  Options{Format: FormatCSV, Mapping: Mapping{"x-tenant-id": "tenant"}},
			want: Record{File: "log", Line: 2, TimeMs: 1714564800000, Method: "GET", Path: "/x", Status: 200, RemoteAddr: "192.0.2.1",
				Headers: []Header{{"x-tenant-id", "acme"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, bad := readAll(t, tt.input, tt.opts)
			if len(bad) != 0 {
				t.Fatalf("bad lines: %v", bad[0])
			}
			if len(recs) != 1 {
				t.Fatalf("got %d records, want 1", len(recs))
			}
			got := recs[0]
			if len(got.Headers) == 0 {
				got.Headers = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestBadLines(t *testing.T) {
	input := `{"start_time":1,"path":"/ok"}
{"start_time":1,"path": "/unterminated
not json at all

{"start_time":1,"path":"/ok2","response_code":"abc"}
{"start_time":1,"path":"/ok3"} trailing
{"start_time":1,"path":"/ok4"}
`
	recs, bad := readAll(t, input, Options{Format: FormatEnvoyJSON})
	if got, want := len(recs), 2; got != want {
		t.Errorf("records: got %d, want %d", got, want)
	}
	var lines []int64
	for _, b := range bad {
		lines = append(lines, b.Line)
	}
	if want := []int64{2, 3, 5, 6}; !reflect.DeepEqual(lines, want) {
		t.Errorf("bad lines: got %v, want %v", lines, want)
	}
	if got, want := recs[1].Line, int64(7); got != want {
		t.Errorf("last record line: got %d, want %d", got, want)
	}
}

func TestGzipAndSniff(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	io.WriteString(zw, `[2016-04-15T20:17:00.310Z] "GET /x HTTP/1.1" 200 - 0 0 1 - "1.2.3.4" "ua" "id" "h" "u"`+"\n")
	zw.Close()
	recs, bad := readAll(t, buf.String(), Options{})
	if len(bad) != 0 || len(recs) != 1 {
		t.Fatalf("got %d records, %d bad; want 1, 0", len(recs), len(bad))
	}
	if got, want := recs[0].Path, "/x"; got != want {
		t.Errorf("path: got %q, want %q", got, want)
	}
}

func TestClientIP(t *testing.T) {
	tests := []struct {
		name, xff, remote, want string
	}{
		{"remote with port", "", "10.0.0.1:443", "10.0.0.1"},
		{"remote v6 with port", "", "[2001:db8::1]:443", "2001:db8::1"},
		{"remote bare v6", "", "2001:db8::1", "2001:db8::1"},
		{"remote bare v6 loopback", "", "::1", "::1"},
		{"remote v4, no port", "", "10.0.0.1", "10.0.0.1"},
		{"remote name with port", "", "gw-1:8080", "gw-1"},
		{"remote beats xff", "198.51.100.7", "203.0.113.9:1", "203.0.113.9"},
		{"spoofed left entry", "6.6.6.6, 198.51.100.7", "198.51.100.7:5000", "198.51.100.7"},
		{"xff only: rightmost", "6.6.6.6, 10.9.9.9, 198.51.100.7", "", "198.51.100.7"},
		{"xff only: one entry, spaces", " 203.0.113.5 ", "", "203.0.113.5"},
		{"xff only: v6 rightmost", "6.6.6.6,2001:db8::7", "", "2001:db8::7"},
		{"xff only: bracketed v6 with port", "6.6.6.6, [2001:db8::7]:443", "", "2001:db8::7"},
		{"xff only: v4 with port", "6.6.6.6, 198.51.100.7:8080", "", "198.51.100.7"},
		{"nothing", "", "", ""},
	}
	for _, tt := range tests {
		r := Record{XFF: tt.xff, RemoteAddr: tt.remote}
		if got := r.ClientIP(); got != tt.want {
			t.Errorf("%s: ClientIP(xff=%q, remote=%q): got %q, want %q", tt.name, tt.xff, tt.remote, got, tt.want)
		}
	}
}

// TestNoTimestamp checks that a record without a timestamp is a bad line naming the key it
// wanted, not a request at 1970-01-01.
func TestNoTimestamp(t *testing.T) {
	const defaultKeys = "no timestamp (start_time, timestamp, time, ts or @timestamp)"
	tests := []struct {
		name    string
		input   string
		opts    Options
		wantErr string // "" for a record
	}{
		{"json without start_time", `{"path":"/a"}`, Options{}, defaultKeys},
		{"json dash", `{"start_time":"-","path":"/a"}`, Options{}, defaultKeys},
		{"json empty", `{"start_time":"","path":"/a"}`, Options{}, defaultKeys},
		{"json null", `{"start_time":null,"path":"/a"}`, Options{}, defaultKeys},
		{"json epoch 0 is a time", `{"start_time":0,"path":"/a"}`, Options{}, ""},
		{"json mapped key missing", `{"start_time":"2024-05-01T12:00:00Z","path":"/a"}`,
			Options{Mapping: Mapping{"start_time": "ts"}}, "no timestamp (ts)"},
		{"json mapped key present", `{"ts":"2024-05-01T12:00:00Z"}`, Options{Mapping: Mapping{"start_time": "ts"}}, ""},
		{"csv empty cell", "ts,path\n,/a\n", Options{Mapping: Mapping{"start_time": "ts"}}, `no timestamp (column "ts")`},
		{"csv dash", "time,path\n-,/a\n", Options{}, `no timestamp (column "time")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, bad := readAll(t, tt.input, tt.opts)
			if tt.wantErr == "" {
				if len(bad) != 0 || len(recs) != 1 {
					t.Fatalf("got %d records, bad %v; want 1 record", len(recs), bad)
				}
				return
			}
			if len(recs) != 0 || len(bad) != 1 {
				t.Fatalf("got records %+v, %d bad lines; want one bad line", recs, len(bad))
			}
			if got := bad[0].Err.Error(); got != tt.wantErr {
				t.Errorf("got error %q, want %q", got, tt.wantErr)
			}
			if !errors.Is(bad[0], ErrNoTimestamp) {
				t.Errorf("got %v, want ErrNoTimestamp", bad[0])
			}
		})
	}
}

// TestCSVHeader checks that the header row is read when the log is opened: a --field mapping
// naming a column the header lacks, or a header without a timestamp, is an error then.
func TestCSVHeader(t *testing.T) {
	tests := []struct {
		name    string
		input   string
		mapping Mapping
		wantErr string // "" for no error
	}{
		{"good", "ts,path,tenant\n1,/a,acme\n", Mapping{"start_time": "ts", "x-tenant-id": "tenant"}, ""},
		{"good, column in upper case", "TS,path\n1,/a\n", Mapping{"start_time": "ts"}, ""},
		{"good, empty log", "", Mapping{"start_time": "whenn"}, ""},
		{"mapped time column missing", "time,path\n1,/a\n", Mapping{"start_time": "whenn"},
			`log:1: --field start_time=whenn: no column "whenn" in the header row (columns: time, path)`},
		{"mapped header column missing", "\ntime,path\n1,/a\n", Mapping{"x-tenant-id": "tenant"},
			`log:2: --field x-tenant-id=tenant: no column "tenant" in the header row (columns: time, path)`},
		{"no timestamp column", "path,tenant\n/a,acme\n", nil,
			"log:1: no timestamp column in the header row: want start_time, timestamp, time, ts or @timestamp, " +
				"or map one with --field start_time=COLUMN (columns: path, tenant)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader("log", strings.NewReader(tt.input), Options{Format: FormatCSV, Mapping: tt.mapping})
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.wantErr {
				t.Errorf("NewReader: got error %q, want %q", got, tt.wantErr)
			}
		})
	}
	// A log detected as CSV says so when its header fails: it may be no CSV at all.
	_, err := NewReader("log", strings.NewReader("not a log\n"), Options{})
	if want := "log:1: no timestamp column in the header row: want start_time, timestamp, time, ts or @timestamp, " +
		"or map one with --field start_time=COLUMN (columns: not a log); read as CSV, as its first byte is " +
		"neither '{' nor '[' (give --log-format if it is not CSV)"; err == nil || err.Error() != want {
		t.Errorf("a detected CSV log: got error %v, want %q", err, want)
	}
}

// TestHeaderCase checks that request headers match their log keys in any case, and that
// mapped keys and well-known non-header keys stay exact.
func TestHeaderCase(t *testing.T) {
	hdrs := []string{"x-tenant-id", "x-api-key", "authorization"}
	tests := []struct {
		name  string
		input string
		opts  Options
		want  Record
	}{
		{
			name: "header spellings",
			input: `{"start_time":1,"X-Tenant-Id":"acme","X_API_KEY":"k1","Authorization":"Bearer t",` +
				`"User-Agent":"curl/8","X-Forwarded-For":"198.51.100.7","Host":"api.example.com"}`,
			opts: Options{Headers: hdrs},
			want: Record{TimeMs: 1000, UserAgent: "curl/8", XFF: "198.51.100.7", Authority: "api.example.com",
				Headers: []Header{{"x-tenant-id", "acme"}, {"x-api-key", "k1"}, {"authorization", "Bearer t"}}},
		},
		{
			name:  "req_ prefix",
			input: `{"start_time":1,"REQ_X_TENANT_ID":"acme"}`,
			opts:  Options{Headers: hdrs},
			want:  Record{TimeMs: 1000, Headers: []Header{{"x-tenant-id", "acme"}}},
		},
		{
			name:  "mapped key is exact",
			input: `{"start_time":1,"Tenant":"acme","X-Tenant-Id":"other"}`,
			opts:  Options{Headers: hdrs, Mapping: Mapping{"x-tenant-id": "tenant"}},
			want:  Record{TimeMs: 1000},
		},
		{
			name:  "not a header",
			input: `{"start_time":1,"Path":"/a","Method":"GET"}`,
			opts:  Options{Headers: hdrs},
			want:  Record{TimeMs: 1000},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, bad := readAll(t, tt.input, tt.opts)
			if len(bad) != 0 || len(recs) != 1 {
				t.Fatalf("got %d records, bad %v; want 1 record", len(recs), bad)
			}
			got := recs[0]
			got.File, got.Line = "", 0
			if len(got.Headers) == 0 {
				got.Headers = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestReadArenaNoAllocs checks that reading a line into an arena allocates nothing, with
// header keys in lower and in mixed case.
func TestReadArenaNoAllocs(t *testing.T) {
	const line = `{"start_time":"2024-05-01T12:00:00.123Z","method":"GET","path":"/x","bytes_sent":12,` +
		`"x-tenant-id":"acme","X-Api-Key":"k1","Authorization":"Bearer t","hostname":"gw-1"}` + "\n"
	log := strings.Repeat(line, 200)
	r, err := NewReader("log", strings.NewReader(log), Options{Headers: []string{"x-tenant-id", "x-api-key", "authorization"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := Record{Headers: make([]Header, 0, 8)}
	arena := make([]byte, 0, 1<<16)
	allocs := testing.AllocsPerRun(100, func() {
		arena = arena[:0]
		if err := r.ReadArena(&rec, &arena); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per line, want 0", allocs)
	}
	if got, want := len(rec.Headers), 3; got != want {
		t.Errorf("got %d headers, want %d", got, want)
	}
}

func TestParseTime(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1970-01-01T00:00:00Z", 0, true},
		{"2024-02-29T23:59:59.999Z", 1709251199999, true},
		{"2024-05-01T12:00:00.123456Z", 1714564800123, true},
		{"2024-05-01T14:00:00.123+02:00", 1714564800123, true},
		{"1714564800", 1714564800000, true},
		{"1714564800123", 1714564800123, true},
		{"1714564800.123", 1714564800123, true},
		{"1714564800123456", 1714564800123, true},    // %s%6f
		{"1714564800123456789", 1714564800123, true}, // %s%9f
		{"1714564800123999999", 1714564800123, true}, // a float64 would round it up a millisecond
		{"1714564800.123999", 1714564800123, true},   // %s.%6f truncates, as RFC 3339 does
		{"1714564800.123999999", 1714564800123, true},
		{"0.0009", 0, true},
		{"1.7145648e9", 1714564800000, true},
		{"9999999999999999999", 9999999999999, true},
		{"99999999999999999999999", 0, false},
		{"56302-05-26T00:00:00Z", 0, false},
		{"1e30", 0, false},
		{"yesterday", 0, false},
		{"2024-13-01T00:00:00Z", 0, false},
	}
	for _, tt := range tests {
		got, err := parseTime(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseTime(%q): got %d, %v; want %d, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestParseMapping(t *testing.T) {
	m, err := ParseMapping([]string{"x-tenant-id=tenant", "start_time=ts"})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Mapping{"x-tenant-id": "tenant", "start_time": "ts"}); !reflect.DeepEqual(m, want) {
		t.Errorf("got %v, want %v", m, want)
	}
	// Names are taken in any case, as headers are: CLIENT_IP is client_ip, refused too.
	for _, bad := range []string{"nokey", "=x", "client_ip=ip", "CLIENT_IP=ip"} {
		if _, err := ParseMapping([]string{bad}); err == nil || !strings.HasPrefix(err.Error(), "--field ") {
			t.Errorf("ParseMapping(%q): got %v, want an error naming --field", bad, err)
		}
	}
	if m, err := ParseMapping([]string{"X-Tenant-Id=tenant"}); err != nil || m["x-tenant-id"] != "tenant" {
		t.Errorf("a name in capitals: got %v, %v; want x-tenant-id=tenant", m, err)
	}
	// One key feeds one field: a second name for it would stay empty in every record.
	if _, err := ParseMapping([]string{"x-org=tenant", "x-tenant-id=tenant"}); err == nil || !strings.Contains(err.Error(), "already mapped") {
		t.Errorf("a key mapped twice: got %v, want an error", err)
	}
	// One name is fed by one key: the first would be dropped without a word. The same
	// mapping twice is one.
	if _, err := ParseMapping([]string{"x-tenant-id=a", "X-Tenant-Id=b"}); err == nil || !strings.Contains(err.Error(), `x-tenant-id is already mapped to key "a"`) {
		t.Errorf("a name mapped twice: got %v, want an error", err)
	}
	if m, err := ParseMapping([]string{"x-tenant-id=a", "X-Tenant-Id=a"}); err != nil || len(m) != 1 {
		t.Errorf("one mapping twice: got %v, %v; want it once", m, err)
	}
	// Every bad value is reported, not only the first.
	if _, err := ParseMapping([]string{"nokey", "client_ip=ip"}); err == nil || !strings.Contains(err.Error(), `"nokey"`) || !strings.Contains(err.Error(), `"client_ip=ip"`) {
		t.Errorf("two bad values: got %v, want both named", err)
	}
}

// A captured header's own name wins over its underscored and req_ spellings, wherever they are
// in the line.
func TestHeaderPrecedence(t *testing.T) {
	const ts = `"start_time":"2024-05-01T12:00:00Z"`
	for _, input := range []string{
		`{` + ts + `,"x-tenant-id":"a","x_tenant_id":"b","req_x_tenant_id":"c"}`,
		`{` + ts + `,"req_x_tenant_id":"c","x_tenant_id":"b","x-tenant-id":"a"}`,
		`{` + ts + `,"x_tenant_id":"b","x-tenant-id":"a"}`,
	} {
		recs, bad := readAll(t, input+"\n", Options{Headers: []string{"x-tenant-id"}})
		if len(bad) > 0 || len(recs) != 1 {
			t.Fatalf("%s: %d records, bad %v", input, len(recs), bad)
		}
		if got := recs[0].Headers; len(got) != 1 || got[0].Value != "a" {
			t.Errorf("%s: headers %v, want x-tenant-id=a once", input, got)
		}
	}
}

func TestLongLine(t *testing.T) {
	long := `{"ts":1,"path":"` + strings.Repeat("a", 300<<10) + `"}` + "\n" + `{"ts":1,"path":"/b"}` + "\n"
	recs, bad := readAll(t, long, Options{})
	if len(bad) != 0 || len(recs) != 2 {
		t.Fatalf("got %d records, %d bad; want 2, 0", len(recs), len(bad))
	}
	if got, want := len(recs[0].Path), 300<<10; got != want {
		t.Errorf("path length: got %d, want %d", got, want)
	}
}

// TestLineLimit: the 1 MiB limit is on a line without its end, whatever the end (\n, \r\n or
// none, at the end of the file): a line of exactly 1 MiB is read, one byte more is a bad line.
func TestLineLimit(t *testing.T) {
	line := func(n int) string { // a JSON line of n bytes
		head := `{"ts":1,"path":"`
		return head + strings.Repeat("a", n-len(head)-2) + `"}`
	}
	for _, end := range []string{"\n", "\r\n", ""} {
		for _, tc := range []struct {
			n       int
			records int
		}{{maxLine, 1}, {maxLine + 1, 0}} {
			recs, bad := readAll(t, line(tc.n)+end, Options{})
			if len(recs) != tc.records || len(recs)+len(bad) != 1 {
				t.Errorf("a line of %d bytes ending %q: got %d records, %d bad; want %d records", tc.n, end, len(recs), len(bad), tc.records)
			}
		}
	}
}

// TestReadArenaMatchesRead reads the same log with Read and with ReadArena into one small reused
// arena (so lines spill into new buffers): the records must be equal, and records read into
// the arena before it was reused must not change while later lines are read.
func TestReadArenaMatchesRead(t *testing.T) {
	var log strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&log, `{"start_time":"2024-05-01T12:00:%02d.5Z","method":"GET","path":"/p/%d","x-tenant-id":"t\u00e9%d"}`+"\n", i, i, i)
	}
	opts := Options{Headers: []string{"x-tenant-id"}}
	plain, err := NewReader("a", strings.NewReader(log.String()), opts)
	if err != nil {
		t.Fatal(err)
	}
	arenaRd, err := NewReader("a", strings.NewReader(log.String()), opts)
	if err != nil {
		t.Fatal(err)
	}
	arena := make([]byte, 0, 300)
	var batch []Record
	for i := 0; ; i++ {
		var want, got Record
		errW := plain.Read(&want)
		errG := arenaRd.ReadArena(&got, &arena)
		if errW != errG {
			t.Fatalf("record %d: ReadArena error %v, Read %v", i, errG, errW)
		}
		if errW == io.EOF {
			break
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("record %d: ReadArena %+v, Read %+v", i, got, want)
		}
		batch = append(batch, got)
		if len(batch) == 4 {
			for j, r := range batch {
				if wantPath := fmt.Sprintf("/p/%d", i-3+j); r.Path != wantPath {
					t.Fatalf("record %d changed before the arena was reused: path %q, want %q", i-3+j, r.Path, wantPath)
				}
			}
			batch, arena = batch[:0], arena[:0]
		}
	}
}

func TestStringSpecials(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	// Words of plain bytes and of high (UTF-8) bytes, with every byte value at every position,
	// and with a second byte value after it: the first special byte must be found exactly.
	for _, base := range []string{"abcdefgh", "\xff\x80\xe2\x82\xac\xc3\xa9\x7f"} {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				for _, later := range []byte{'a', '"', '\\', 0, 0x1f, 0x20, 0x80, 0xff} {
					b := []byte(base)
					b[pos] = byte(c)
					if pos < 7 {
						b[7] = later
					}
					want := 8
					for i := range b {
						if special(b[i]) {
							want = i
							break
						}
					}
					got := 8
					if m := stringSpecials(wordOf(string(b))); m != 0 {
						got = bits.TrailingZeros64(m) / 8
					}
					if got != want {
						t.Errorf("%q: first special byte: got %d, want %d", b, got, want)
					}
				}
			}
		}
	}
}

func wordOf(s string) uint64 { return stringWord(s, 0) }

// plainEnd finds the first special byte from any start, whether it lies in a 16-byte block
// (plainBlocks, in assembly on amd64), in an eight-byte word or in the bytes after the last
// word, with every byte value in that place and plain or high bytes around it.
func TestPlainEnd(t *testing.T) {
	special := func(c byte) bool { return c == '"' || c == '\\' || c < 0x20 }
	want := func(s string, i int) int {
		for ; i < len(s); i++ {
			if special(s[i]) {
				break
			}
		}
		return i
	}
	for _, fill := range []byte{'a', 0x7f, 0x80, 0xe2, 0xff} {
		for n := 0; n <= 40; n++ {
			base := strings.Repeat(string([]byte{fill}), n)
			for start := 0; start <= n+1; start++ {
				if got, w := plainEnd(base, start), max(start, n); got != w && start <= n {
					t.Fatalf("%d bytes %#x from %d: got %d, want %d", n, fill, start, got, w)
				}
				for pos := start; pos < n; pos++ {
					for c := 0; c < 256; c++ {
						b := []byte(base)
						b[pos] = byte(c)
						if got, w := plainEnd(string(b), start), want(string(b), start); got != w {
							t.Fatalf("%d bytes %#x, %#x at %d, from %d: got %d, want %d", n, fill, c, pos, start, got, w)
						}
					}
				}
			}
		}
	}
}

func TestIsSmallInt(t *testing.T) {
	for _, tt := range []struct {
		lit  string
		want bool
	}{{"0", true}, {"200", true}, {"-7", true}, {"0123", true}, {"-", false}, {"", false},
		{"1.5", false}, {"1e3", false}, {"123456789012345678", true}, {"1234567890123456789", false}} {
		if got := isSmallInt(tt.lit); got != tt.want {
			t.Errorf("isSmallInt(%q): got %v, want %v", tt.lit, got, tt.want)
		}
		if _, err := strconv.ParseFloat(tt.lit, 64); tt.want && err != nil {
			t.Errorf("ParseFloat(%q): %v, but isSmallInt accepts it", tt.lit, err)
		}
	}
}

// When a line has several keys of one field, the first non-empty one in defaultKeys' order
// wins wherever it is in the line, and an empty ("-") one never clears a value.
func TestKeyPrecedence(t *testing.T) {
	const ts = `"start_time":"2024-05-01T12:00:00Z"`
	tests := []struct {
		name, input        string
		opts               Options
		wantPath, wantAddr string
	}{
		{"original path after the rewritten one", `{` + ts + `,"path":"/v2/x","x-envoy-original-path":"/x"}`, Options{}, "/x", ""},
		{"original path before the rewritten one", `{` + ts + `,"x-envoy-original-path":"/x","path":"/v2/x"}`, Options{}, "/x", ""},
		{"no original path", `{` + ts + `,"x-envoy-original-path":"-","path":"/a"}`, Options{}, "/a", ""},
		{"an empty alias keeps the value", `{` + ts + `,"path":"/a","uri":"-"}`, Options{}, "/a", ""},
		{"trusted address after the peer", `{` + ts + `,"downstream_direct_remote_address":"10.0.0.1:5","downstream_remote_address":"203.0.113.7:9"}`, Options{}, "", "203.0.113.7:9"},
		{"trusted address before the peer", `{` + ts + `,"downstream_remote_address":"203.0.113.7:9","downstream_direct_remote_address":"10.0.0.1:5"}`, Options{}, "", "203.0.113.7:9"},
		{"csv", "start_time,path,x-envoy-original-path\n2024-05-01T12:00:00Z,/v2/x,/x", Options{Format: FormatCSV}, "/x", ""},
	}
	for _, tt := range tests {
		recs, bad := readAll(t, tt.input+"\n", tt.opts)
		if len(bad) > 0 || len(recs) != 1 {
			t.Errorf("%s: %d records, bad %v", tt.name, len(recs), bad)
			continue
		}
		if recs[0].Path != tt.wantPath || recs[0].RemoteAddr != tt.wantAddr {
			t.Errorf("%s: path %q, address %q; want %q, %q", tt.name, recs[0].Path, recs[0].RemoteAddr, tt.wantPath, tt.wantAddr)
		}
	}
}

// Envoy's default text format has fixed fields: a mapping is refused when the format is given,
// and left unseen when the format was detected (the mapping may be for the other logs), unless
// every log is in it (CheckMapping), which is refused as the format given is.
func TestTextFormatMapping(t *testing.T) {
	line := `[2024-05-01T12:00:00.001Z] "GET /a HTTP/1.1" 200 - 0 10 1 - "1.2.3.4" "ua" "id" "host" "10.0.0.1:80"` + "\n"
	m := Mapping{"start_time": "ts"}
	_, given := NewReader("log", strings.NewReader(line), Options{Format: FormatEnvoyText, Mapping: m})
	if given == nil || !strings.Contains(given.Error(), "--field does not apply") {
		t.Errorf("text log with --field: got %v, want a refusal", given)
	}
	r, err := NewReader("log", strings.NewReader(line), Options{Mapping: m})
	if err != nil {
		t.Fatalf("detected text log with --field: %v", err)
	}
	if err := CheckMapping([]*Reader{r}, m); fmt.Sprint(err) != fmt.Sprint(given) {
		t.Errorf("detected text log with --field: CheckMapping %v, want %v", err, given)
	}
	j, err := NewReader("j", strings.NewReader(`{"ts":"2024-05-01T12:00:00Z"}`+"\n"), Options{Mapping: m})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckMapping([]*Reader{r, j}, m); err != nil {
		t.Errorf("detected text log among JSON ones: CheckMapping %v, want nil", err)
	}
	var rec Record
	for r.Read(&rec) != io.EOF {
	}
	if got := r.Unseen(); !slices.Equal(got, []string{"start_time=ts"}) {
		t.Errorf("detected text log: unseen %v, want [start_time=ts]", got)
	}
}

// Unseen names the --field mappings whose key no line had, so that a misspelt key is not
// silently an empty field in every record.
func TestUnseen(t *testing.T) {
	input := `{"ts":"2024-05-01T12:00:00Z","tenant":"acme","req":{"key":"k1"}}` + "\n" +
		`{"ts":"2024-05-01T12:00:01Z","tenant":"beta"}` + "\n"
	m, err := ParseMapping([]string{"start_time=ts", "x-tenant-id=tenantt", "x-api-key=req.key", "x-plan=plann", "x-org=tenant"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader("log", strings.NewReader(input), Options{Format: FormatJSONL, Mapping: m})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Unseen(); len(got) != 5 {
		t.Fatalf("before reading: got %v, want all 5 mappings", got)
	}
	var rec Record
	for r.Read(&rec) != io.EOF {
	}
	if got, want := r.Unseen(), []string{"x-plan=plann", "x-tenant-id=tenantt"}; !slices.Equal(got, want) {
		t.Errorf("unseen: got %v, want %v", got, want)
	}
}

// A UTF-8 byte order mark before the first line is not part of it, and a bad line quoted in a
// report is valid UTF-8 even when the 200-byte cut splits a character.
func TestBOMAndQuotedText(t *testing.T) {
	bom := "\xef\xbb\xbf"
	for _, tt := range []struct {
		name, input string
		opts        Options
	}{
		{"json", bom + `{"start_time":"2024-05-01T12:00:00Z","path":"/a"}` + "\n", Options{}},
		{"csv", bom + "\"start_time\",path\n2024-05-01T12:00:00Z,/a\n", Options{Format: FormatCSV}},
	} {
		recs, bad := readAll(t, tt.input, tt.opts)
		if len(bad) > 0 || len(recs) != 1 || recs[0].Path != "/a" {
			t.Errorf("%s with a BOM: %d records, bad %v", tt.name, len(recs), bad)
		}
	}
	line := `{"start_time":"2024-05-01T12:00:00Z","path":"/` + strings.Repeat("é", 150) + `"` + "\n"
	_, bad := readAll(t, line, Options{})
	if len(bad) != 1 || !utf8.ValidString(bad[0].Text) {
		t.Errorf("quoted bad line: %d bad, valid UTF-8 %v", len(bad), len(bad) == 1 && utf8.ValidString(bad[0].Text))
	}
}

// A read error names the log and where it stopped; a cut-off gzip file says it may be one.
func TestTruncatedGzip(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(zw, `{"start_time":"2024-05-01T12:00:00Z","path":"/a/%d"}`+"\n", i)
	}
	zw.Close()
	cut := z.Bytes()[:z.Len()/2]
	r, err := NewReader("x.log.gz", bytes.NewReader(cut), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	for err = r.Read(&rec); err == nil; err = r.Read(&rec) {
	}
	if err == io.EOF || !strings.Contains(err.Error(), "x.log.gz: after line ") || !strings.Contains(err.Error(), "truncated gzip") {
		t.Errorf("truncated gzip: got %v, want the file, the line and a hint", err)
	}
}

// trimEOL trims what bytes.TrimRight(line, "\r\n") trims.
func TestTrimEOL(t *testing.T) {
	for _, s := range []string{"", "\n", "\r\n", "\n\r", "a", "a\n", "a\r\n", "a\r\r\n\n", "\r\na", "a\r\nb\r", " \n", "a \t\n"} {
		if got, want := string(trimEOL([]byte(s))), string(bytes.TrimRight([]byte(s), "\r\n")); got != want {
			t.Errorf("trimEOL(%q) = %q, want %q", s, got, want)
		}
	}
}

// Field gives every well-known field as text, the time and the status too, which an
// assignment (--assign hash:response_code) reads through it: they read as empty before.
func TestRecordField(t *testing.T) {
	const line = `{"start_time":"2024-05-01T12:00:00.001Z","method":"GET","path":"/a","response_code":429,` +
		`"downstream_remote_address":"10.0.0.9:5555","x-tenant-id":"acme"}` + "\n"
	recs, bad := readAll(t, line+`{"start_time":"2024-05-01T12:00:01Z"}`+"\n", Options{Headers: []string{"x-tenant-id"}})
	if len(recs) != 2 || len(bad) != 0 {
		t.Fatalf("got %d records, %d bad lines; want 2 and 0", len(recs), len(bad))
	}
	for name, want := range map[string]string{"start_time": "2024-05-01T12:00:00.001Z", "response_code": "429",
		"method": "GET", "path": "/a", "client_ip": "10.0.0.9", "downstream_remote_address": "10.0.0.9:5555",
		"x-tenant-id": "acme", "user_agent": "", "x-other": ""} {
		if got := recs[0].Field(name); got != want {
			t.Errorf("Field(%q): got %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{"start_time": "2024-05-01T12:00:01.000Z", "response_code": ""} {
		if got := recs[1].Field(name); got != want {
			t.Errorf("a line without a status: Field(%q): got %q, want %q", name, got, want)
		}
	}
}
