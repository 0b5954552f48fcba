package traffic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/simulate/accesslog"
)

// policyHeaders are the request headers the example policies read, and the gateway's key.
var policyHeaders = []string{"x-tenant-id", "authorization", "x-api-key", "x-ja4", "hostname"}

// TestIstioSameRecords checks that an istio-json line reads into the same record as the
// envoy-json line of the same request, so a replay sees the same traffic in either shape.
func TestIstioSameRecords(t *testing.T) {
	const lines = 20000
	envoy, istio := readAll(t, EnvoyJSON, lines), readAll(t, IstioJSON, lines)
	if len(envoy) != lines || len(istio) != lines {
		t.Fatalf("got %d envoy-json and %d istio-json records, want %d each", len(envoy), len(istio), lines)
	}
	for i := range envoy {
		if !reflect.DeepEqual(istio[i], envoy[i]) {
			t.Fatalf("line %d: istio-json record\n%+v\nwant the envoy-json record\n%+v", i+1, istio[i], envoy[i])
		}
	}
}

// readAll reads the generated log of format f into records without File and Line, their
// headers sorted by name: the key order differs between the shapes.
func readAll(t *testing.T, f Format, lines int) []accesslog.Record {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, Config{Seed: 5, Lines: lines, Format: f}); err != nil {
		t.Fatal(err)
	}
	r, err := accesslog.NewReader(string(f), &buf, accesslog.Options{Headers: policyHeaders})
	if err != nil {
		t.Fatal(err)
	}
	var out []accesslog.Record
	for {
		var rec accesslog.Record
		err := r.Read(&rec)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		rec.File, rec.Line = "", 0
		slices.SortFunc(rec.Headers, func(a, b accesslog.Header) int { return strings.Compare(a.Name, b.Name) })
		out = append(out, rec)
	}
}

// istioDefaultKeys are the keys of Istio's default JSON access-log format.
var istioDefaultKeys = []string{
	"authority", "bytes_received", "bytes_sent", "connection_termination_details",
	"downstream_local_address", "downstream_remote_address", "duration", "method", "path",
	"protocol", "request_id", "requested_server_name", "response_code", "response_code_details",
	"response_flags", "route_name", "start_time", "upstream_cluster", "upstream_host",
	"upstream_local_address", "upstream_service_time", "upstream_transport_failure_reason",
	"user_agent", "x_forwarded_for",
}

// TestIstioKeys checks every istio-json line against the shape Envoy gives Istio's format: all
// of Istio's default keys and the added headers on every line, sorted, numbers as numbers and
// unset values as null.
func TestIstioKeys(t *testing.T) {
	want := slices.Sorted(slices.Values(append(slices.Clone(istioDefaultKeys), policyHeaders...)))
	var buf bytes.Buffer
	if err := Write(&buf, Config{Seed: 3, Lines: 5000, Format: IstioJSON}); err != nil {
		t.Fatal(err)
	}
	nulls := map[string]int{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		var keys []string
		values := map[string]any{}
		if _, err := dec.Token(); err != nil { // '{'
			t.Fatalf("line %d: %v", n, err)
		}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				t.Fatalf("line %d: %v", n, err)
			}
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("line %d: %s: %v", n, k, err)
			}
			keys = append(keys, k.(string))
			values[k.(string)] = v
			if v == nil {
				nulls[k.(string)]++
			}
		}
		if !slices.Equal(keys, want) {
			t.Fatalf("line %d: got keys %q, want %q", n, keys, want)
		}
		for _, k := range []string{"bytes_received", "bytes_sent", "duration", "response_code"} {
			if _, ok := values[k].(json.Number); !ok {
				t.Fatalf("line %d: %s is %#v, want a number", n, k, values[k])
			}
		}
		for k, want := range map[string]string{"response_code_details": "via_upstream", "route_name": "default", "response_flags": "-"} {
			if got := values[k]; got != want {
				t.Fatalf("line %d: got %s %#v, want %q", n, k, got, want)
			}
		}
		if c, _ := values["upstream_cluster"].(string); !strings.HasPrefix(c, "outbound|8080||") || !strings.HasSuffix(c, ".default.svc.cluster.local") {
			t.Fatalf("line %d: upstream_cluster %q, want outbound|8080||SERVICE.default.svc.cluster.local", n, c)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	// Envoy prints an operator without a value as null: these two always, the headers when the
	// request lacked them.
	for _, k := range []string{"connection_termination_details", "upstream_transport_failure_reason", "x-api-key", "x-ja4", "x-tenant-id", "authorization"} {
		if nulls[k] == 0 {
			t.Errorf("no line has %s null", k)
		}
	}
}

func TestService(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/v1/orders", "orders"},
		{"/v1/orders/42", "orders"},
		{"/catalog/items?page=3", "catalog"},
		{"/catalog/search?q=1", "catalog"},
		{"/v1/dashboard/widgets/7", "dashboard"},
		{"/", "web"},
		{"", "web"},
	} {
		if got := service(tc.path); got != tc.want {
			t.Errorf("service(%q): got %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Format
		ok   bool
	}{
		{"envoy-json", EnvoyJSON, true},
		{"envoy-text", EnvoyText, true},
		{"istio-json", IstioJSON, true},
		{"", "", false},
		{"xml", "", false},
		{"Istio-JSON", "", false},
	} {
		got, err := ParseFormat(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseFormat(%q): got %q, %v, want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestAppendAllocs(t *testing.T) {
	g := newGenerator(1, DefaultStart.UnixMilli(), 4)
	var req Request
	g.next(&req)
	line := make([]byte, 0, 4096)
	for _, tc := range []struct {
		name   string
		append func([]byte) []byte
	}{
		{"AppendIstioJSON", req.AppendIstioJSON},
		{"AppendText", req.AppendText},
	} {
		if got := testing.AllocsPerRun(100, func() { line = tc.append(line[:0]) }); got != 0 {
			t.Errorf("%s: got %v allocations per line, want 0", tc.name, got)
		}
	}
}
